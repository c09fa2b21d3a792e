"""The sealed cache: values encrypted and authenticated with AES-256-GCM, bound to their Redis key,
opened with any configured key; whoever writes to Redis without the key gets only misses.

The key ring is checked on its own, then through MelCache on a real Redis (with a password, as
`make run` runs it), where a forger writes values straight into Redis.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import redis

from libs.cache.codec import AudioHead, CacheFormatError, decode_head, decode_mel, encode_head, encode_mel
from libs.cache.keys import head_key
from libs.cache.mel_cache import OUTCOME_CORRUPT, OUTCOME_ERROR, OUTCOME_HIT, OUTCOME_UNAUTHENTIC, MelCache
from libs.cache.sealing import KeyFileError, KeyRing, SealError, new_key_line
from libs.cache.settings import CacheSettings, redacted_url
from libs.devmesh.embedded_redis import EmbeddedRedis, EmbeddedRedisConfig
from libs.settings.files import SettingFileError
from tests.support.ports import free_port

KEY = "tts:mel:v1:" + "ab" * 32
OTHER_KEY = "tts:mel:v1:" + "cd" * 32
PASSWORD = "test-password-123"


def _ring(*ids: str) -> KeyRing:
    return KeyRing.parse("\n".join(new_key_line(key_id) for key_id in ids))


def _mel(seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(80, 30)).astype(np.float16).astype(np.float32)


def test_a_sealed_value_opens_only_under_its_own_redis_key_and_unaltered() -> None:
    ring = _ring("k1")
    plain = encode_mel(_mel())
    sealed = ring.seal(KEY, plain)
    assert ring.unseal(KEY, sealed) == plain
    assert plain[24:64] not in sealed  # the layout is not readable in Redis
    assert ring.seal(KEY, plain) != sealed  # a fresh nonce each time
    with pytest.raises(SealError, match="stored under another key"):
        ring.unseal(OTHER_KEY, sealed)
    for position in (6, 8, 30, len(sealed) - 1):  # key id, nonce, ciphertext, tag
        altered = bytearray(sealed)
        altered[position] ^= 0x01
        with pytest.raises(SealError):
            ring.unseal(KEY, bytes(altered))
    with pytest.raises(SealError, match="not a version-1 sealed value"):
        ring.unseal(KEY, plain)
    with pytest.raises(SealError):
        ring.unseal(KEY, sealed[:20])


def test_keys_rotate_new_values_take_the_first_key_and_old_ones_still_open() -> None:
    old_line = new_key_line("2025-01")
    sealed_by_old = KeyRing.parse(old_line).seal(KEY, b"value")
    rotated = KeyRing.parse(new_key_line("2025-06") + "\n" + old_line)
    assert rotated.current_id == "2025-06"
    assert rotated.seal(KEY, b"new")[6:13] == b"2025-06"
    assert rotated.unseal(KEY, sealed_by_old) == b"value"
    with pytest.raises(SealError, match="fails authentication with key '2025-01'"):
        KeyRing.parse(new_key_line("2025-01")).unseal(KEY, sealed_by_old)  # the same id with another secret
    with pytest.raises(SealError, match="which this gateway does not have"):
        _ring("k9").unseal(KEY, sealed_by_old)


@pytest.mark.parametrize(
    ("text", "complaint"),
    [
        ("", "holds no key"),
        ("k1 c2VjcmV0", "line 1 is not KEY_ID:BASE64"),
        ("k1:not base64!", "line 1: the key after ':' is not base64"),
        ("k1:" + base64.b64encode(b"short").decode(), "line 1: key 'k1' is 5 bytes; AES-256 needs 32"),
        ("bad id:" + base64.b64encode(bytes(32)).decode(), "line 1: a key id is"),
    ],
)
def test_a_malformed_key_file_names_the_line_and_never_the_key(tmp_path: Path, text: str, complaint: str) -> None:
    path = tmp_path / "cache-key"
    path.write_text(text, encoding="ascii")
    with pytest.raises(KeyFileError) as caught:
        KeyRing.from_file(path)
    assert isinstance(caught.value, SettingFileError)
    assert complaint in str(caught.value) and str(path) in str(caught.value)
    assert "c2VjcmV0" not in str(caught.value)


def test_a_key_file_with_the_same_id_twice_is_refused() -> None:
    with pytest.raises(KeyFileError, match="unique"):
        KeyRing.parse(new_key_line("k1") + "\n" + new_key_line("k1"))


@pytest.fixture()
def locked_redis() -> Iterator[EmbeddedRedis]:
    """A real Redis that asks for a password."""
    with EmbeddedRedis(EmbeddedRedisConfig(port=free_port(), maxmemory_mb=16, password=PASSWORD)) as server:
        yield server


def _cache(server: EmbeddedRedis, key_file: Path | None, outcomes: list[str], **settings: object) -> MelCache:
    url = settings.pop("redis_url", server.url)
    config = CacheSettings(redis_url=url, ttl_s=60, timeout_ms=500, audio_head_ms=200, key_file=str(key_file or ""), **settings)  # type: ignore[arg-type]
    return MelCache.from_settings(config, on_outcome=outcomes.append)


def _key_file(tmp_path: Path, *ids: str) -> Path:
    path = tmp_path / "cache-key"
    path.write_text("\n".join(new_key_line(key_id) for key_id in ids) + "\n", encoding="ascii")
    return path


async def test_sealed_values_round_trip_through_redis_and_are_sealed_there(locked_redis: EmbeddedRedis, tmp_path: Path) -> None:
    outcomes: list[str] = []
    cache = _cache(locked_redis, _key_file(tmp_path, "k1"), outcomes)
    mel = _mel(1)
    head = AudioHead("vocoder-v1", 22050, np.linspace(-0.5, 0.5, 4410, dtype=np.float32))
    try:
        assert cache.sealed
        assert await cache.put(KEY, mel, [3, 4]) and await cache.put_head(KEY, head)
        cached = await cache.get(KEY)
    finally:
        await cache.close()
    assert cached is not None and np.array_equal(cached.mel, mel) and cached.phoneme_frames == (3, 4)
    assert cached.head is not None and np.array_equal(cached.head.samples, head.samples)
    raw = redis.Redis.from_url(locked_redis.url)
    try:
        assert raw.get(KEY)[:4] == b"TSEA" and raw.get(head_key(KEY))[:4] == b"TSEA"  # type: ignore[index]
    finally:
        raw.close()
    assert outcomes.count(OUTCOME_HIT) == 1


async def test_values_written_to_redis_without_the_key_are_misses_never_audio(locked_redis: EmbeddedRedis, tmp_path: Path) -> None:
    outcomes: list[str] = []
    cache = _cache(locked_redis, _key_file(tmp_path, "k1"), outcomes)
    forger = redis.Redis.from_url(locked_redis.url)
    try:
        # Someone with Redis access but no key: a well-formed plain mel, and a loud head at a bogus rate.
        forger.set(KEY, encode_mel(_mel(2)))
        assert await cache.get(KEY) is None
        assert outcomes[-1] == OUTCOME_UNAUTHENTIC
        # A genuine sealed mel copied under another sentence's key is refused too.
        assert await cache.put(OTHER_KEY, _mel(3))
        forger.set(KEY, forger.get(OTHER_KEY))  # type: ignore[arg-type]
        assert await cache.get(KEY) is None
        assert outcomes[-1] == OUTCOME_UNAUTHENTIC
        # A real mel with a forged plain head: the mel is a hit, the head is dropped.
        assert await cache.put(KEY, _mel(4))
        forger.set(head_key(KEY), encode_head(AudioHead("vocoder-v1", 8000, np.ones(800, dtype=np.float32))))
        cached = await cache.get(KEY)
        assert cached is not None and cached.head is None
        assert outcomes[-2:] == [OUTCOME_HIT, OUTCOME_UNAUTHENTIC]
        # The genuine head copied from another sentence does not play for this one.
        await cache.put_head(OTHER_KEY, AudioHead("vocoder-v1", 22050, np.zeros(100, dtype=np.float32)))
        forger.set(head_key(KEY), forger.get(head_key(OTHER_KEY)))  # type: ignore[arg-type]
        cached = await cache.get(KEY)
        assert cached is not None and cached.head is None
    finally:
        forger.close()
        await cache.close()


async def test_a_gateway_without_the_key_or_with_a_retired_key_only_misses(locked_redis: EmbeddedRedis, tmp_path: Path) -> None:
    writer_outcomes: list[str] = []
    writer = _cache(locked_redis, _key_file(tmp_path, "k1"), writer_outcomes)
    assert await writer.put(KEY, _mel(5))
    await writer.close()
    plain_outcomes: list[str] = []
    plain = _cache(locked_redis, None, plain_outcomes)
    other_dir = tmp_path / "other"
    other_dir.mkdir()
    other_outcomes: list[str] = []
    other = _cache(locked_redis, _key_file(other_dir, "k2"), other_outcomes)
    try:
        assert await plain.get(KEY) is None and plain_outcomes == [OUTCOME_CORRUPT]
        assert await other.get(KEY) is None and other_outcomes == [OUTCOME_UNAUTHENTIC]
    finally:
        await plain.close()
        await other.close()


async def test_redis_with_a_password_works_from_the_url_or_a_file_and_not_without(
    locked_redis: EmbeddedRedis, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    password_file = tmp_path / "redis-password"
    password_file.write_text(PASSWORD + "\n", encoding="ascii")
    bare_url = f"redis://127.0.0.1:{locked_redis.config.port}/0"
    for settings in ({}, {"redis_url": bare_url, "redis_password_file": str(password_file)}):
        outcomes: list[str] = []
        with caplog.at_level(logging.INFO, logger="libs.cache.mel_cache"):
            cache = _cache(locked_redis, None, outcomes, **settings)
        assert f"127.0.0.1:{locked_redis.config.port}/0" in caplog.text and PASSWORD not in caplog.text
        try:
            assert await cache.put(KEY, _mel(6)) and await cache.get(KEY) is not None
        finally:
            await cache.close()
        assert outcomes == ["written", OUTCOME_HIT]
    outcomes = []
    anonymous = _cache(locked_redis, None, outcomes, redis_url=bare_url)
    try:
        assert await anonymous.get(KEY) is None
    finally:
        await anonymous.close()
    assert outcomes == [OUTCOME_ERROR]  # refused by Redis: a miss, never an exception


def test_a_password_in_both_the_url_and_a_file_is_refused_and_an_empty_file_named(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not both"):
        CacheSettings(redis_url="redis://:secret@127.0.0.1:6379/0", redis_password_file=str(tmp_path / "x"))
    empty = tmp_path / "empty"
    empty.write_text("\n", encoding="ascii")
    with pytest.raises(SettingFileError, match=r"--redis-password-file .* is empty"):
        MelCache.from_settings(CacheSettings(redis_password_file=str(empty)))


def test_plain_values_with_values_no_vocoder_makes_are_corrupt() -> None:
    """Without a cache key the layout's own checks are the last line: finite values, a plausible head."""
    nan_mel = _mel(7)
    nan_mel[3, 4] = np.nan
    with pytest.raises(CacheFormatError, match="not finite"):
        decode_mel(encode_mel(nan_mel))
    with pytest.raises(CacheFormatError, match="outside 8000-192000 Hz"):
        decode_head(encode_head(AudioHead("v", 1, np.zeros(1, dtype=np.float32))))
    with pytest.raises(CacheFormatError, match="longer than 5000 ms"):
        decode_head(encode_head(AudioHead("v", 8000, np.zeros(40_001, dtype=np.float32))))
    with pytest.raises(CacheFormatError, match="not finite"):
        decode_head(encode_head(AudioHead("v", 22050, np.array([0.0, np.inf], dtype=np.float32))))
    assert decode_head(encode_head(AudioHead("v", 22050, np.zeros(4410, dtype=np.float32)))).sample_rate_hz == 22050


def test_a_redis_url_is_logged_only_without_its_password() -> None:
    assert redacted_url("redis://:s3cr%2Ft@cache:6380/1") == "redis://:***@cache:6380/1"
    assert redacted_url("rediss://app:pw@[::1]:6379/0") == "rediss://app:***@[::1]:6379/0"
    assert redacted_url("redis://cache:6379/0") == "redis://cache:6379/0"
