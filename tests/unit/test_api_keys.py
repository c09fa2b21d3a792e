"""API keys without a network: the keys file, minting, the token bucket and the gate's decisions.

The gate runs on a hand-driven clock here, so rates are exact; tests/test_gateway_door_security.py
proves the same behaviour through a real gateway process.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from libs.serving import keys
from libs.serving.auth import (
    REASON_MALFORMED,
    REASON_MISSING,
    REASON_RATE,
    REASON_STREAMS,
    REASON_UNKNOWN,
    ApiKeyGate,
    AuthSettings,
    Refusal,
    TokenBucket,
)
from libs.serving.keys import KeysFile, KeysFileError, StoredKey, hash_key, mint_key, parse_keys


class Clock:
    def __init__(self) -> None:
        self.now_s = 1000.0

    def __call__(self) -> float:
        return self.now_s


def _keys_file(path: Path, *lines: StoredKey) -> Path:
    path.write_text("# keys of the test\n" + "".join(line.line() + "\n" for line in lines), encoding="utf-8")
    return path


def _gate(path: Path, clock: Clock, refused: list[str] | None = None, **settings: float) -> ApiKeyGate:
    auth = AuthSettings(api_keys_file=str(path), api_keys_reload_s=1.0, **settings)  # type: ignore[arg-type]
    on_refused = refused.append if refused is not None else (lambda reason: None)
    return ApiKeyGate(KeysFile(str(path), 1.0, clock=clock), auth, clock=clock, on_refused=on_refused)


def test_a_minted_key_is_stored_only_as_its_hash(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "keys.jsonl"
    assert keys.main(["new", "--name", "app1", "--rate-per-s", "5", "--max-streams", "2", "--append", str(path)]) == 0
    printed = capsys.readouterr().out.splitlines()
    key = printed[1]
    assert key.startswith("tts_") and len(key) == len("tts_") + 43
    stored = path.read_text(encoding="utf-8")
    assert key not in stored and key[4:] not in stored
    [(digest, entry)] = parse_keys(stored).items()
    assert digest == hash_key(key) and entry.key_id == "app1"
    assert (entry.rate_per_s, entry.burst, entry.max_streams) == (5.0, None, 2)
    assert json.loads(printed[-1]) == json.loads(stored)
    assert mint_key() != mint_key()


@pytest.mark.parametrize(
    ("line", "complaint"),
    [
        ("tts_plainkey", "not a JSON object"),
        ('{"id": "a", "sha256": "tts_abc"}', "64 lower-case hex"),
        ('{"id": "a b", "sha256": "' + "0" * 64 + '"}', "id must be"),
        ('{"id": "a", "sha256": "' + "0" * 64 + '", "rate_per_s": 0}', "rate_per_s must be a number of at least"),
        ('{"id": "a", "sha256": "' + "0" * 64 + '", "max_streams": 1.5}', "max_streams must be a whole number"),
        ('{"id": "a", "sha256": "' + "0" * 64 + '", "limit": 3}', "unknown fields limit"),
        ('{"id": "a", "sha256": "' + "0" * 64 + '", "tier": "turbo"}', "tier must be one of quality, fast, auto"),
    ],
)
def test_a_malformed_keys_file_line_is_refused_with_its_line_number(line: str, complaint: str) -> None:
    with pytest.raises(KeysFileError) as caught:
        parse_keys(f"# header\n\n{line}\n")
    assert str(caught.value).startswith("line 3:") and complaint in str(caught.value)


def test_one_key_listed_twice_or_one_id_used_twice_is_refused() -> None:
    digest = hash_key(mint_key())
    with pytest.raises(KeysFileError, match="listed twice"):
        parse_keys(StoredKey("a", digest).line() + "\n" + StoredKey("b", digest).line())
    with pytest.raises(KeysFileError, match="used twice"):
        parse_keys(StoredKey("a", digest).line() + "\n" + StoredKey("a", hash_key(mint_key())).line())


def test_token_bucket_allows_the_burst_then_the_rate_and_says_when_to_retry() -> None:
    bucket = TokenBucket(rate_per_s=2.0, burst=3.0, now_s=0.0)
    assert [bucket.take(0.0) for _ in range(3)] == [0.0, 0.0, 0.0]
    assert bucket.take(0.0) == pytest.approx(0.5)
    assert bucket.take(0.25) == pytest.approx(0.25)  # half a token came back
    assert bucket.take(0.5) == 0.0
    assert bucket.take(100.0) == 0.0 and bucket.take(100.0) == 0.0 and bucket.take(100.0) == 0.0  # refilled to the burst only
    assert bucket.take(100.0) > 0


def test_callers_without_a_valid_key_are_unauthenticated_and_never_see_what_they_sent(tmp_path: Path) -> None:
    key = mint_key()
    refused: list[str] = []
    gate = _gate(_keys_file(tmp_path / "keys", StoredKey("app1", hash_key(key))), Clock(), refused)
    wrong = mint_key()
    for header, reason in ((None, REASON_MISSING), ("", REASON_MISSING), (f"Basic {key}", REASON_MALFORMED),
                           (key, REASON_MALFORMED), (f"Bearer {wrong}", REASON_UNKNOWN),
                           ("Bearer " + "x" * 10_000, REASON_MALFORMED)):  # fmt: skip
        with pytest.raises(Refusal) as caught:
            gate.admit(header, stream=False)
        assert caught.value.reason == reason and caught.value.unauthenticated
        assert wrong not in str(caught.value) and key not in str(caught.value) and "x" * 100 not in str(caught.value)
        assert "authorization: Bearer <key>" in str(caught.value) or "ask for a new one" in str(caught.value)
    assert refused == [REASON_MISSING, REASON_MISSING, REASON_MALFORMED, REASON_MALFORMED, REASON_UNKNOWN, REASON_MALFORMED]
    assert gate.admit(f"bearer  {key} ", stream=False).key_id == "app1"  # scheme in any case, spaces around


def test_a_key_over_its_rate_is_refused_with_a_retry_hint_while_another_key_is_served(tmp_path: Path) -> None:
    hammer, calm = mint_key(), mint_key()
    clock = Clock()
    path = _keys_file(tmp_path / "keys", StoredKey("hammer", hash_key(hammer), rate_per_s=1.0, burst=2.0), StoredKey("calm", hash_key(calm)))
    gate = _gate(path, clock, api_key_rate_per_s=5.0, api_key_burst=5.0)
    outcomes = []
    for _ in range(50):
        try:
            gate.admit(f"Bearer {hammer}", stream=False)
            outcomes.append("ok")
        except Refusal as refusal:
            assert refusal.reason == REASON_RATE and not refusal.unauthenticated
            assert refusal.retry_after_s == pytest.approx(1.0)
            assert str(refusal) == "API key hammer is over its rate of 1 requests/s (burst 2); retry in 1 s"
            outcomes.append("refused")
    assert outcomes.count("ok") == 2
    # The other key has its own bucket: its own burst of 5 is whole.
    assert [gate.admit(f"Bearer {calm}", stream=False).key_id for _ in range(5)] == ["calm"] * 5
    clock.now_s += 1.0
    assert gate.admit(f"Bearer {hammer}", stream=False).key_id == "hammer"


def test_a_key_holds_at_most_its_streams_and_gets_them_back_when_they_end(tmp_path: Path) -> None:
    one, other = mint_key(), mint_key()
    path = _keys_file(tmp_path / "keys", StoredKey("one", hash_key(one), max_streams=1), StoredKey("other", hash_key(other)))
    gate = _gate(path, Clock(), api_key_max_streams=4)
    first = gate.admit(f"Bearer {one}", stream=True)
    with pytest.raises(Refusal) as caught:
        gate.admit(f"Bearer {one}", stream=True)
    assert caught.value.reason == REASON_STREAMS and caught.value.retry_after_s and "retry when one ends" in str(caught.value)
    assert gate.admit(f"Bearer {one}", stream=False).key_id == "one"  # ListVoices holds no stream
    others = [gate.admit(f"Bearer {other}", stream=True) for _ in range(4)]  # the default of 4
    first.release()
    first.release()  # twice is once
    second = gate.admit(f"Bearer {one}", stream=True)
    with pytest.raises(Refusal):
        gate.admit(f"Bearer {one}", stream=True)
    for grant in [second, *others]:
        grant.release()
    assert gate.open_streams("one") == gate.open_streams("other") == 0


def test_the_keys_file_reloads_when_it_changes_and_a_broken_change_keeps_the_old_keys(tmp_path: Path) -> None:
    old, new = mint_key(), mint_key()
    clock = Clock()
    path = _keys_file(tmp_path / "keys", StoredKey("old", hash_key(old)))
    gate = _gate(path, clock)
    _keys_file(path, StoredKey("new", hash_key(new)))
    assert gate.admit(f"Bearer {old}", stream=False).key_id == "old"  # not looked at again yet
    clock.now_s += 1.0
    assert gate.admit(f"Bearer {new}", stream=False).key_id == "new"
    with pytest.raises(Refusal, match="unknown or revoked"):
        gate.admit(f"Bearer {old}", stream=False)
    path.write_text("not json\n", encoding="utf-8")
    clock.now_s += 1.0
    assert gate.admit(f"Bearer {new}", stream=False).key_id == "new"


def test_a_keys_file_that_cannot_be_read_stops_the_gateway_at_start(tmp_path: Path) -> None:
    with pytest.raises(KeysFileError, match=r"--api-keys-file .*cannot read it"):
        ApiKeyGate.from_settings(AuthSettings(api_keys_file=str(tmp_path / "missing")))
    broken = tmp_path / "broken"
    broken.write_text('{"id": "a"}\n', encoding="utf-8")
    with pytest.raises(KeysFileError, match=r"--api-keys-file .*line 1: a: sha256 must be"):
        ApiKeyGate.from_settings(AuthSettings(api_keys_file=str(broken)))
    assert ApiKeyGate.from_settings(AuthSettings()) is None  # no file: no keys asked


def test_new_limits_in_the_keys_file_apply_to_a_key_already_in_use(tmp_path: Path) -> None:
    key = mint_key()
    clock = Clock()
    path = _keys_file(tmp_path / "keys", StoredKey("app", hash_key(key), rate_per_s=1.0, burst=1.0))
    gate = _gate(path, clock)
    gate.admit(f"Bearer {key}", stream=False)
    with pytest.raises(Refusal, match="over its rate of 1 requests/s"):
        gate.admit(f"Bearer {key}", stream=False)
    _keys_file(path, StoredKey("app", hash_key(key), rate_per_s=100.0, burst=3.0))
    clock.now_s += 1.0  # the file is looked at again; the second before the change refilled at the old rate
    gate.admit(f"Bearer {key}", stream=False)
    with pytest.raises(Refusal, match=r"over its rate of 100 requests/s \(burst 3\); retry in 0.1 s"):
        gate.admit(f"Bearer {key}", stream=False)
    clock.now_s += 0.05  # five tokens' worth at the new rate, held up to the new burst
    assert [gate.admit(f"Bearer {key}", stream=False).key_id for _ in range(3)] == ["app"] * 3
    with pytest.raises(Refusal):
        gate.admit(f"Bearer {key}", stream=False)


def test_a_key_names_the_tier_its_requests_that_name_none_are_spoken_in(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "keys.jsonl"
    assert keys.main(["new", "--name", "agent", "--tier", "auto", "--append", str(path)]) == 0
    key = capsys.readouterr().out.splitlines()[1]
    [entry] = parse_keys(path.read_text(encoding="utf-8")).values()
    assert entry.tier == "auto"
    gate = _gate(path, Clock())
    assert gate.admit(f"Bearer {key}", stream=True).tier == "auto"
    assert gate.admit(f"Bearer {key}", stream=False).tier == "auto"
    plain = mint_key()
    gate = _gate(_keys_file(tmp_path / "plain", StoredKey("plain", hash_key(plain))), Clock())
    assert gate.admit(f"Bearer {plain}", stream=True).tier == ""
