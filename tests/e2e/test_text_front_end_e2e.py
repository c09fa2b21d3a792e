"""The text front end through the real mesh: written forms spoken and shown as words, the same cache
entry as their spoken form, heteronyms, inline phonemes, a request's lexicon, the server's lexicon
file reloaded without a restart, and INVALID_ARGUMENT naming a phoneme the voice lacks."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import grpc
import httpx
import numpy as np
import pytest

from libs.pb.tts.v1 import tts_pb2, tts_pb2_grpc
from libs.text.normalizer.numbers import cardinal
from tests.support.client import synthesize
from tests.support.gateway_process import extra_gateway
from tests.support.mesh import Mesh

_CACHE_HITS = 'tts_gateway_cache_operations_total{outcome="hit"}'


def _sentences(spoken) -> list[tts_pb2.SentenceInfo]:  # type: ignore[no-untyped-def]
    return [response.sentence for response in spoken.responses if response.HasField("sentence")]


def test_a_written_form_is_spoken_as_words_and_shares_the_cache_entry_of_its_spoken_form(mesh: Mesh) -> None:
    tag = str(uuid.uuid4().int % 1000 + 1)  # a sentence no other test has cached
    written = synthesize(mesh.gateway_address, f"Room {tag} costs $3.50 on Jan. 15th.")
    (info,) = _sentences(written)
    assert info.text == f"Room {cardinal(tag)} costs three dollars fifty on January fifteenth."
    assert [word.text for word in info.words] == ["Room", tag, "costs", "$3.50", "on", "Jan", "15th"]  # as written
    hits_before = mesh.metric("gateway", _CACHE_HITS)
    spoken = synthesize(mesh.gateway_address, info.text)
    assert _sentences(spoken)[0].phonemes == info.phonemes
    assert mesh.metric("gateway", _CACHE_HITS) == hits_before + 1
    assert np.array_equal(spoken.samples, written.samples)


def test_heteronyms_and_inline_phonemes_reach_the_voice(mesh: Mesh) -> None:
    (past,) = _sentences(synthesize(mesh.gateway_address, "I read that book last summer."))
    assert "ɹˈɛd" in past.phonemes
    (inline,) = _sentences(synthesize(mesh.gateway_address, "Say [[ h ə l ˈoʊ ]] to me."))
    assert "həlˈoʊ" in inline.phonemes


def test_a_request_lexicon_is_used_and_a_phoneme_outside_the_voice_is_invalid_argument(mesh: Mesh) -> None:
    (named,) = _sentences(synthesize(mesh.gateway_address, "Ask Nguyen today.", lexicon={"Nguyen": "ŋ w ˈɪ n"}))
    assert "ŋwˈɪn" in named.phonemes
    with grpc.insecure_channel(mesh.gateway_address) as channel:
        stub = tts_pb2_grpc.TextToSpeechStub(channel)
        for request in (
            tts_pb2.SynthesizeRequest(text="Go now.", lexicon={"go": "g ˈoʊ"}),
            tts_pb2.SynthesizeRequest(text="Say [[ g ˈoʊ ]] now."),
        ):
            with pytest.raises(grpc.RpcError) as caught:
                list(stub.Synthesize(request, timeout=30))
            assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "'g'" in caught.value.details() and "U+0067" in caught.value.details()


def test_streamed_text_is_read_the_same_way(mesh: Mesh) -> None:
    pieces = ["It costs $", "3.50 to", " ride. I read it", " yesterday."]
    with grpc.insecure_channel(mesh.gateway_address) as channel:
        stub = tts_pb2_grpc.TextToSpeechStub(channel)
        requests = [tts_pb2.StreamingSynthesizeRequest(config=tts_pb2.StreamingSynthesizeConfig(lexicon={"ride": "ɹˈaɪd"}))]
        requests += [tts_pb2.StreamingSynthesizeRequest(text=piece) for piece in pieces]
        responses = list(stub.StreamingSynthesize(iter(requests), timeout=60))
    infos = [response.sentence for response in responses if response.HasField("sentence")]
    assert [info.text for info in infos] == ["It costs three dollars fifty to ride.", "I read it yesterday."]
    assert "ɹˈɛd" in infos[1].phonemes


def test_the_server_lexicon_file_reloads_without_a_restart(mesh: Mesh, tmp_path: Path) -> None:
    lexicon = tmp_path / "lexicon.tsv"
    lexicon.write_text("Nguyen ŋwˈɪn\n", encoding="utf-8")
    args = ["--lexicon-file", str(lexicon), "--lexicon-check-s", "0.2"]
    with extra_gateway(mesh, tmp_path / "lexicon-gateway.log", args) as gateway:
        (before,) = _sentences(synthesize(gateway.address, "Ask Nguyen."))
        assert "ŋwˈɪn" in before.phonemes
        lexicon.write_text("Nguyen wˈɪn\n", encoding="utf-8")
        deadline = time.monotonic() + 20
        while True:
            (after,) = _sentences(synthesize(gateway.address, "Ask Nguyen."))
            if "ŋwˈɪn" not in after.phonemes or time.monotonic() > deadline:
                break
            time.sleep(0.3)
        assert "wˈɪn" in after.phonemes and "ŋwˈɪn" not in after.phonemes
        assert gateway.process.poll() is None


def test_a_bad_server_lexicon_file_stops_the_start_naming_its_line(mesh: Mesh, tmp_path: Path) -> None:
    lexicon = tmp_path / "bad-lexicon.tsv"
    lexicon.write_text("# names\nNguyen ŋwˈɪn\nGo g ˈoʊ\n", encoding="utf-8")
    with pytest.raises(RuntimeError) as failed:
        with extra_gateway(mesh, tmp_path / "bad-lexicon-gateway.log", ["--lexicon-file", str(lexicon)]):
            pass
    assert "line 3" in str(failed.value) and "'g'" in str(failed.value)


def test_the_http_door_takes_a_lexicon_and_names_a_bad_one(mesh: Mesh) -> None:
    body = {"model": "tts-1", "voice": "alloy", "input": "Ask Nguyen for $3.", "response_format": "wav"}
    answer = httpx.post(
        f"{mesh.http_url}/v1/audio/speech/captioned", json={**body, "lexicon": {"Nguyen": "ŋwˈɪn"}}, timeout=120
    )
    assert answer.status_code == 200, answer.text
    captioned = answer.json()
    assert [sentence["text"] for sentence in captioned["sentences"]] == ["Ask Nguyen for three dollars."]
    assert [word["word"] for word in captioned["words"]] == ["Ask", "Nguyen", "for", "$3"]
    bad = httpx.post(f"{mesh.http_url}/v1/audio/speech", json={**body, "lexicon": {"go": "g ˈoʊ"}}, timeout=30)
    assert bad.status_code == 400, bad.text
    error = bad.json()["error"]
    assert error["param"] == "lexicon" and "'g'" in error["message"]
