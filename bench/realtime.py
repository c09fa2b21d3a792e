"""`make bench-load`, part two: real time on machines of every size, side by side with a piper-tts pool.

For each CPU quota (a share of the pinned cores, as a smaller machine or a CPU-limited pod: a cgroup
CFS quota with 100 ms periods over every process of the mesh, and of the piper-tts pool when its turn
comes), one mesh with `make run`'s defaults is started inside the quota and measured:

- the lone cold stream's first audio (the median of a few), the reference of the first-audio bars;
- the capacity the mesh reports (`tts_gateway_realtime_capacity`: what its admission takes), and the
  largest burst of streams started together that plays without a stall, searched upward from half the
  capacity; each later scenario takes the capacity reported as it starts (gaps listeners heard in an
  earlier one lower it);
- a burst at 0.8 of the capacity, with the p95 first audio the cores would reach doing nothing but
  first audios (`load_table.first_audio_floor`, from the workers' CPU counters);
- streams arriving at random (Poisson) at shares of the capacity (0.5, 0.8, 1.2 by default): each a
  unique paragraph, so every sentence misses the cache;
- one client alone up to the capacity, and a client holding more than its share against a small one
  (clients told apart by `x-forwarded-for` behind the gateway's trusted proxy, as behind the edge),
  each after the earlier scenarios' client has been quiet for as long as admission keeps an active
  client's share (`--active-client-s`).

Every stream has a player that starts at its first audio and pauses whenever its buffer runs dry
(`bench.measure.playback_stalls`). The piper-tts pool (one process per core) gets the same bursts
and the same arrival times inside the same quota; it queues what it cannot serve (it refuses
nothing), so its first audio grows instead. The clients (this process) run in a cgroup of their own
with the same CPU weight as the quota's, and Redis inside the quota: on shared cores a client that
the mesh starves would measure its own lateness as the mesh's.

    python -m bench.realtime [--quotas 1,0.5,0.25] [--shares 0.5,0.8,1.2] [--duration-s 40] [--quick] [--precision fp32] [--out PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Final

import grpc

from bench import piper_baseline
from bench.cpu_quota import CpuQuota
from bench.load_table import first_audio_cpu, first_audio_floor_p95, paragraphs
from bench.loadgen import CHANNEL_OPTIONS, synthesize_once
from bench.measure import STALL_BAR_S, RequestResult, percentile
from bench.mesh import PRECISION_FLAG, BenchMesh
from bench.report import arithmetic_line, machine_header, run_heading
from bench.speed import pin_cores
from libs.pb.tts.v1 import tts_pb2, tts_pb2_grpc
from libs.synthesis.admission import DEFAULT_ACTIVE_CLIENT_S
from libs.voice.precision import DEFAULT_PRECISION, PRECISIONS

DEFAULT_QUOTAS: Final = (1.0, 0.5, 0.25)
DEFAULT_SHARES: Final = (0.5, 0.8, 1.2)
DEFAULT_DURATION_S: Final = 40.0
QUICK_DURATION_S: Final = 20.0
PREEMPTED_SERIES: Final = 'tts_gateway_shed_total{reason="preempted"}'
"""Streams of a client over its share that gave their place to another client's (libs.synthesis.admission)."""
WAITED_SERIES: Final = {
    outcome: f'tts_gateway_room_wait_seconds_count{{outcome="{outcome}"}}' for outcome in ("admitted", "refused")
}
"""The streams that waited for room (libs.synthesis.room), by how their wait ended."""
LONE_RUNS: Final = 3
BURST_STEP: Final = 1.15
"""Each burst of the search is this many times the last (at least one stream more)."""
MAX_BURST_SHARE: Final = 1.6
"""The search stops at this many times the reported capacity."""
REQUEST_TIMEOUT_S: Final = 300.0
TAGS_PER_REQUEST: Final = 16
PROXY: Final = "127.0.0.1"
"""The address the benchmark's calls come from; the gateway trusts it to name the client."""


@dataclass(frozen=True)
class Outcome:
    """What the listeners of one scenario heard."""

    streams: int
    """Streams asked for."""
    served: int
    """Streams that ended OK."""
    refused: int
    """Streams that did not."""
    stalled: int
    """Streams served whose playback stalled more than STALL_BAR_S in all."""
    worst_stall_s: float
    """The largest total stall of a stream served (seconds)."""
    first_audio_p50_s: float
    first_audio_p95_s: float
    audio_s_per_s: float
    """Audio delivered per wall second, from the first start to the last end."""

    @classmethod
    def of(cls, results: Sequence[RequestResult]) -> Outcome:
        served = [result for result in results if result.ok]
        ttfa = [result.ttfa_s for result in served if result.ttfa_s is not None]
        wall_s = max((r.started_s + r.total_s for r in results), default=0.0) - min((r.started_s for r in results), default=0.0)
        return cls(
            streams=len(results),
            served=len(served),
            refused=len(results) - len(served),
            stalled=sum(1 for result in served if result.stall_s > STALL_BAR_S),
            worst_stall_s=max((result.stall_s for result in served), default=0.0),
            first_audio_p50_s=percentile(ttfa, 50) if ttfa else math.nan,
            first_audio_p95_s=percentile(ttfa, 95) if ttfa else math.nan,
            audio_s_per_s=sum(result.audio_s for result in served) / wall_s if wall_s > 0 else 0.0,
        )


@dataclass(frozen=True)
class Row:
    """One line of a quota's table."""

    scenario: str
    mesh: Outcome
    piper: Outcome | None = None
    note: str = ""


class Texts:
    """Unique paragraphs, never the same twice in a run (the cache always misses)."""

    def __init__(self, first_tag: int = 0) -> None:
        self._tag = first_tag

    def take(self, count: int) -> list[str]:
        texts = paragraphs(count, self._tag)
        self._tag += count * TAGS_PER_REQUEST
        return texts


def poisson_arrivals(rate_per_s: float, duration_s: float, seed: int) -> list[float]:
    """Arrival times (seconds from the start) of a Poisson process of `rate_per_s` over `duration_s`."""
    rng = random.Random(seed)
    arrivals, now = [], rng.expovariate(rate_per_s)
    while now < duration_s:
        arrivals.append(now)
        now += rng.expovariate(rate_per_s)
    return arrivals


async def open_loop(
    target: str, texts: Sequence[str], arrivals_s: Sequence[float], clients: Callable[[int], str] = lambda index: "", tier: int = 0
) -> list[RequestResult]:
    """Request i (texts[i]) sent at `arrivals_s[i]` whatever the others are doing; `clients(i)` names
    its client (its `x-forwarded-for`; "" for the benchmark's own address); `tier` is every request's
    `SynthesizeRequest.tier` (0: the default)."""
    async with grpc.aio.insecure_channel(target, options=CHANNEL_OPTIONS) as channel:
        stub = tts_pb2_grpc.TextToSpeechStub(channel)
        start = time.perf_counter()

        async def one(index: int) -> RequestResult:
            await asyncio.sleep(max(0.0, arrivals_s[index] - (time.perf_counter() - start)))
            request = tts_pb2.SynthesizeRequest(text=texts[index], encoding=tts_pb2.LINEAR_PCM, request_id=f"rt-{index}", tier=tier)
            client = clients(index)
            return await synthesize_once(
                stub, request, index=index, run_start_s=start, timeout_s=REQUEST_TIMEOUT_S,
                metadata=(("x-forwarded-for", client),) if client else (),
            )  # fmt: skip

        return list(await asyncio.gather(*(one(index) for index in range(len(arrivals_s)))))


def burst(target: str, texts: Sequence[str], clients: Callable[[int], str] = lambda index: "", tier: int = 0) -> list[RequestResult]:
    """Every text's stream started at once (in `tier`: 0 the default)."""
    return asyncio.run(open_loop(target, texts, [0.0] * len(texts), clients, tier))


def one_after_another(run: Callable[[], RequestResult], count: int) -> list[RequestResult]:
    """`count` results of `run()`, each started when the last ended, with their start times on one
    clock (each run times its request from its own start): so that the audio per second of the lot is
    what it made over the time they took together."""
    start = time.perf_counter()
    results = []
    for _ in range(count):
        offset_s = time.perf_counter() - start
        result = run()
        results.append(replace(result, started_s=result.started_s + offset_s))
    return results


def reported_capacity(mesh: BenchMesh, wait_s: float = 30.0) -> float:
    """The capacity the gateway reports (waiting for the workers to have said theirs)."""
    deadline = time.monotonic() + wait_s
    while True:
        capacity = mesh.metrics("gateway").get("tts_gateway_realtime_capacity", 0.0)
        if capacity > 0 or time.monotonic() > deadline:
            return capacity
        time.sleep(0.5)


def room_waits(mesh: BenchMesh) -> dict[str, float]:
    """How many streams have waited for room at the gateway so far, by how their wait ended."""
    samples = mesh.metrics("gateway")
    return {outcome: samples.get(series, 0.0) for outcome, series in WAITED_SERIES.items()}


def waited_note(before: dict[str, float], after: dict[str, float]) -> str:
    """What the waits for room between two readings came to, for a row's note ("" when none waited)."""
    admitted, refused = (round(after[outcome] - before[outcome]) for outcome in ("admitted", "refused"))
    if not admitted and not refused:
        return ""
    return f"; {admitted + refused} waited for room, {admitted} of them admitted"


@dataclass
class QuotaRun:
    """One quota's mesh, piper pool and texts."""

    cores: int
    share: float
    duration_s: float
    shares: Sequence[float]
    piper: bool
    texts: Texts
    precision: str = DEFAULT_PRECISION
    """The workers' --precision."""
    precisions: dict[str, str] = field(default_factory=dict)
    """The arithmetic each worker served in (`BenchMesh.precisions`), once the mesh ran."""

    @property
    def quota_cores(self) -> float:
        return self.cores * self.share

    def rows(self) -> tuple[list[Row], dict[str, float]]:
        with CpuQuota(self.quota_cores) as quota:
            log_dir = Path(tempfile.mkdtemp(prefix="tts-bench-realtime-"))
            mesh = BenchMesh(
                log_dir=log_dir, preexec=quota.preexec, gateway_args=["--trusted-proxies", PROXY], worker_args=[PRECISION_FLAG, self.precision]
            ).start()
            try:
                self.precisions = mesh.precisions()
                if mesh.redis is not None and mesh.redis.pid is not None:
                    quota.add(mesh.redis.pid)
                burst(mesh.gateway_address, self.texts.take(1))  # warm: first calls of every kind
                mesh_part, facts = self._mesh_rows(mesh)
            finally:
                mesh.stop()
            piper_part = self._piper_rows(quota, facts) if self.piper else {}
        rows = [Row(scenario, outcome, piper_part.get(scenario), note) for scenario, outcome, note in mesh_part]
        return rows, facts

    def _mesh_rows(self, mesh: BenchMesh) -> tuple[list[tuple[str, Outcome, str]], dict[str, float]]:
        target = mesh.gateway_address
        rows: list[tuple[str, Outcome, str]] = []
        lone = one_after_another(lambda: burst(target, self.texts.take(1))[0], LONE_RUNS)
        lone_ttfa = statistics.median(result.ttfa_s or math.nan for result in lone)
        rows.append(("lone cold stream", Outcome.of(lone), ""))
        capacity = reported_capacity(mesh)
        mean_audio_s = statistics.mean(result.audio_s for result in lone if result.ok)
        facts = {"capacity": capacity, "lone_ttfa_s": lone_ttfa, "mean_audio_s": mean_audio_s}
        _log(f"quota {self.quota_cores:.2f} cores: capacity {capacity:.2f}, lone first audio {lone_ttfa * 1000:.0f} ms")
        # The largest burst that plays without a stall (or a refusal), from half the capacity up.
        count, largest = max(1, round(capacity * 0.5)), 0
        while count <= max(2, math.ceil(capacity * MAX_BURST_SHARE)):
            outcome = Outcome.of(burst(target, self.texts.take(count)))
            _log(f"  burst {count}: stalled {outcome.stalled}, refused {outcome.refused}")
            if outcome.stalled or outcome.refused:
                break
            largest = count
            count = max(count + 1, round(count * BURST_STEP))
        facts["largest_clean_burst"] = largest
        # A burst at 0.8 of the capacity, with the floor its first audios' CPU sets. Each scenario takes
        # the capacity the mesh reports as it starts: what listeners heard in the last one may have moved it.
        capacity = reported_capacity(mesh)
        count = max(1, round(capacity * 0.8))
        spent = first_audio_cpu(mesh)
        results = burst(target, self.texts.take(count))
        outcome = Outcome.of(results)
        floor = first_audio_floor_p95(first_audio_cpu(mesh) - spent, outcome.served, self.quota_cores)
        facts["burst_count"] = count
        # No floor where no stream heard audio: the CPU spent then is no first audio's.
        said = f"CPU floor p95 {floor * 1000:.0f} ms" if outcome.served else "no stream heard audio, so no CPU floor"
        rows.append((f"burst of {count} (0.8 x capacity)", outcome, f"{said}; capacity {capacity:.1f}"))
        for share in self.shares:
            capacity = reported_capacity(mesh)
            facts[f"capacity_poisson_{share:g}"] = capacity
            rate = share * capacity / mean_audio_s
            arrivals = poisson_arrivals(rate, self.duration_s, seed=round(share * 1000))
            waits = room_waits(mesh)
            outcome = Outcome.of(asyncio.run(open_loop(target, self.texts.take(len(arrivals)), arrivals)))
            facts[f"poisson_{share:g}"] = len(arrivals)
            note = f"{rate:.2f} streams/s for {self.duration_s:g} s; capacity {capacity:.1f}" + waited_note(waits, room_waits(mesh))
            rows.append((f"Poisson at {share:g} x capacity", outcome, note))
        # One client alone, up to the capacity: refused nothing. Alone means no other client asked
        # within the time admission keeps an active client's share (the Poisson runs' client did).
        time.sleep(DEFAULT_ACTIVE_CLIENT_S + 0.5)
        capacity = reported_capacity(mesh)
        count = max(1, math.floor(capacity))
        outcome = Outcome.of(burst(target, self.texts.take(count), clients=lambda index: "10.0.0.1"))
        rows.append((f"one client, {count} streams", outcome, f"capacity {capacity:.1f}"))
        # A client over its share and a small one: the hog fills the mesh, the small client comes after.
        time.sleep(DEFAULT_ACTIVE_CLIENT_S + 0.5)  # the hog starts alone too
        capacity = reported_capacity(mesh)
        hog, small = max(2, math.ceil(capacity)), 2
        arrivals = [0.0] * hog + [0.5] * small
        gave_before, waits = mesh.metrics("gateway").get(PREEMPTED_SERIES, 0.0), room_waits(mesh)
        results = asyncio.run(
            open_loop(target, self.texts.take(hog + small), arrivals, clients=lambda index: "10.0.0.1" if index < hog else "10.0.0.2")
        )
        gave = round(mesh.metrics("gateway").get(PREEMPTED_SERIES, 0.0) - gave_before)
        note = f"of those refused, {gave} gave their place before any audio" + waited_note(waits, room_waits(mesh))
        rows.append((f"hog of {hog} streams", Outcome.of(results[:hog]), note))
        rows.append((f"then a small client of {small}", Outcome.of(results[hog:]), "x-forwarded-for another client"))
        return rows, facts

    def _piper_rows(self, quota: CpuQuota, facts: dict[str, float]) -> dict[str, Outcome]:
        """The same scenarios on a piper-tts pool (one process per core) in the same quota."""
        outcomes: dict[str, Outcome] = {}
        setup = piper_baseline.PiperSetup(self.cores, 1)
        with piper_baseline.PiperPool(setup, preexec=quota.preexec) as pool:
            texts = self.texts.take(1)
            pool.run(texts, 1, 1)  # warm
            outcomes["lone cold stream"] = Outcome.of(one_after_another(lambda: pool.run(self.texts.take(1), 1, 1).results[0], LONE_RUNS))
            count = int(facts["burst_count"])
            outcomes[f"burst of {count} (0.8 x capacity)"] = Outcome.of(pool.run_arrivals(self.texts.take(count), [0.0] * count).results)
            for share in self.shares:
                rate = share * facts[f"capacity_poisson_{share:g}"] / facts["mean_audio_s"]
                arrivals = poisson_arrivals(rate, self.duration_s, seed=round(share * 1000))
                outcomes[f"Poisson at {share:g} x capacity"] = Outcome.of(pool.run_arrivals(self.texts.take(len(arrivals)), arrivals).results)
        return outcomes


def render(quotas: Sequence[tuple[float, float, list[Row], dict[str, float]]]) -> str:
    """The tables, one per quota, and the targets' checks under each."""

    def ms(value: float) -> str:
        return "-" if math.isnan(value) else f"{value * 1000:.0f}"

    def cells(outcome: Outcome | None) -> list[str]:
        if outcome is None:
            return ["", "", "", ""]
        return [
            f"{ms(outcome.first_audio_p50_s)} / {ms(outcome.first_audio_p95_s)} ms",
            f"{outcome.stalled} of {outcome.served}" + (f" ({outcome.worst_stall_s:.2f} s)" if outcome.stalled else ""),
            str(outcome.refused),
            f"{outcome.audio_s_per_s:.1f}",
        ]

    lines: list[str] = []
    for share, cores, rows, facts in quotas:
        capacity = facts["capacity"]
        lines += [
            f"**CPU quota {share:.0%} of the pinned cores ({cores:.2f} cores).** Reported capacity {capacity:.1f} "
            f"listeners; largest burst without a stall {int(facts['largest_clean_burst'])} "
            f"({facts['largest_clean_burst'] / capacity if capacity else math.nan:.2f} x the capacity).",
            "",
            "| scenario | streams | mesh first audio p50 / p95 | mesh stalled > 100 ms | mesh refused | mesh audio s per s "
            "| piper-tts first audio p50 / p95 | piper-tts stalled | piper-tts refused | piper-tts audio s per s | |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
        ]
        for row in rows:
            lines.append(f"| {row.scenario} | {row.mesh.streams} | " + " | ".join(cells(row.mesh) + cells(row.piper)) + f" | {row.note} |")
        lines.append("")
    return "\n".join(lines)


def _log(message: str) -> None:
    print(f"[bench-realtime] {message}", file=sys.stderr, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.realtime", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quotas", default=",".join(f"{q:g}" for q in DEFAULT_QUOTAS), help="shares of the pinned cores")
    parser.add_argument("--shares", default=",".join(f"{s:g}" for s in DEFAULT_SHARES), help="Poisson loads, as shares of the capacity")
    parser.add_argument("--duration-s", type=float, default=None, help="how long streams arrive in a Poisson run")
    parser.add_argument("--cores", type=int, default=2, help="cores the run is pinned to")
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_DURATION_S:g} s Poisson runs")
    parser.add_argument("--no-piper", action="store_true", help="measure the mesh only")
    parser.add_argument("--out", default=None, metavar="PATH", help="also write the tables here")
    parser.add_argument(
        PRECISION_FLAG, choices=PRECISIONS, default=DEFAULT_PRECISION, help="the workers' arithmetic (fp32: as a CPU without native bf16 serves)"
    )
    args = parser.parse_args(argv)
    cores = pin_cores(args.cores)
    duration_s = args.duration_s or (QUICK_DURATION_S if args.quick else DEFAULT_DURATION_S)
    texts = Texts()
    measured = []
    served: dict[str, str] = {}
    # The clients (this process) weigh as much as the mesh: on its cores they are served as promptly
    # as a client on another machine would be, whatever the mesh's load.
    with CpuQuota(None, name=f"tts-bench-clients-{os.getpid()}") as clients:
        clients.add(os.getpid())
        for share in (float(q) for q in args.quotas.split(",")):
            run = QuotaRun(len(cores), share, duration_s, [float(s) for s in args.shares.split(",")], not args.no_piper, texts, args.precision)
            rows, facts = run.rows()
            served = served or run.precisions
            measured.append((share, run.quota_cores, rows, facts))
            print(render(measured[-1:]), flush=True)
    table = render(measured)
    if args.out:
        shown = [arg for arg in (sys.argv[1:] if argv is None else argv) if not arg.startswith("--out") and arg != args.out]
        heading = run_heading("Real time on every machine", " ".join(["python -m bench.realtime", *shown]))
        header = machine_header(cores) + arithmetic_line(served, args.precision)
        Path(args.out).write_text(f"{heading}\n\n{header}\n\n{table}", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
