"""Every encoding through the real gateway: the concatenated audio of a Synthesize stream is one valid
stream that decodes to the same speech as LINEAR_PCM at the same rate (synthesis is deterministic,
so the samples before encoding are the same), and the pieces' timeline adds up to its length."""

from __future__ import annotations

import grpc
import numpy as np
import pytest

from libs.encoding.encoders import ENCODINGS, encoding_of
from libs.pb.tts.v1 import tts_pb2, tts_pb2_grpc
from tests.support.mesh import Mesh
from tests.unit.test_encoding_codecs import LOSSY, aligned_correlation, decode

TEXT = "Encodings carry the same voice. Each one decodes to what the mesh said."


def _speak(mesh: Mesh, encoding: int, sample_rate_hz: int = 0) -> list[tts_pb2.SynthesizeResponse]:
    with grpc.insecure_channel(mesh.gateway_address) as channel:
        request = tts_pb2.SynthesizeRequest(text=TEXT, encoding=encoding, sample_rate_hz=sample_rate_hz)
        return list(tts_pb2_grpc.TextToSpeechStub(channel).Synthesize(request, timeout=120))


@pytest.mark.parametrize(
    "encoding", [value for value in sorted(ENCODINGS) if value != tts_pb2.LINEAR_PCM], ids=tts_pb2.AudioEncoding.Name
)
def test_every_encoding_decodes_to_the_pcm_the_mesh_speaks(mesh: Mesh, encoding: int) -> None:
    responses = _speak(mesh, encoding)
    rate_hz = responses[0].sample_rate_hz
    assert rate_hz == (encoding_of(encoding).default_rate_hz or 22050)
    assert {response.encoding for response in responses} == {encoding}
    reference = np.frombuffer(
        b"".join(r.audio for r in _speak(mesh, tts_pb2.LINEAR_PCM, rate_hz)), dtype="<i2"
    ).astype(np.float32) / 32767.0
    decoded = decode(encoding, b"".join(response.audio for response in responses), rate_hz)
    timeline_s = responses[-1].audio_offset_s + responses[-1].audio_duration_s
    assert timeline_s == pytest.approx(len(reference) / rate_hz, abs=1.5 / rate_hz)
    min_correlation, frame = LOSSY.get(encoding, (0.9999, 0))
    assert abs(len(decoded) - len(reference)) <= frame, (len(decoded), len(reference))
    assert aligned_correlation(reference, decoded, max_lag=frame) >= min_correlation


def test_a_rate_the_encoding_cannot_carry_is_refused_with_the_rates_it_can(mesh: Mesh) -> None:
    with pytest.raises(grpc.RpcError) as raised:
        _speak(mesh, tts_pb2.OGG_OPUS, 22050)
    assert raised.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "8000, 12000, 16000, 24000, 48000" in raised.value.details()
