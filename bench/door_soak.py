"""The mesh under minutes of mixed traffic at every door, as a service sees a day of it: cold texts
in many encodings over HTTP, gRPC and the WebSocket, a share of the clients hanging up after their
first piece, all at once, for `--duration-s`.

    python -m bench.door_soak --duration-s 300 --out bench/door_soak.md

Reports, per door, the requests spoken to their end, those dropped by their client, those that failed
and their first audio (p50/p95); each process's memory when the traffic has warmed up, at its end and
at its peak; and what is left afterwards: streams in flight at the gateway and the workers, turns to
start held, and whether a new request is spoken. Targets: no request fails, nothing is left in flight,
a new request is spoken, and no service's memory grows by more than `MAX_GROWTH_MIB` from the warmed-up
sample to the end (a leak of a few hundred kilobytes a stream shows within minutes).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import grpc
import httpx
from websockets.sync.client import connect

from bench.measure import rss_bytes
from bench.mesh import BenchMesh, start_mesh
from bench.report import machine_header, run_heading
from bench.texts import LONG, PARAGRAPH, SHORT, unique_variants
from libs.pb.tts.v1 import tts_pb2, tts_pb2_grpc

HTTP_FORMATS: Final = ("mp3", "opus", "aac", "flac", "wav", "pcm")
GRPC_ENCODINGS: Final = (tts_pb2.LINEAR_PCM, tts_pb2.OGG_OPUS, tts_pb2.MP3, tts_pb2.FLAC)
WRITTEN_FORMS: Final = ("It costs $3.50.", "Call +44 20 7946 0958.", "Open 9am-5pm, Mon-Fri.", "Use 2½ cups.", "See Fig. 2 on p. 5.")
"""Written forms put into the texts, so the text side reads them too."""
WARM_UP_S: Final = 60.0
"""Memory is compared from this far into the traffic (buffers, arenas and caches have grown by then)."""
SAMPLE_EVERY_S: Final = 10.0
MAX_GROWTH_MIB: Final = 64
DRAIN_S: Final = 30.0
REQUEST_TIMEOUT_S: Final = 120.0
AFTER_TIMEOUT_S: Final = 30.0
"""How long the request after the traffic may take to be spoken (a short sentence on an idle mesh)."""


@dataclass
class DoorStats:
    spoken: int = 0
    dropped: int = 0
    failed: list[str] = field(default_factory=list)
    first_audio_s: list[float] = field(default_factory=list)

    def row(self, door: str) -> str:
        first = sorted(self.first_audio_s)
        p50 = f"{statistics.median(first) * 1000:,.0f}" if first else "-"
        p95 = f"{first[min(len(first) - 1, int(0.95 * len(first)))] * 1000:,.0f}" if first else "-"
        failures = ", ".join(sorted(set(self.failed)))[:120] if self.failed else ""
        return f"| {door} | {self.spoken} | {self.dropped} | {len(self.failed)} | {p50} / {p95} | {failures} |"


class Traffic:
    """Client threads that speak cold texts at one door each until the deadline."""

    def __init__(self, mesh: BenchMesh, deadline: float, drop_share: float, seed: int) -> None:
        self.mesh = mesh
        self.deadline = deadline
        self.drop_share = drop_share
        self.stats: dict[str, DoorStats] = {"HTTP": DoorStats(), "gRPC": DoorStats(), "WebSocket": DoorStats()}
        self._lock = threading.Lock()
        self._numbers = iter(range(seed * 1_000_000, (seed + 1) * 1_000_000, 7))

    def text(self, chooser: random.Random) -> str:
        with self._lock:
            number = next(self._numbers)
        base = chooser.choice((SHORT, PARAGRAPH, LONG))
        return f"{unique_variants(base, 1, number)[0]} {chooser.choice(WRITTEN_FORMS)}"

    def _first_audio(self, door: str, seconds: float) -> None:
        with self._lock:
            self.stats[door].first_audio_s.append(seconds)

    def _ended(self, door: str, dropped: bool) -> None:
        with self._lock:
            if dropped:
                self.stats[door].dropped += 1
            else:
                self.stats[door].spoken += 1

    def _failed(self, door: str, what: str) -> None:
        with self._lock:
            self.stats[door].failed.append(what)

    def http(self, seed: int) -> None:
        chooser = random.Random(seed)
        with httpx.Client(timeout=REQUEST_TIMEOUT_S) as client:
            while time.monotonic() < self.deadline:
                body = {"model": "tts-mesh", "voice": "alloy", "input": self.text(chooser), "response_format": chooser.choice(HTTP_FORMATS)}
                drop = chooser.random() < self.drop_share
                started = time.monotonic()
                try:
                    with client.stream("POST", f"{self.mesh.http_url}/v1/audio/speech", json=body) as response:
                        if response.status_code != 200:
                            response.read()
                            self._failed("HTTP", f"HTTP {response.status_code}")
                            continue
                        first: float | None = None
                        for _ in response.iter_bytes():
                            if first is None:
                                first = time.monotonic() - started
                                self._first_audio("HTTP", first)
                                if drop:
                                    break  # hangs up after its first piece
                    self._ended("HTTP", drop)
                except httpx.HTTPError as error:
                    self._failed("HTTP", type(error).__name__)

    def grpc(self, seed: int) -> None:
        chooser = random.Random(seed)
        with grpc.insecure_channel(self.mesh.gateway_address) as channel:
            stub = tts_pb2_grpc.TextToSpeechStub(channel)
            while time.monotonic() < self.deadline:
                request = tts_pb2.SynthesizeRequest(text=self.text(chooser), encoding=chooser.choice(GRPC_ENCODINGS))
                drop = chooser.random() < self.drop_share
                started = time.monotonic()
                call = stub.Synthesize(request, timeout=REQUEST_TIMEOUT_S)
                try:
                    first: float | None = None
                    for response in call:
                        if response.audio and first is None:
                            first = time.monotonic() - started
                            self._first_audio("gRPC", first)
                            if drop:
                                call.cancel()
                                break
                    self._ended("gRPC", drop)
                except grpc.RpcError as error:
                    self._failed("gRPC", error.code().name)

    def websocket(self, seed: int) -> None:
        chooser = random.Random(seed)
        url = self.mesh.http_url.replace("http://", "ws://") + "/v1/audio/speech/stream"
        while time.monotonic() < self.deadline:
            drop = chooser.random() < self.drop_share
            started = time.monotonic()
            try:
                with connect(url, open_timeout=30, max_size=None) as socket:
                    socket.send(json.dumps({"type": "start", "voice": "alloy", "response_format": chooser.choice(HTTP_FORMATS)}))
                    socket.send(json.dumps({"type": "text", "text": self.text(chooser)}))
                    socket.send(json.dumps({"type": "close"}))
                    first: float | None = None
                    while True:
                        message = socket.recv(timeout=REQUEST_TIMEOUT_S)
                        if isinstance(message, bytes):
                            if first is None:
                                first = time.monotonic() - started
                                self._first_audio("WebSocket", first)
                                if drop:
                                    socket.socket.close()  # gone, without a close frame
                                    break
                            continue
                        event = json.loads(message)
                        if event["type"] == "error":
                            raise RuntimeError(event["code"])
                        if event["type"] == "done":
                            break
                self._ended("WebSocket", drop)
            except Exception as error:  # a dropped socket's own close ends here too
                if drop:
                    self._ended("WebSocket", dropped=True)
                else:
                    self._failed("WebSocket", str(error)[:60] or type(error).__name__)


def left_behind(mesh: BenchMesh) -> dict[str, float]:
    """What is still open once the traffic has stopped."""
    gateway = mesh.metrics("gateway")
    return {
        "gateway in flight": gateway.get("tts_gateway_inflight_streams", 0.0),
        "gateway starting": gateway.get("tts_gateway_streams_starting", 0.0),
        "acoustic in flight": mesh.metric("acoustic", "tts_acoustic_inflight_streams"),
        "vocoder in flight": mesh.metric("vocoder", "tts_vocoder_inflight_streams"),
    }


def run(duration_s: float, clients: int, drop_share: float, seed: int) -> dict:
    mesh = start_mesh()
    try:
        pids = mesh.pids()
        deadline = time.monotonic() + duration_s
        traffic = Traffic(mesh, deadline, drop_share, seed)
        doors = (traffic.http, traffic.grpc, traffic.websocket)
        threads = [threading.Thread(target=doors[index % 3], args=(seed * 100 + index,), daemon=True) for index in range(clients)]
        started = time.monotonic()
        for thread in threads:
            thread.start()
        samples: list[tuple[float, dict[str, float]]] = []
        while any(thread.is_alive() for thread in threads):
            time.sleep(SAMPLE_EVERY_S)
            samples.append((time.monotonic() - started, {name: rss_bytes(pid) / 2**20 for name, pid in pids.items()}))
        for thread in threads:
            thread.join()
        drain_until = time.monotonic() + DRAIN_S
        while time.monotonic() < drain_until and any(left_behind(mesh).values()):
            time.sleep(0.5)
        left = left_behind(mesh)
        spoken_after = False
        with httpx.Client(timeout=AFTER_TIMEOUT_S) as client:
            try:
                after = client.post(f"{mesh.http_url}/v1/audio/speech", json={"input": "Still speaking after all that.", "response_format": "wav"})
                spoken_after = after.status_code == 200 and len(after.content) > 10_000
            except httpx.HTTPError:
                pass
        warmed = next((memory for at, memory in samples if at >= WARM_UP_S), samples[0][1] if samples else {})
        peak = {name: value / 2**20 for name, value in mesh.peak_rss().items()}
        end = samples[-1][1] if samples else {}
        return {
            "duration_s": duration_s, "clients": clients, "drop_share": drop_share, "stats": traffic.stats, "left": left,
            "spoken_after": spoken_after, "memory": {name: (warmed.get(name, 0.0), end.get(name, 0.0), peak[name]) for name in pids},
        }  # fmt: skip
    finally:
        mesh.stop()


def markdown(result: dict) -> str:
    lines = [
        machine_header().rstrip(),
        "",
        f"{result['clients']} clients for {result['duration_s']:.0f} s (one door each, in turn: HTTP, gRPC, WebSocket), "
        f"cold texts with written forms in several encodings, {result['drop_share']:.0%} of requests dropped by their client after their first piece.",
        "",
        "| door | spoken to the end | dropped by the client | failed | first audio p50 / p95, ms | failures |",
        "|---|---:|---:|---:|---:|---|",
        *(stats.row(door) for door, stats in result["stats"].items()),
        "",
        "| process | memory after warm-up, MiB | at the end, MiB | growth, MiB | peak, MiB |",
        "|---|---:|---:|---:|---:|",
        *(f"| {name} | {warmed:,.0f} | {end:,.0f} | {end - warmed:+,.0f} | {peak:,.0f} |" for name, (warmed, end, peak) in result["memory"].items()),
        "",
    ]
    failed = sum(len(stats.failed) for stats in result["stats"].values())
    left = {name: value for name, value in result["left"].items() if value}
    growth = {name: end - warmed for name, (warmed, end, _) in result["memory"].items() if name != "redis"}
    worst = max(growth, key=lambda name: growth[name])
    lines += [
        f"- Target no request fails: {failed} failed, {'met' if failed == 0 else 'MISSED'}.",
        f"- Target nothing left in flight {DRAIN_S:.0f} s after: {left or 'nothing'}, {'met' if not left else 'MISSED'}.",
        f"- Target a new request is spoken after: {'yes, met' if result['spoken_after'] else 'no, MISSED'}.",
        f"- Target no service grows by more than {MAX_GROWTH_MIB} MiB after warm-up: largest {worst} {growth[worst]:+.0f} MiB, "
        f"{'met' if growth[worst] <= MAX_GROWTH_MIB else 'MISSED'} (Redis holds the cache and grows to its maxmemory by design).",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration-s", type=float, default=300.0)
    parser.add_argument("--clients", type=int, default=6, help="client threads, one door each in turn (HTTP, gRPC, WebSocket)")
    parser.add_argument("--drop-share", type=float, default=0.2, help="share of requests whose client hangs up after the first piece")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path, default=None, help="write the results as markdown here")
    args = parser.parse_args(argv)
    result = run(args.duration_s, args.clients, args.drop_share, args.seed)
    report = f"{run_heading('Traffic at every door', 'make bench-door-soak')}\n\n{markdown(result)}"
    print(report)
    if args.out is not None:
        args.out.write_text(report, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
