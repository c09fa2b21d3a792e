"""The client's deadline reaches every worker call, and a request that outlives it ends everywhere.

Real processes on loopback: the session mesh (tests/conftest.py `mesh`: Redis, acoustic, vocoder,
gateway) and extra gateways started with the fault harness (tests/faults/zone_mesh.py) in front of
one real worker and one hung worker. The hung worker is a gRPC server in this process that admits
every stream and never answers; it notes the deadline each call carries (`time_remaining()` as
the call arrives), which shows the gateway passes the client's remaining deadline on as the
worker call's own grpc-timeout rather than only enforcing it itself. The extra gateways get a long
attempt timeout, so nothing but the deadline ends a call to the hung worker.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from libs.pb.tts.acoustic.v1 import acoustic_pb2, acoustic_pb2_grpc
from libs.pb.tts.common.v1 import load_pb2
from libs.pb.tts.v1 import tts_pb2, tts_pb2_grpc
from libs.pb.tts.vocoder.v1 import vocoder_pb2_grpc
from libs.wire.headers import STREAM_ACCEPTED_METADATA
from tests.support.client import synthesize
from tests.support.faults.zone_mesh import ZoneMesh, wait_for
from tests.support.mesh import Mesh
from tests.support.servers import sync_server

pytestmark = pytest.mark.timeout(600)

ZONE = "zone-a"
PROMPT_MARGIN_S = 1.5
"""How long after the deadline the client's error, and the end of every worker call, may come."""
TRANSIT_MARGIN_S = 0.75
"""How much of the deadline the gateway may spend before it calls a worker (text side, routing)."""
TIMEOUT_ROUNDING_S = 0.05
"""How much longer than the client's deadline a worker may see: gRPC sends grpc-timeout rounded up
(to 1 ms below 1 s, to 10 ms below 10 s) on each hop, client -> gateway -> worker (measured: 9 ms)."""
WORKER_END_TIMEOUT_S = 15.0
"""How long a real worker, on shared cores, may take to finish the model step in progress and close the stream."""
GATEWAY_ENV = {"TTS_ATTEMPT_TIMEOUT_S": "30"}
"""No silence timeout or retry before the deadline: only the client's deadline ends a hung call."""


@dataclass
class HeldCall:
    """One stream a hung worker received."""

    remaining_s: float
    """`time_remaining()` as the call arrived: the deadline the call carries (huge when it has none)."""
    arrived_s: float
    """time.monotonic() when the call arrived."""
    requests: int = 0
    """Request messages the caller sent on the stream."""
    ended_s: float | None = None
    """time.monotonic() when the call ended (cancelled or past its deadline)."""
    ended: threading.Event = field(default_factory=threading.Event)


class HungWorker:
    """An acoustic or vocoder worker that admits every stream and never answers, noting each call.

    A real gRPC server (threads) that reports SERVING and, for the acoustic kind, the real worker's
    ModelInfo, so a gateway routes to it like to any worker.
    """

    def __init__(
        self, kind: str, model_info: acoustic_pb2.ModelInfo | None = None, credentials: grpc.ServerCredentials | None = None
    ) -> None:
        self.kind = kind
        self.model_info = model_info
        self._credentials = credentials  # a TLS port like the mesh's workers (None: plaintext)
        self.calls: list[HeldCall] = []
        self._lock = threading.Lock()
        self._server: grpc.Server | None = None
        self.address = ""

    def GetModelInfo(self, request: Any, context: grpc.ServicerContext) -> acoustic_pb2.ModelInfo:
        assert self.model_info is not None
        return self.model_info

    def GetLoad(self, request: Any, context: grpc.ServicerContext) -> load_pb2.WorkerLoad:
        return load_pb2.WorkerLoad()  # says nothing of its capacity: the gateway counts on none

    def SynthesizeMel(self, request_iterator: Iterator[Any], context: grpc.ServicerContext) -> Iterator[Any]:
        return self._hold(request_iterator, context)

    def Vocode(self, request_iterator: Iterator[Any], context: grpc.ServicerContext) -> Iterator[Any]:
        return self._hold(request_iterator, context)

    def _hold(self, request_iterator: Iterator[Any], context: grpc.ServicerContext) -> Iterator[Any]:
        call = HeldCall(remaining_s=context.time_remaining(), arrived_s=time.monotonic())
        with self._lock:
            self.calls.append(call)

        def on_end() -> None:
            call.ended_s = time.monotonic()
            call.ended.set()

        if not context.add_callback(on_end):
            on_end()  # already over
        context.send_initial_metadata((STREAM_ACCEPTED_METADATA,))
        try:
            for _ in request_iterator:
                call.requests += 1
        except grpc.RpcError:
            pass  # the call ended while we read
        call.ended.wait(timeout=120)
        yield from ()  # never answers

    def start(self) -> str:
        """Serve on a free loopback port; returns "127.0.0.1:port"."""
        server = sync_server(ThreadPoolExecutor(max_workers=8))
        health_servicer = health.HealthServicer()
        health_servicer.set("", health_pb2.HealthCheckResponse.SERVING)
        health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
        if self.kind == "acoustic":
            acoustic_pb2_grpc.add_AcousticServicer_to_server(self, server)  # type: ignore[arg-type]
        else:
            vocoder_pb2_grpc.add_VocoderServicer_to_server(self, server)  # type: ignore[arg-type]
        if self._credentials is None:
            port = server.add_insecure_port("127.0.0.1:0")
        else:
            port = server.add_secure_port("127.0.0.1:0", self._credentials)
        server.start()
        self._server = server
        self.address = f"127.0.0.1:{port}"
        return self.address

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop(0)
            self._server = None


@dataclass
class HungSetup:
    """A gateway whose `hung` kind of worker is a HungWorker and whose other kind is the mesh's real worker."""

    hung: HungWorker
    gateway_name: str
    real_kind: str


@pytest.fixture(scope="module")
def gateways(mesh: Mesh, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ZoneMesh, dict[str, HungSetup]]]:
    """Per worker kind, a gateway in front of a hung worker of that kind and the mesh's real other worker."""
    with mesh.worker_channel("acoustic") as channel:
        info = acoustic_pb2_grpc.AcousticStub(channel).GetModelInfo(acoustic_pb2.GetModelInfoRequest(), timeout=10)
    tls = mesh.secrets.tls if mesh.secrets else None  # the gateways dial the mesh's workers as its own gateway does
    harness = ZoneMesh(log_dir=Path(tmp_path_factory.mktemp("deadline-logs")), zones=(), tls=tls).start()
    setups: dict[str, HungSetup] = {}
    try:
        for kind, real_kind in (("acoustic", "vocoder"), ("vocoder", "acoustic")):
            hung = HungWorker(kind, info if kind == "acoustic" else None, tls.server_credentials() if tls else None)
            hung.start()
            setups[kind] = HungSetup(hung, f"gateway-hung-{kind}", real_kind)
            endpoints = {kind: [f"{ZONE}={hung.address}"], real_kind: [f"{ZONE}={mesh.services[real_kind].address}"]}
            harness.start_gateway(setups[kind].gateway_name, zone=ZONE, env=GATEWAY_ENV, redis_url="", **endpoints)
        yield harness, setups
    finally:
        harness.stop()
        for setup in setups.values():
            setup.hung.stop()


def _long_text(sentences: int) -> str:
    """Text no earlier request has spoken (so nothing of it is cached), `sentences` sentences long."""
    tag = uuid.uuid4().int % 1_000_000
    return " ".join(f"This is sentence {n} of a long text that cannot be spoken in time, tag {tag}." for n in range(sentences))


def _synthesize_until_error(address: str, text: str, deadline_s: float) -> tuple[grpc.RpcError, float, float, int]:
    """A Synthesize call with a client deadline that must fail: (error, started monotonic, seconds to the error, audio messages)."""
    with grpc.insecure_channel(address) as channel:
        grpc.channel_ready_future(channel).result(timeout=10)
        stub = tts_pb2_grpc.TextToSpeechStub(channel)
        audio_messages = 0
        started = time.monotonic()
        with pytest.raises(grpc.RpcError) as caught:
            for response in stub.Synthesize(tts_pb2.SynthesizeRequest(text=text), timeout=deadline_s):
                audio_messages += bool(response.audio)
        return caught.value, started, time.monotonic() - started, audio_messages


def _stream_codes(mesh: Mesh, kind: str) -> dict[str, float]:
    """A worker's finished streams so far, by final status code."""
    prefix = f'tts_{kind}_streams_total{{code="'
    return {key[len(prefix) : -2]: value for key, value in mesh.metrics(kind).items() if key.startswith(prefix)}


def _finished_streams(mesh: Mesh, kind: str) -> float:
    return sum(_stream_codes(mesh, kind).values())


def _wait_until_finished(mesh: Mesh, kind: str, count: float) -> None:
    """Wait until `kind` has finished `count` streams in all and holds none open."""
    inflight = f"tts_{kind}_inflight_streams"
    try:
        wait_for(
            lambda: _finished_streams(mesh, kind) >= count and mesh.metric(kind, inflight) == 0,
            timeout_s=WORKER_END_TIMEOUT_S,
            poll_s=0.1,
            what=f"the {kind} worker's stream ending",
        )
    except AssertionError as error:
        state = f"{mesh.metric(kind, inflight):.0f} open, finished {_stream_codes(mesh, kind)}, expected {count:.0f} finished"
        raise AssertionError(f"{error} ({state})") from None


def _assert_one_stream_served(mesh: Mesh, kind: str, before: dict[str, float]) -> None:
    """`kind` ended every stream of one request and holds none open: at most one stream was served,
    and any other was refused at admission (RESOURCE_EXHAUSTED, which the gateway retries)."""
    _wait_until_finished(mesh, kind, sum(before.values()) + 1)
    after = _stream_codes(mesh, kind)
    new_codes = {code: after[code] - before.get(code, 0.0) for code in after if after[code] != before.get(code, 0.0)}
    served = sum(count for code, count in new_codes.items() if code != "RESOURCE_EXHAUSTED")
    assert served <= 1, f"the {kind} worker served {served:.0f} streams of one request: {new_codes}"


@pytest.mark.parametrize("deadline_s", [1.0, 2.0])
@pytest.mark.parametrize("hung_kind", ["acoustic", "vocoder"])
def test_hung_worker_call_carries_the_client_deadline_and_every_call_ends_with_it(
    mesh: Mesh, gateways: tuple[ZoneMesh, dict[str, HungSetup]], hung_kind: str, deadline_s: float
) -> None:
    harness, setups = gateways
    setup = setups[hung_kind]
    real = setup.real_kind
    calls_before = len(setup.hung.calls)
    real_before = _stream_codes(mesh, real)
    assert mesh.metric(real, f"tts_{real}_inflight_streams") == 0

    error, started, elapsed_s, audio_messages = _synthesize_until_error(
        harness.gateways[setup.gateway_name].address, _long_text(12), deadline_s
    )

    # The client hears DEADLINE_EXCEEDED at its deadline, not before and not long after.
    assert error.code() == grpc.StatusCode.DEADLINE_EXCEEDED, error
    assert audio_messages == 0
    assert deadline_s - 0.05 <= elapsed_s <= deadline_s + PROMPT_MARGIN_S, elapsed_s
    # The hung worker got one call, and that call carried the client's deadline, less what the gateway spent.
    new_calls = setup.hung.calls[calls_before:]
    assert len(new_calls) == 1, f"{len(new_calls)} calls reached the hung {hung_kind} worker"
    held = new_calls[0]
    assert deadline_s - TRANSIT_MARGIN_S < held.remaining_s <= deadline_s + TIMEOUT_ROUNDING_S, (
        f"the {hung_kind} call arrived with {held.remaining_s:.3f} s left of a {deadline_s} s client deadline"
    )
    assert held.arrived_s - started < TRANSIT_MARGIN_S
    if hung_kind == "vocoder":
        assert held.requests > 0, "the real acoustic worker's mel never reached the hung vocoder"
    # That call ended with the deadline ...
    assert held.ended.wait(timeout=deadline_s + PROMPT_MARGIN_S), f"the hung {hung_kind} call outlived the deadline"
    assert held.ended_s is not None and held.ended_s - started <= deadline_s + PROMPT_MARGIN_S
    # ... and so did the real worker's stream of the same request, and the gateway's.
    _assert_one_stream_served(mesh, real, real_before)
    assert harness.gateway_metrics(setup.gateway_name).get("tts_gateway_inflight_streams") == 0
    print(f"\nhung {hung_kind}: the call arrived with {held.remaining_s:.3f} s of the client's {deadline_s} s left and "
          f"ended {held.ended_s - started:.3f} s after the request; client error after {elapsed_s:.3f} s")  # fmt: skip


def test_idle_worker_stream_cut_by_the_client_deadline_is_not_counted_as_ok(
    mesh: Mesh, gateways: tuple[ZoneMesh, dict[str, HungSetup]]
) -> None:
    # The acoustic worker hangs, so the real vocoder's stream waits for its first mel slice until the deadline.
    harness, setups = gateways
    setup = setups["acoustic"]
    before = _stream_codes(mesh, "vocoder")
    error, *_ = _synthesize_until_error(harness.gateways[setup.gateway_name].address, _long_text(12), 1.0)
    assert error.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    _wait_until_finished(mesh, "vocoder", sum(before.values()) + 1)
    after = _stream_codes(mesh, "vocoder")
    new_codes = {code: after[code] - before.get(code, 0.0) for code in after if after[code] != before.get(code, 0.0)}
    assert new_codes in ({"CANCELLED": 1.0}, {"DEADLINE_EXCEEDED": 1.0}), new_codes


def test_deadline_shorter_than_a_long_text_ends_both_real_worker_streams(mesh: Mesh) -> None:
    deadline_s = 2.0
    sentences = 24
    assert synthesize(mesh.gateway_address, _long_text(1)).duration_s > 0  # warm: the deadline is spent on the workers' streams
    sentences_before = mesh.metric("acoustic", "tts_acoustic_sentences_total")
    before = {kind: _stream_codes(mesh, kind) for kind in ("acoustic", "vocoder")}

    error, _, elapsed_s, audio_messages = _synthesize_until_error(mesh.gateway_address, _long_text(sentences), deadline_s)

    assert error.code() == grpc.StatusCode.DEADLINE_EXCEEDED, error
    assert deadline_s - 0.05 <= elapsed_s <= deadline_s + PROMPT_MARGIN_S, elapsed_s
    for kind in ("acoustic", "vocoder"):
        _assert_one_stream_served(mesh, kind, before[kind])
    made = mesh.metric("acoustic", "tts_acoustic_sentences_total") - sentences_before
    time.sleep(1.0)
    assert mesh.metric("acoustic", "tts_acoustic_sentences_total") - sentences_before == made, "the acoustic worker kept going"
    assert made < sentences
    print(f"\n{audio_messages} audio messages and {made:.0f} of {sentences} sentences before the {deadline_s} s deadline; "
          f"error after {elapsed_s:.3f} s")  # fmt: skip
