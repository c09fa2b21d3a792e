"""The default voice's two tiers through the whole mesh: a request picks one (gRPC enum, HTTP string),
the response says which spoke, both tiers vocode the very same mel (one cache entry) but each keeps
its own audio head, a stream resumes sample-exact in the tier it was spoken in, the metrics count
the tiers, and a tier that does not exist is INVALID_ARGUMENT naming the field."""

from __future__ import annotations

import uuid

import grpc
import httpx
import numpy as np
import pytest

from libs.audio.mel import mel_spectrogram
from libs.pb.tts.v1 import tts_pb2, tts_pb2_grpc
from libs.wire.headers import TIER_METADATA_KEY
from tests.support.mesh import Mesh

ACOUSTIC_SENTENCES = "tts_acoustic_sentences_total"


def _unique(text: str) -> str:
    return f"{text} Tier check {uuid.uuid4().int % 100000}."


def _speak(mesh: Mesh, text: str, **fields: object) -> tuple[str, list[tts_pb2.SynthesizeResponse]]:
    """The tier the response header names, and the responses."""
    with grpc.insecure_channel(mesh.gateway_address) as channel:
        call = tts_pb2_grpc.TextToSpeechStub(channel).Synthesize(tts_pb2.SynthesizeRequest(text=text, **fields), timeout=120)
        responses = list(call)
        return dict(call.initial_metadata())[TIER_METADATA_KEY], responses


def _samples(responses: list[tts_pb2.SynthesizeResponse]) -> np.ndarray:
    return np.frombuffer(b"".join(r.audio for r in responses), dtype="<i2").astype(np.float32) / 32767.0


def test_voices_list_their_tiers(mesh: Mesh) -> None:
    with grpc.insecure_channel(mesh.gateway_address) as channel:
        voices = tts_pb2_grpc.TextToSpeechStub(channel).ListVoices(tts_pb2.ListVoicesRequest(), timeout=30).voices
    default = next(voice for voice in voices if voice.is_default)
    assert list(default.tiers) == [tts_pb2.TIER_QUALITY, tts_pb2.TIER_FAST]
    listed = httpx.get(f"{mesh.http_url}/v1/audio/voices", timeout=30).json()["data"]
    assert next(voice for voice in listed if voice["default"])["tiers"] == ["quality", "fast"]


def test_both_tiers_speak_one_mel_each_with_its_own_audio_head(mesh: Mesh) -> None:
    text = _unique("Both tiers read the same words. Then they each speak them.")
    before = mesh.metric("acoustic", ACOUSTIC_SENTENCES)
    fast_before = mesh.metric("gateway", 'tts_gateway_streams_by_tier_total{asked="fast",tier="fast"}')
    tier, fast = _speak(mesh, text, tier=tts_pb2.TIER_FAST)
    assert tier == "fast"
    assert mesh.metric("gateway", 'tts_gateway_streams_by_tier_total{asked="fast",tier="fast"}') - fast_before == 1
    tier, quality = _speak(mesh, text)
    assert tier == "quality"
    sentences = sum(1 for response in quality if response.HasField("sentence"))
    assert sentences == 3
    assert mesh.metric("acoustic", ACOUSTIC_SENTENCES) - before == sentences, "the quality request read the fast one's mel from the cache"
    fast_audio, quality_audio = _samples(fast), _samples(quality)
    # One mel, one length; two vocoders, two waveforms that carry the same spectrum.
    assert len(fast_audio) == len(quality_audio) > 22050
    assert not np.array_equal(fast_audio, quality_audio)
    # The fast tier speaks the quality tier's sounds, not noise: an untrained student's frame loudness
    # runs against the teacher's (r about -0.8, log-mel L1 about 4.2), a trained one's with it (r about
    # 0.95, L1 under 0.8 after 500 steps). How good it sounds is `make bench-quality`'s to say.
    fast_mel, quality_mel = mel_spectrogram(fast_audio).numpy(), mel_spectrogram(quality_audio).numpy()
    frame_energy = np.corrcoef(fast_mel.mean(axis=0), quality_mel.mean(axis=0))[0, 1]
    distance = float(np.abs(fast_mel - quality_mel).mean())
    assert frame_energy > 0.8 and distance < 1.5, f"the fast tier strays from the quality tier: r = {frame_energy:.3f}, L1 = {distance:.2f}"
    # Warm, each tier starts from its own audio head and ends with the samples it made cold.
    heads_before = mesh.metric("gateway", 'tts_gateway_cache_operations_total{outcome="head_hit"}')
    assert np.array_equal(_samples(_speak(mesh, text, tier=tts_pb2.TIER_FAST)[1]), fast_audio)
    assert np.array_equal(_samples(_speak(mesh, text, tier=tts_pb2.TIER_QUALITY)[1]), quality_audio)
    assert mesh.metric("gateway", 'tts_gateway_cache_operations_total{outcome="head_hit"}') - heads_before == 2 * sentences


def test_auto_on_an_idle_mesh_speaks_in_the_quality_tier(mesh: Mesh) -> None:
    # The shared mesh runs without real-time admission, so nothing here degrades auto: this holds the
    # response header and the metric. The rule that a listener alone starts in quality wherever quality
    # keeps up is held by tests/integration/test_synthesizer_slots.py.
    before = mesh.metric("gateway", 'tts_gateway_streams_by_tier_total{asked="auto",tier="quality"}')
    tier, responses = _speak(mesh, _unique("Nobody else is speaking."), tier=tts_pb2.TIER_AUTO)
    assert tier == "quality" and _samples(responses).size > 0
    assert mesh.metric("gateway", 'tts_gateway_streams_by_tier_total{asked="auto",tier="quality"}') - before == 1


def test_a_fast_stream_resumes_sample_for_sample_in_the_fast_tier(mesh: Mesh) -> None:
    text = _unique("A stream in the fast tier breaks here. It goes on from its token, in the same tier.")
    _, whole = _speak(mesh, text, tier=tts_pb2.TIER_FAST)
    cut = len(whole) // 2
    tier, rest = _speak(mesh, text, tier=tts_pb2.TIER_AUTO, resume_token=whole[cut - 1].resume_point.token)
    assert tier == "fast", "the token names the tier it was spoken in"
    assert b"".join(r.audio for r in whole[:cut]) + b"".join(r.audio for r in rest) == b"".join(r.audio for r in whole)
    with grpc.insecure_channel(mesh.gateway_address) as channel, pytest.raises(grpc.RpcError) as other:
        request = tts_pb2.SynthesizeRequest(text=text, tier=tts_pb2.TIER_QUALITY, resume_token=whole[cut - 1].resume_point.token)
        list(tts_pb2_grpc.TextToSpeechStub(channel).Synthesize(request, timeout=60))
    assert other.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "tier" in (other.value.details() or "")


def test_the_http_door_takes_a_tier_by_name_and_says_which_spoke(mesh: Mesh) -> None:
    body = {"input": _unique("Spoken over HTTP."), "response_format": "pcm", "tier": "fast"}
    response = httpx.post(f"{mesh.http_url}/v1/audio/speech", json=body, timeout=120)
    assert response.status_code == 200 and response.headers[TIER_METADATA_KEY] == "fast" and len(response.content) > 0
    bad = httpx.post(f"{mesh.http_url}/v1/audio/speech", json={**body, "tier": "turbo"}, timeout=30)
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "tier" and "'turbo'" in bad.json()["error"]["message"]


def test_an_unknown_tier_is_invalid_argument_naming_the_field(mesh: Mesh) -> None:
    with grpc.insecure_channel(mesh.gateway_address) as channel, pytest.raises(grpc.RpcError) as caught:
        list(tts_pb2_grpc.TextToSpeechStub(channel).Synthesize(tts_pb2.SynthesizeRequest(text="Hello.", tier=7), timeout=30))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "tier 7" in (caught.value.details() or "") and "TIER_FAST" in (caught.value.details() or "")
