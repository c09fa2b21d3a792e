"""The hostile table: each attack a hostile caller once used on the mesh (and a few more), one row each.

    python -m bench.hostile [--out bench/hostile.md] [--only NAME ...] [--log-dir DIR]

One mesh (as `make run` starts it: mutual TLS inside, sealed cache, Redis with a password) takes the
attacks one after another. Meanwhile a healthy client, which the gateway sees as another host (it
comes through a forwarder that dials from 127.0.0.2), calls ListVoices and a cached Synthesize in a
loop. Each row gives the attacker's status, how long its answer took against its deadline, the
worst delay of the healthy calls during the attack (over their calm median), the peak RSS of each
service during the attack, and whether the mesh still speaks a new sentence afterwards. Targets:
no process lost, a clear status within the deadline, healthy calls delayed at most 250 ms, every
service under 1.5 GiB.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import grpc
import httpx

from bench.idle_keepalive import GOAWAY_MARKS, HELD_SENTENCES, hold_one_stream
from bench.measure import rss_bytes
from bench.mesh import BenchMesh
from bench.report import run_heading
from libs.devmesh.launcher import service_command
from libs.pb.tts.acoustic.v1 import acoustic_pb2, acoustic_pb2_grpc
from libs.pb.tts.common.v1 import mel_pb2
from libs.pb.tts.v1 import tts_pb2, tts_pb2_grpc
from libs.serving.server import MIN_PING_INTERVAL_MS
from libs.voice.registry import default_registry
from libs.wire.limits import MAX_PHONEME_IDS
from tests.support.fuzz.wire_mutations import LENGTH_DELIMITED, encode_varint
from tests.support.mesh import REPO_ROOT, free_port

DEADLINE_S: Final = 30.0
"""The attacker's deadline, as a client would set one."""
DELAY_LIMIT_S: Final = 0.25
RSS_LIMIT_BYTES: Final = int(1.5 * 1024**3)
SERVICES: Final = ("gateway", "acoustic", "vocoder")
HEALTHY_TEXT: Final = "A healthy caller is served."
MIB: Final = 1024 * 1024
CLEAR_CODES: Final = frozenset(
    {"OK", "CANCELLED", "INVALID_ARGUMENT", "NOT_FOUND", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "OUT_OF_RANGE",
     "UNAUTHENTICATED", "PERMISSION_DENIED"}
)  # fmt: skip


@dataclass(frozen=True)
class Answer:
    """What the attacker got."""

    status: str
    """The status (gRPC code, HTTP status or exit code) and a short note."""
    clear: bool
    """Whether the status is a clear answer of the kind this attack should get."""
    seconds: float = 0.0


@dataclass
class Row:
    name: str
    answer: Answer
    worst_delay_s: dict[str, float]
    """Of ListVoices (the gateway's event loop alone) and of a cached Synthesize (the gateway and a vocoder)."""
    healthy_failures: list[str]
    """Why each healthy call that failed during the attack failed."""
    peak_rss: dict[str, int]
    speaks_after: bool
    alive: bool

    @property
    def met(self) -> bool:
        return (
            self.answer.clear
            and self.answer.seconds <= DEADLINE_S
            and max(self.worst_delay_s.values()) <= DELAY_LIMIT_S
            and not self.healthy_failures
            and all(rss < RSS_LIMIT_BYTES for rss in self.peak_rss.values())
            and self.speaks_after
            and self.alive
        )


class RssSampler:
    """Samples each service's RSS every 50 ms; `peaks()` since the last `reset()`."""

    def __init__(self, pids: dict[str, int]) -> None:
        self._pids = pids
        self._peaks: dict[str, int] = dict.fromkeys(pids, 0)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            with self._lock:
                for name, pid in self._pids.items():
                    self._peaks[name] = max(self._peaks[name], rss_bytes(pid))

    def reset(self) -> None:
        with self._lock:
            self._peaks = {name: rss_bytes(pid) for name, pid in self._pids.items()}

    def peaks(self) -> dict[str, int]:
        with self._lock:
            return dict(self._peaks)

    def stop(self) -> None:
        self._stop.set()


class OtherHostForwarder:
    """A TCP forwarder to the gateway whose connections come from 127.0.0.2: the gateway counts
    whoever dials it as another client than the attacker at 127.0.0.1."""

    def __init__(self, target_port: int) -> None:
        self._target_port = target_port
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self._listener.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                inbound, _ = self._listener.accept()
            except OSError:
                return
            outbound = socket.create_connection(("127.0.0.1", self._target_port), source_address=("127.0.0.2", 0))
            for source, sink in ((inbound, outbound), (outbound, inbound)):
                threading.Thread(target=_pump, args=(source, sink), daemon=True).start()

    def close(self) -> None:
        self._listener.close()


def _pump(source: socket.socket, sink: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        for end in (source, sink):
            with contextlib.suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)


@dataclass
class HealthyCaller:
    """Calls ListVoices and a cached Synthesize in turn, all the time, and keeps each call's latency."""

    address: str
    calls: list[tuple[float, str, float, str]] = field(default_factory=list)
    """(started, kind, latency_s, why it failed: "" when it did not)."""
    baseline_s: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._channel = grpc.insecure_channel(self.address)
        self._stub = tts_pb2_grpc.TextToSpeechStub(self._channel)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            for kind, call in (("ListVoices", self._voices), ("Synthesize", self._first_audio)):
                started = time.monotonic()
                failure = ""
                try:
                    call()
                except grpc.RpcError as error:
                    failure = f"{kind} {error.code().name}: {error.details()}"
                self.calls.append((started, kind, time.monotonic() - started, failure))
                self._stop.wait(0.05)

    def _voices(self) -> None:
        self._stub.ListVoices(tts_pb2.ListVoicesRequest(), timeout=10)

    def _first_audio(self) -> None:
        answers = self._stub.Synthesize(tts_pb2.SynthesizeRequest(text=HEALTHY_TEXT), timeout=10)
        next(answers)
        answers.cancel()

    def calibrate(self, seconds: float) -> None:
        """The calm median latency of each kind of call."""
        start = time.monotonic()
        time.sleep(seconds)
        for kind in ("ListVoices", "Synthesize"):
            latencies = [latency for began, k, latency, failure in self.calls if k == kind and not failure and began >= start]
            self.baseline_s[kind] = statistics.median(latencies)

    def during(self, start: float, end: float) -> tuple[dict[str, float], list[str]]:
        """Worst delay over the calm median of each kind, and why each failed call failed, of calls that overlapped [start, end]."""
        window = [call for call in list(self.calls) if call[0] <= end and call[0] + call[2] >= start]
        worst = {
            kind: max((latency - self.baseline_s[kind] for _, k, latency, failure in window if not failure and k == kind), default=0.0)
            for kind in ("ListVoices", "Synthesize")
        }
        return worst, [failure for *_, failure in window if failure]

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=15)  # its call in flight ends before the channel closes under it
        self._channel.close()


@dataclass
class Target:
    """What the attacks aim at."""

    mesh: BenchMesh

    @property
    def address(self) -> str:
        return self.mesh.gateway_address

    @property
    def http_url(self) -> str:
        return self.mesh.http_url


def _code(error: grpc.RpcError) -> str:
    return error.code().name


def _short(text: str, limit: int = 70) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _synthesize(
    address: str, request: tts_pb2.SynthesizeRequest, expected: Sequence[str], deadline_s: float = DEADLINE_S
) -> Answer:
    """One call read to its end; answered at its first audio (or its status), the note says when the rest came."""
    started = time.monotonic()
    first_s = None
    with grpc.insecure_channel(address, options=[("grpc.max_send_message_length", 64 * MIB)]) as channel:
        try:
            for response in tts_pb2_grpc.TextToSpeechStub(channel).Synthesize(request, timeout=deadline_s):
                if response.audio and first_s is None:
                    first_s = time.monotonic() - started
            code, note = (
                "OK",
                f"first audio {first_s:.2f} s, all {time.monotonic() - started:.1f} s" if first_s is not None else "no audio",
            )
        except grpc.RpcError as error:
            code, note = _code(error), f"{len(error.details() or '')}-char message: {_short(error.details() or '')}"
    return Answer(f"{code}, {note}", code in expected, first_s if first_s is not None else time.monotonic() - started)


def espeak_overflow(target: Target) -> Answer:
    return _synthesize(target.address, tts_pb2.SynthesizeRequest(text="s'" * 220), ("OK", "INVALID_ARGUMENT"))


def streamed_spaces(target: Target) -> Answer:
    def pieces() -> Iterator[tts_pb2.StreamingSynthesizeRequest]:
        yield tts_pb2.StreamingSynthesizeRequest(config=tts_pb2.StreamingSynthesizeConfig())
        for _ in range(400):
            yield tts_pb2.StreamingSynthesizeRequest(text=" " * 5000)
        yield tts_pb2.StreamingSynthesizeRequest(text="a B")

    started = time.monotonic()
    with grpc.insecure_channel(target.address) as channel:
        try:
            audio_s = sum(
                r.audio_duration_s
                for r in tts_pb2_grpc.TextToSpeechStub(channel).StreamingSynthesize(pieces(), timeout=DEADLINE_S)
            )
            code, note = "OK", f"{audio_s:.2f} s of audio"
        except grpc.RpcError as error:
            code, note = _code(error), _short(error.details() or "")
    return Answer(f"{code}, {note}", code in ("OK", "INVALID_ARGUMENT"), time.monotonic() - started)


def raw_16_mb_body(target: Target) -> Answer:
    unknown = b"x" * (16 * MIB)
    body = encode_varint((99 << 3) | LENGTH_DELIMITED) + encode_varint(len(unknown)) + unknown
    body += encode_varint((1 << 3) | LENGTH_DELIMITED) + encode_varint(4) + b"\xff\xfeab"
    started = time.monotonic()
    with grpc.insecure_channel(target.address, options=[("grpc.max_send_message_length", 64 * MIB)]) as channel:
        try:
            list(channel.unary_stream("/tts.v1.TextToSpeech/Synthesize")(body, timeout=DEADLINE_S))
            code, note = "OK", "accepted"
        except grpc.RpcError as error:
            code, note = _code(error), _short(error.details() or "")
    return Answer(f"{code}, {note}", code in ("RESOURCE_EXHAUSTED", "INVALID_ARGUMENT"), time.monotonic() - started)


def mixed_scripts(target: Target) -> Answer:
    return _synthesize(target.address, tts_pb2.SynthesizeRequest(text="😀 مرحبا 你好 привет ש Hello " * 40), ("OK",))


UNPUNCTUATED: Final = (
    "so we started the meeting a bit late because the projector was not working and then we talked about the "
    "budget for next year and how the team could hire two more people without going over the plan "
) * 6


def unpunctuated_english(target: Target) -> Answer:
    return _synthesize(target.address, tts_pb2.SynthesizeRequest(text=UNPUNCTUATED[:1000]), ("OK",))


def clients_stop_reading(target: Target, clients: int = 3, hold_s: float = 20.0) -> Answer:
    text = " ".join(f"Sentence {n} of a long text that nobody reads to the end." for n in range(90))[:5000]
    request = tts_pb2.SynthesizeRequest(text=text, encoding=tts_pb2.FLOAT_PCM, sample_rate_hz=48000)
    outcomes: list[str] = []
    started = time.monotonic()

    def one() -> None:
        with grpc.insecure_channel(target.address) as channel:
            answers = tts_pb2_grpc.TextToSpeechStub(channel).Synthesize(request, timeout=DEADLINE_S + hold_s)
            try:
                next(answers)
                time.sleep(hold_s)
                answers.cancel()
                outcomes.append("held")
            except grpc.RpcError as error:
                outcomes.append(_code(error))

    threads = [threading.Thread(target=one) for _ in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    time.sleep(3.0)  # what the cancelled calls held goes back
    gateway_mib = rss_bytes(target.mesh.services["gateway"].process.pid) / MIB
    note = f"{outcomes.count('held')}/{clients} held {hold_s:.0f} s, then cancelled; gateway {gateway_mib:.0f} MiB after"
    return Answer(note, outcomes.count("held") == clients, max(0.0, time.monotonic() - started - hold_s - 3.0))


def huge_voice_name(target: Target) -> Answer:
    request = tts_pb2.SynthesizeRequest(text="Hello.", voice="A" * 15_000_000)
    return _synthesize(target.address, request, ("RESOURCE_EXHAUSTED", "INVALID_ARGUMENT", "NOT_FOUND"))


def idle_with_a_held_stream(target: Target, held_s: float = 60.0) -> Answer:
    offsets = {name: service.log_path.stat().st_size for name, service in target.mesh.services.items()}
    started = time.monotonic()
    held = hold_one_stream(target.address, held_s)
    marks = 0
    for name, service in target.mesh.services.items():
        with service.log_path.open("rb") as log:
            log.seek(offsets[name])
            tail = log.read().decode(errors="replace")
        marks += sum(mark in tail for mark in GOAWAY_MARKS)
    note = f"{held.sentences}/{HELD_SENTENCES} sentences after {held_s:.0f} s unread, {marks} GOAWAY/too_many_pings lines"
    clear = held.sentences == HELD_SENTENCES and not held.error and marks == 0
    return Answer(note, clear, max(0.0, time.monotonic() - started - held_s))


def cancel_mid_stream(target: Target) -> Answer:
    log_path = target.mesh.services["gateway"].log_path
    offset = log_path.stat().st_size
    started = time.monotonic()
    text = " ".join(f"This is sentence number {n}, which the client will not wait for." for n in range(12))
    with grpc.insecure_channel(target.address) as channel:
        answers = tts_pb2_grpc.TextToSpeechStub(channel).Synthesize(tts_pb2.SynthesizeRequest(text=text), timeout=DEADLINE_S)
        try:
            next(answers)
        except grpc.RpcError as error:
            return Answer(f"{_code(error)} before any audio: {_short(error.details() or '')}", False, time.monotonic() - started)
        answers.cancel()
    seconds = time.monotonic() - started
    time.sleep(2.0)
    with log_path.open("rb") as log:
        log.seek(offset)
        lines = log.read().decode(errors="replace").splitlines()
    loud = [line for line in lines if " ERROR " in line or "Traceback" in line]
    return Answer(f"CANCELLED, {len(loud)} ERROR/traceback lines in the gateway log", not loud, seconds)


def second_vocoder_on_metrics_port(target: Target) -> Answer:
    running = target.mesh.services["vocoder"]
    command = service_command(
        "vocoder", ["--host", "127.0.0.1", "--port", str(free_port()), "--metrics-port", str(running.metrics_port)]
    )
    started = time.monotonic()
    finished = subprocess.run(command, cwd=REPO_ROOT, env=dict(os.environ), capture_output=True, text=True, timeout=180)
    output = finished.stdout + finished.stderr
    errors = [line for line in output.splitlines() if " ERROR " in line]
    clear = finished.returncode != 0 and len(errors) == 1 and "Traceback" not in output
    note = f"exit {finished.returncode}, {len(errors)} line: {_short(errors[0].split(': ', 1)[-1], 60) if errors else '-'}"
    return Answer(note, clear, time.monotonic() - started)


def http_16_mb_body(target: Target) -> Answer:
    started = time.monotonic()
    try:
        with httpx.Client(timeout=DEADLINE_S) as client:
            reply = client.post(
                f"{target.http_url}/v1/audio/speech",
                content=b"{" + b" " * (16 * MIB),
                headers={"content-type": "application/json"},
            )
        status, clear = f"HTTP {reply.status_code}", reply.status_code == 413
    except httpx.HTTPError as error:  # the door may close the connection once it has refused
        status, clear = f"connection closed ({type(error).__name__})", True
    return Answer(status, clear, time.monotonic() - started)


def _status_counts(statuses: Sequence[str]) -> str:
    return ", ".join(f"{statuses.count(status)} x {status}" for status in sorted(set(statuses)))


def http_open_requests(target: Target, requests: int = 100, hold_s: float = 5.0) -> Answer:
    body = {"model": "tts-1", "input": HEALTHY_TEXT, "voice": "alloy", "response_format": "pcm"}

    async def run() -> list[str]:
        limits = httpx.Limits(max_connections=requests, max_keepalive_connections=0)
        async with httpx.AsyncClient(timeout=DEADLINE_S, limits=limits) as client:

            async def one() -> str:
                async with client.stream("POST", f"{target.http_url}/v1/audio/speech", json=body) as reply:
                    await asyncio.sleep(hold_s)  # headers in, body unread
                    return str(reply.status_code)

            return list(await asyncio.gather(*(one() for _ in range(requests)), return_exceptions=False))

    started = time.monotonic()
    statuses = asyncio.run(run())
    clear = set(statuses) <= {"200", "429"} and "429" in statuses
    return Answer(f"HTTP {_status_counts(statuses)}", clear, max(0.0, time.monotonic() - started - hold_s))


def grpc_open_streams(target: Target, streams: int = 100, hold_s: float = 5.0) -> Answer:
    async def run() -> list[str]:
        channels = [grpc.aio.insecure_channel(target.address) for _ in range(2)]  # 100 streams per connection
        try:

            async def one(index: int) -> str:
                call = tts_pb2_grpc.TextToSpeechStub(channels[index % 2]).Synthesize(
                    tts_pb2.SynthesizeRequest(text=HEALTHY_TEXT, encoding=tts_pb2.FLOAT_PCM), timeout=DEADLINE_S
                )
                try:
                    await call.read()
                    await asyncio.sleep(hold_s)
                    call.cancel()
                    return "open"
                except grpc.aio.AioRpcError as error:
                    return error.code().name

            return list(await asyncio.gather(*(one(index) for index in range(streams))))
        finally:
            for channel in channels:
                await channel.close()

    started = time.monotonic()
    statuses = asyncio.run(run())
    clear = set(statuses) <= {"open", "RESOURCE_EXHAUSTED"} and "RESOURCE_EXHAUSTED" in statuses
    return Answer(_status_counts(statuses), clear, max(0.0, time.monotonic() - started - hold_s))


def longest_sentence_to_the_worker(target: Target) -> Answer:
    """The longest sentence a worker takes, sent to it directly (the gateway would have cut it):
    the worker's memory must come back afterwards."""
    voice = default_registry().default
    usable = sorted({i for ids in voice.phoneme_id_map().values() for i in ids} - {0, 1, 2})
    body = [id_ for n in range((MAX_PHONEME_IDS - 3) // 2) for id_ in (usable[n % len(usable)], 0)]
    acoustic = target.mesh.services["acoustic"].process.pid
    before_mib = rss_bytes(acoustic) / MIB
    started = time.monotonic()
    with target.mesh.worker_channel("acoustic") as channel:
        stub = acoustic_pb2_grpc.AcousticStub(channel)
        info = stub.GetModelInfo(acoustic_pb2.GetModelInfoRequest(), timeout=DEADLINE_S)
        request = acoustic_pb2.SentenceRequest(
            utterance_id="longest", phoneme_ids=[1, 0, *body, 2], voice=voice.name, speed=1.0, noise_scale=voice.noise_scale,
            noise_w=voice.noise_w, expected_model_version=info.model_version, dtype=mel_pb2.MEL_DTYPE_FLOAT16,
        )  # fmt: skip
        try:
            frames = sum(
                s.frame_count for answer in stub.SynthesizeMel(iter([request]), timeout=DEADLINE_S) for s in answer.slices
            )
            code = "OK"
        except grpc.RpcError as error:
            frames, code = 0, _code(error)
    seconds = time.monotonic() - started
    time.sleep(3.0)
    after_mib = rss_bytes(acoustic) / MIB
    note = f"{code}, {len(request.phoneme_ids)} ids, {frames} frames; acoustic {before_mib:.0f} MiB before, {after_mib:.0f} after"
    return Answer(note, code == "OK" and after_mib < before_mib + 150, seconds)


def _socket_url(target: Target) -> str:
    return target.http_url.replace("http://", "ws://") + "/v1/audio/speech/stream"


async def _open_sockets(target: Target, count: int, first: list[str]) -> tuple[list[Any], list[str]]:
    """`count` WebSockets from one client, each sent `first`; the open ones and each one's outcome."""
    import websockets
    from websockets.exceptions import InvalidStatus

    async def one() -> tuple[Any, str]:
        try:
            connection = await websockets.connect(_socket_url(target), max_size=None, open_timeout=DEADLINE_S)
        except InvalidStatus as refused:
            return None, f"HTTP {refused.response.status_code}"
        for message in first:
            await connection.send(message)
        return connection, "open"

    results = await asyncio.gather(*(one() for _ in range(count)))
    return [connection for connection, _ in results if connection is not None], [outcome for _, outcome in results]


def idle_sockets(target: Target, count: int = 100, hold_s: float = 10.0) -> Answer:
    """Sockets that start and then say nothing: at most the client's limit are taken, and they cost little."""
    start = json.dumps({"type": "start"})

    async def run() -> tuple[list[str], float]:
        sockets, outcomes = await _open_sockets(target, count, [start])
        await asyncio.sleep(hold_s)
        gateway_mib = rss_bytes(target.mesh.services["gateway"].process.pid) / MIB
        await asyncio.gather(*(connection.close() for connection in sockets), return_exceptions=True)
        return outcomes, gateway_mib

    started = time.monotonic()
    outcomes, gateway_mib = asyncio.run(run())
    clear = set(outcomes) <= {"open", "HTTP 429"} and "HTTP 429" in outcomes
    return Answer(f"{_status_counts(outcomes)}; gateway {gateway_mib:.0f} MiB while held", clear, max(0.0, time.monotonic() - started - hold_s))


def slow_socket_readers(target: Target, count: int = 100, hold_s: float = 20.0) -> Answer:
    """Sockets that ask for a long text each and never read: backpressure, not memory."""
    text = " ".join(f"Sentence {n} of a long text that nobody reads to the end." for n in range(90))[:5000]
    first = [json.dumps({"type": "start", "response_format": "float_pcm", "sample_rate_hz": 48000}), json.dumps({"type": "text", "text": text}),
             json.dumps({"type": "close"})]  # fmt: skip

    async def run() -> tuple[list[str], float]:
        sockets, outcomes = await _open_sockets(target, count, first)
        await asyncio.sleep(hold_s)
        gateway_mib = rss_bytes(target.mesh.services["gateway"].process.pid) / MIB
        for connection in sockets:
            connection.transport.abort()  # gone without a word, its buffers unread
        return outcomes, gateway_mib

    started = time.monotonic()
    outcomes, gateway_mib = asyncio.run(run())
    time.sleep(3.0)  # what the dropped sockets held goes back
    after_mib = rss_bytes(target.mesh.services["gateway"].process.pid) / MIB
    clear = set(outcomes) <= {"open", "HTTP 429"}
    note = f"{_status_counts(outcomes)}, held {hold_s:.0f} s unread; gateway {gateway_mib:.0f} MiB held, {after_mib:.0f} MiB after"
    return Answer(note, clear, max(0.0, time.monotonic() - started - hold_s - 3.0))


def socket_megabyte_message(target: Target) -> Answer:
    """A 1 MB text message: the socket is closed as too big (1009) before it is held."""
    from websockets.exceptions import ConnectionClosed
    from websockets.sync.client import connect

    started = time.monotonic()
    with connect(_socket_url(target), max_size=None) as socket:
        socket.send(json.dumps({"type": "start"}))
        socket.recv(timeout=DEADLINE_S)
        socket.send(json.dumps({"type": "text", "text": "a" * (1024 * 1024)}))
        try:
            socket.recv(timeout=DEADLINE_S)
            return Answer("answered instead of closing", False, time.monotonic() - started)
        except ConnectionClosed as closed:
            code = closed.rcvd.code if closed.rcvd is not None else None
    return Answer(f"closed {code} (message too big)", code == 1009, time.monotonic() - started)


ATTACKS: Final[dict[str, tuple[str, Callable[[Target], Answer]]]] = {
    "espeak": ("Synthesize `s'` x 220 (espeak-ng's overflow)", espeak_overflow),
    "spaces": ("StreamingSynthesize: 400 x 5,000 spaces, then `a B`", streamed_spaces),
    "raw16mb": ("raw 16 MB Synthesize (unknown field, bad UTF-8)", raw_16_mb_body),
    "mixed": ("1,000 chars of mixed scripts, no sentence end", mixed_scripts),
    "unpunctuated": ("1,000 chars of unpunctuated English", unpunctuated_english),
    "slow-readers": ("3 clients stop reading (5,000 chars, 48 kHz FLOAT_PCM)", clients_stop_reading),
    "voice": ('voice = "A" x 15,000,000', huge_voice_name),
    "idle": ("idle 60 s, pings every 10 s, one stream held unread", idle_with_a_held_stream),
    "cancel": ("client cancels mid-stream", cancel_mid_stream),
    "metrics-port": ("second vocoder on the used --metrics-port", second_vocoder_on_metrics_port),
    "http16mb": ("HTTP: 16 MB body to /v1/audio/speech", http_16_mb_body),
    "http-open": ("HTTP: 100 requests open at once from one client", http_open_requests),
    "grpc-open": ("gRPC: 100 streams open at once from one client", grpc_open_streams),
    "longest": (
        f"acoustic worker: a sentence of {MAX_PHONEME_IDS:,} ids (its most), sent directly",
        longest_sentence_to_the_worker,
    ),
    "ws-idle": ("WebSocket: 100 idle sockets from one client, held 10 s", idle_sockets),
    "ws-slow": ("WebSocket: 100 sockets from one client ask for 5,000 chars each at 48 kHz and never read", slow_socket_readers),
    "ws-1mb": ("WebSocket: a 1 MB text message", socket_megabyte_message),
}


def render(rows: Sequence[Row]) -> str:
    lines = [
        "| attack | client's status | answered in | worst healthy delay: ListVoices / cached Synthesize | peak RSS MiB: gateway / acoustic / vocoder | speaks after | met |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        rss = " / ".join(f"{row.peak_rss.get(name, 0) / MIB:.0f}" for name in SERVICES)
        delay = " / ".join(f"{max(0.0, row.worst_delay_s[kind]) * 1000:.0f}" for kind in ("ListVoices", "Synthesize")) + " ms"
        delay += f", {len(row.healthy_failures)} failed ({_short(row.healthy_failures[0], 160)})" if row.healthy_failures else ""
        speaks = "yes" if row.speaks_after and row.alive else ("no" if row.alive else "no: a process died")
        lines.append(
            f"| {row.name} | {row.answer.status} | {row.answer.seconds:.2f} s | {delay} | {rss} | {speaks} | {'yes' if row.met else 'NO'} |"
        )
    return "\n".join(lines)


def run(names: Sequence[str], log_dir: Path) -> list[Row]:
    env = {
        "TTS_KEEPALIVE_TIME_MS": str(MIN_PING_INTERVAL_MS),  # the gateway pings its workers as often as allowed
        # The attacks that stop reading hold worker streams still on purpose; a worker that measures its
        # real-time capacity from its streams would take that for slowness and refuse the healthy calls.
        "TTS_REALTIME_HEADROOM": "0",
    }
    # The attacker and the healthy caller are two clients, so the gateway's fairness between them applies as in `make run`.
    mesh = BenchMesh(log_dir=log_dir, env=env).start()
    rows: list[Row] = []
    forwarder = healthy = sampler = None
    try:
        target = Target(mesh)
        pids = {name: mesh.services[name].process.pid for name in SERVICES}
        sampler = RssSampler(pids)
        forwarder = OtherHostForwarder(mesh.services["gateway"].port)
        healthy = HealthyCaller(forwarder.address)
        healthy.calibrate(6.0)
        print(f"calm healthy calls: {', '.join(f'{k} {v * 1000:.0f} ms' for k, v in healthy.baseline_s.items())}", flush=True)
        for number, name in enumerate(names):
            title, attack = ATTACKS[name]
            sampler.reset()
            start = time.monotonic()
            try:
                answer = attack(target)
            except Exception as error:  # the bench goes on; the row says what broke
                answer = Answer(f"bench error: {_short(repr(error))}", False, time.monotonic() - start)
            end = time.monotonic()
            worst_delay_s, failures = healthy.during(start, end)
            peaks = sampler.peaks()
            alive = all(
                mesh.services[service].process.poll() is None and mesh.services[service].process.pid == pids[service]
                for service in SERVICES
            )
            after = _synthesize(
                target.address,
                tts_pb2.SynthesizeRequest(text=f"Attack number {number} is over, and the mesh still speaks."),
                ("OK",),
                60.0,
            )
            row = Row(title, answer, worst_delay_s, failures, peaks, after.clear and "first audio" in after.status, alive)
            rows.append(row)
            print(render([row]).splitlines()[-1], flush=True)
    finally:
        if healthy is not None:
            healthy.stop()
        if sampler is not None:
            sampler.stop()
        if forwarder is not None:
            forwarder.close()
        mesh.stop()
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="One row per hostile input or caller against a fresh mesh.")
    parser.add_argument("--out", type=Path, default=Path("bench/hostile.md"), help="where the table is written")
    parser.add_argument("--only", nargs="*", choices=sorted(ATTACKS), help="run only these attacks")
    parser.add_argument("--log-dir", type=Path, default=None, help="where the services' logs go (default: a temporary folder)")
    args = parser.parse_args(argv)
    log_dir = args.log_dir or Path(tempfile.mkdtemp(prefix="tts-hostile-"))
    log_dir.mkdir(parents=True, exist_ok=True)
    rows = run(args.only or list(ATTACKS), log_dir)
    table = render(rows)
    met = sum(row.met for row in rows)
    summary = (
        f"\n{met} of {len(rows)} attacks met every target (clear status within {DEADLINE_S:.0f} s, healthy calls delayed "
        f"<= {DELAY_LIMIT_S * 1000:.0f} ms, every service < {RSS_LIMIT_BYTES / 1024**3:.1f} GiB, no process lost, speaks after)."
    )
    print("\n" + table + summary)
    heading = run_heading("Hostile callers", "make bench-hostile")
    args.out.write_text(f"{heading}\n\n{table}\n{summary.strip()}\n", encoding="utf-8")
    print(f"written to {args.out}; service logs in {log_dir}")
    return 0 if met == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
