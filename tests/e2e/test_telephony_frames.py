"""Telephone audio from the gRPC and HTTP doors: 8 kHz G.711 cut into frames of exactly 20 ms (the
last padded with the codec's silence) that leave in real time, each the bytes of the unframed
stream, placed on its timeline."""

from __future__ import annotations

import time

import grpc
import httpx
import pytest

from libs.pb.tts.v1 import tts_pb2, tts_pb2_grpc
from tests.support.mesh import Mesh

TEXT = "Thank you for calling. Please hold."


def _unframed(mesh: Mesh, encoding: int) -> bytes:
    with grpc.insecure_channel(mesh.gateway_address) as channel:
        return b"".join(r.audio for r in tts_pb2_grpc.TextToSpeechStub(channel).Synthesize(
            tts_pb2.SynthesizeRequest(text=TEXT, encoding=encoding), timeout=120))  # fmt: skip


@pytest.mark.parametrize(("encoding", "silence"), [(tts_pb2.MULAW, b"\xff"), (tts_pb2.ALAW, b"\xd5")])
def test_grpc_frames_are_20_ms_of_the_same_g711_bytes_paced_in_real_time(mesh: Mesh, encoding: int, silence: bytes) -> None:
    arrivals = []
    with grpc.insecure_channel(mesh.gateway_address) as channel:
        request = tts_pb2.SynthesizeRequest(text=TEXT, encoding=encoding, frame_ms=20)
        for response in tts_pb2_grpc.TextToSpeechStub(channel).Synthesize(request, timeout=120):
            arrivals.append((time.monotonic(), response))
    frames = [response for _, response in arrivals if response.audio]
    assert {len(frame.audio) for frame in frames} == {160}
    assert [frame.audio_offset_s for frame in frames] == pytest.approx([0.02 * index for index in range(len(frames))])
    unframed = _unframed(mesh, encoding)
    joined = b"".join(frame.audio for frame in frames)
    assert joined[: len(unframed)] == unframed and joined[len(unframed) :] == silence * (len(joined) - len(unframed))
    spread_s = arrivals[-1][0] - arrivals[0][0]
    assert spread_s >= 0.02 * (len(frames) - 1) - 0.05  # never faster than real time
    assert sum(frame.sentence_end for frame in frames) == 2 and frames[-1].resume_point.token


def test_http_frames_are_paced_mulaw_bytes_of_the_same_stream(mesh: Mesh) -> None:
    body = {"input": TEXT, "response_format": "mulaw", "frame_ms": 20}
    started = time.monotonic()
    audio = httpx.post(f"{mesh.http_url}/v1/audio/speech", json=body, timeout=120).content
    elapsed_s = time.monotonic() - started
    unframed = _unframed(mesh, tts_pb2.MULAW)
    assert len(audio) % 160 == 0 and audio[: len(unframed)] == unframed
    assert elapsed_s >= len(audio) / 8000 - 0.1  # it took the audio's own time to arrive
    refused = httpx.post(f"{mesh.http_url}/v1/audio/speech", json={**body, "response_format": "mp3"}, timeout=30)
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "frame_ms"
