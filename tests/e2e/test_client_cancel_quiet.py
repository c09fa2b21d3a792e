"""A client that cancels mid-stream is routine: the real gateway and workers stop its work and log no
ERROR, whether the client was reading or had stopped (a send to it pending when it went)."""

from __future__ import annotations

import http.client
import json
import re
import time
import urllib.request
import uuid
from urllib.parse import urlsplit

import grpc

from libs.pb.tts.v1 import tts_pb2, tts_pb2_grpc
from tests.support.mesh import Mesh

ERROR_LINE = re.compile(r"^(.* ERROR .*|Traceback .*|E\d{4} .*)$", re.MULTILINE)
"""An ERROR record of the services' log format, a traceback, or gRPC core's own error line."""
LONG_TEXT = " ".join(f"Sentence number {n} of a text that is far too long to finish before the cancel." for n in range(30))


def _log_offsets(mesh: Mesh) -> dict[str, int]:
    return {name: service.log_path.stat().st_size for name, service in mesh.services.items()}


def _new_errors(mesh: Mesh, offsets: dict[str, int]) -> dict[str, list[str]]:
    found = {}
    for name, service in mesh.services.items():
        with service.log_path.open("rb") as log:
            log.seek(offsets[name])
            text = log.read().decode(errors="replace")
        found[name] = ERROR_LINE.findall(text)
    return found


def _wait_for_workers_to_let_go(mesh: Mesh) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if all(mesh.metric(name, f"tts_{name}_inflight_streams") == 0 for name in ("acoustic", "vocoder")):
            return
        time.sleep(0.2)
    raise AssertionError("the workers still hold the cancelled streams")


def test_cancels_while_reading_and_while_not_reading_log_no_error(mesh: Mesh) -> None:
    offsets = _log_offsets(mesh)
    cancelled_before = mesh.metric("gateway", 'tts_gateway_requests_total{code="CANCELLED",method="Synthesize"}')
    with grpc.insecure_channel(mesh.gateway_address) as channel:
        stub = tts_pb2_grpc.TextToSpeechStub(channel)
        for stop_reading_s in (0.0, 3.0):
            # Large pieces (48 kHz float) fill the flow-control windows soon once the client stops reading,
            # so the gateway is in the middle of a send when the cancel comes.
            request = tts_pb2.SynthesizeRequest(
                text=f"{LONG_TEXT} {uuid.uuid4().hex[:8]}", encoding=tts_pb2.FLOAT_PCM, sample_rate_hz=48000
            )
            call = stub.Synthesize(request, timeout=120)
            for _ in range(2):
                assert next(call).audio is not None
            time.sleep(stop_reading_s)
            call.cancel()
            _wait_for_workers_to_let_go(mesh)
    time.sleep(1.0)  # the last log lines of the cancelled calls
    assert mesh.metric("gateway", 'tts_gateway_requests_total{code="CANCELLED",method="Synthesize"}') == cancelled_before + 2
    assert _new_errors(mesh, offsets) == {name: [] for name in mesh.services}


def test_many_quick_cancels_leave_nothing_behind(mesh: Mesh) -> None:
    """Clients that take the first audio of a cached text and cancel, one after another, as fast as
    they can: every stream ends at the gateway (its place in the limits and its worker streams given
    back), none waits on for a cancellation that got lost on its way."""
    text = f"{uuid.uuid4().hex[:8]}. " + " ".join(f"Quick sentence {n} to cancel." for n in range(9))
    with grpc.insecure_channel(mesh.gateway_address) as channel:
        stub = tts_pb2_grpc.TextToSpeechStub(channel)
        list(stub.Synthesize(tts_pb2.SynthesizeRequest(text=text), timeout=120))  # cached from here on
        for _ in range(150):
            call = stub.Synthesize(tts_pb2.SynthesizeRequest(text=text), timeout=120)
            assert next(call).audio
            call.cancel()
            time.sleep(0.01)
    deadline = time.monotonic() + 10
    while mesh.metric("gateway", "tts_gateway_inflight_streams") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert mesh.metric("gateway", "tts_gateway_inflight_streams") == 0, "cancelled streams still held by the gateway"
    _wait_for_workers_to_let_go(mesh)


def test_http_clients_that_leave_mid_stream_leave_nothing_behind(mesh: Mesh) -> None:
    """Clients of the HTTP door that take the first bytes of a long text and hang up: Starlette cancels
    the response by scope (again on every turn of the loop until the task is out), and each stream
    still ends at the gateway, with its turn to start given back; then a new request is spoken."""
    host, port = urlsplit(mesh.http_url).hostname, urlsplit(mesh.http_url).port
    for n in range(8):
        body = json.dumps({"model": "tts-mesh", "voice": "alloy", "input": f"{uuid.uuid4().hex[:8]} {n}. {LONG_TEXT}", "response_format": "mp3"})
        connection = http.client.HTTPConnection(host, port, timeout=60)
        connection.request("POST", "/v1/audio/speech", body, {"Content-Type": "application/json"})
        response = connection.getresponse()
        assert response.status == 200 and response.read(2000)
        connection.close()  # gone mid-stream
        time.sleep(0.2)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and (
        mesh.metric("gateway", "tts_gateway_inflight_streams") or mesh.metric("gateway", "tts_gateway_streams_starting")
    ):
        time.sleep(0.2)
    assert mesh.metric("gateway", "tts_gateway_inflight_streams") == 0, "streams of departed HTTP clients still held"
    assert mesh.metric("gateway", "tts_gateway_streams_starting") == 0, "a departed client's turn to start never given back"
    _wait_for_workers_to_let_go(mesh)
    body = json.dumps({"input": "Still speaking.", "response_format": "wav"}).encode()
    request = urllib.request.Request(f"{mesh.http_url}/v1/audio/speech", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as answer:
        assert answer.status == 200 and len(answer.read()) > 10_000
