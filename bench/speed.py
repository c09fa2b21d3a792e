"""`make bench`: the mesh against piper-tts on the same machine, in the same run, in one table.

Starts the mesh (embedded Redis and the three services on free loopback ports), drives it with the
load generator, runs piper-tts with the same voice on the same texts at the same total CPU, and
prints one markdown table (also written to --out):

- time to first audio p50/p95 at one stream, cache cold (every sentence new) and warm (repeated text);
- throughput (audio seconds per wall second) at 1, 4, 8 and 16 concurrent streams, cache cold;
- a max-batch sweep (throughput and p50 latency), restarting the workers with --max-batch N;
- peak RSS of each service after the throughput runs;
- the vocoder's CPU per audio second streamed in 40 ms slices vs whole sentences (in-process);
- for every row, the ratio mesh / piper-tts.

    python -m bench.speed [--quick] [--out bench/results.md]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Final

from bench import piper_baseline
from bench.loadgen import LoadConfig, run_load
from bench.measure import LoadSummary
from bench.mesh import MAX_BATCH_FLAG, PRECISION_FLAG, BenchMesh, start_mesh
from bench.report import Row, arithmetic_line, cpu_description, render_markdown
from bench.streaming_cost import measure_streaming_cost, target_line
from bench.texts import TEXTS, unique_variants
from libs.voice.precision import DEFAULT_PRECISION, PRECISIONS

MIB: Final = 2**20
TAGS_PER_REQUEST: Final = 16  # more than the longest text's sentences, so tag ranges never overlap


@dataclass(frozen=True)
class SpeedConfig:
    """What one benchmark run measures."""

    ttfa_texts: tuple[str, ...] = ("short", "paragraph", "long")
    """Text lengths whose first-audio time is measured (names in bench.texts.TEXTS)."""
    ttfa_requests: int = 8
    """Requests per text length and cache state for first audio (count)."""
    throughput_text: str = "mixed"
    """Text of the throughput and sweep runs: a length's name, or "mixed" (the three lengths in turn)."""
    concurrencies: tuple[int, ...] = (1, 4, 8, 16)
    """Concurrent streams of the throughput rows."""
    requests_per_stream: int = 2
    """Throughput requests per stream (requests = concurrency x this)."""
    batch_sizes: tuple[int, ...] = (1, 2, 4, 8, 16)
    """--max-batch values of the sweep."""
    sweep_concurrency: int = 16
    """Concurrent streams during the sweep (enough to fill the largest batch)."""
    cores: int = 2
    """CPU cores the whole run (mesh and piper-tts alike) is pinned to."""
    request_timeout_s: float = 300.0
    """Deadline of each mesh request (seconds)."""
    start_timeout_s: float = 300.0
    """How long the mesh may take to load and warm up (seconds)."""
    precision: str = DEFAULT_PRECISION
    """The workers' --precision: fp32 measures the mesh as a CPU without native bf16 runs it."""


QUICK: Final = SpeedConfig(
    ttfa_requests=3, throughput_text="paragraph", concurrencies=(1, 8), requests_per_stream=1, batch_sizes=(1, 8), sweep_concurrency=8
)
"""A smoke run: every kind of row, few requests."""


def _log(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def pin_cores(cores: int) -> list[int]:
    """Pin this process (and so every child it starts) to its first `cores` allowed CPUs; returns them."""
    allowed = sorted(os.sched_getaffinity(0))
    if len(allowed) < cores:
        raise SystemExit(f"asked for {cores} cores but only {len(allowed)} are available: {allowed}")
    chosen = allowed[:cores]
    os.sched_setaffinity(0, chosen)
    return chosen


class TextPlan:
    """Every text of the run, made up front so the mesh and piper-tts speak exactly the same ones."""

    def __init__(self, config: SpeedConfig) -> None:
        self._next_tag = 0
        self.cold = {name: self._unique([TEXTS[name]], config.ttfa_requests) for name in config.ttfa_texts}
        # Warm texts are tagged too (once, then repeated), so cold and warm first sentences are equally long.
        self.warm = {name: self._unique([TEXTS[name]], 1) for name in config.ttfa_texts}
        base = list(TEXTS.values()) if config.throughput_text == "mixed" else [TEXTS[config.throughput_text]]
        counts = {c * config.requests_per_stream for c in config.concurrencies}
        counts.add(config.sweep_concurrency * config.requests_per_stream)
        self.load = {count: self._unique(base, count) for count in sorted(counts)}

    def _unique(self, base: Sequence[str], count: int) -> list[str]:
        texts = [unique_variants(base[i % len(base)], 1, self._next_tag + i * TAGS_PER_REQUEST)[0] for i in range(count)]
        self._next_tag += count * TAGS_PER_REQUEST
        return texts


def _mesh_run(mesh: BenchMesh, texts: Sequence[str], concurrency: int, requests: int, config: SpeedConfig) -> LoadSummary:
    load = LoadConfig(target=mesh.gateway_address, concurrency=concurrency, requests=requests, request_timeout_s=config.request_timeout_s)
    return asyncio.run(run_load(load, texts)).summary


def _errors(summary: LoadSummary | None) -> str:
    if summary is None or not summary.errors:
        return ""
    codes = ", ".join(f"{code} {n}" for code, n in sorted(summary.status_counts.items()) if code != "OK")
    return f"mesh errors {summary.errors}/{summary.requests} ({codes})"


def _ms(value: float | None) -> float | None:
    return None if value is None else value * 1000


@dataclass
class MeshNumbers:
    """What the mesh runs produced; a run that did not happen has no entry."""

    cold: dict[str, LoadSummary]
    warm: dict[str, LoadSummary]
    load: dict[int, LoadSummary]
    rss: dict[str, int]
    sweep: dict[int, LoadSummary]
    failure: str = ""
    precisions: dict[str, str] = field(default_factory=dict)
    """The arithmetic each worker served in (`BenchMesh.precisions`)."""


def _start(config: SpeedConfig, worker_args: list[str], numbers: MeshNumbers) -> BenchMesh | None:
    """A started mesh, or None with the reason in `numbers.failure` (piper-tts is still measured)."""
    worker_args = [PRECISION_FLAG, config.precision, *worker_args]
    _log(f"starting the mesh {' '.join(worker_args)}")
    try:
        return start_mesh(worker_args, timeout_s=config.start_timeout_s)
    except (RuntimeError, TimeoutError, OSError) as error:
        flags = f" with {' '.join(worker_args)}" if worker_args else ""
        numbers.failure = f"the mesh did not start{flags}: {str(error).splitlines()[0]}"
        _log(f"{numbers.failure}\n{error}")
        return None


def measure_mesh(config: SpeedConfig, plan: TextPlan) -> MeshNumbers:
    """Every mesh measurement; a mesh that does not start leaves the numbers empty and says why."""
    numbers = MeshNumbers({}, {}, {}, {}, {})
    mesh = _start(config, [], numbers)
    if mesh is None:
        return numbers
    try:
        numbers.precisions = mesh.precisions()
        for name, texts in plan.cold.items():
            _log(f"mesh: first audio, cold, {name}")
            numbers.cold[name] = _mesh_run(mesh, texts, 1, len(texts), config)
            _log(f"mesh: first audio, warm, {name}")
            _mesh_run(mesh, plan.warm[name], 1, 1, config)  # fills the cache
            numbers.warm[name] = _mesh_run(mesh, plan.warm[name], 1, config.ttfa_requests, config)
        for concurrency in config.concurrencies:
            requests = concurrency * config.requests_per_stream
            _log(f"mesh: throughput, {concurrency} streams, {requests} requests")
            numbers.load[concurrency] = _mesh_run(mesh, plan.load[requests], concurrency, requests, config)
        numbers.rss = mesh.peak_rss()
    finally:
        mesh.stop()
    requests = config.sweep_concurrency * config.requests_per_stream
    for max_batch in config.batch_sizes:
        _log(f"mesh: sweep, {MAX_BATCH_FLAG} {max_batch}")
        mesh = _start(config, [MAX_BATCH_FLAG, str(max_batch)], numbers)
        if mesh is None:
            return numbers
        try:
            numbers.sweep[max_batch] = _mesh_run(mesh, plan.load[requests], config.sweep_concurrency, requests, config)
        finally:
            mesh.stop()
    return numbers


@dataclass
class PiperNumbers:
    """What the piper-tts runs produced."""

    cold: dict[str, LoadSummary]
    warm: dict[str, LoadSummary]
    load: dict[int, piper_baseline.PiperRun]
    all_load_runs: dict[int, list[piper_baseline.PiperRun]]


def measure_piper(config: SpeedConfig, plan: TextPlan) -> PiperNumbers:
    """Every piper-tts measurement, on the same texts and cores."""
    numbers = PiperNumbers({}, {}, {}, {})
    voice = piper_baseline.load_voice(config.cores)
    for name, texts in plan.cold.items():
        _log(f"piper-tts: first audio, {name}")
        numbers.cold[name] = piper_baseline.run_in_process(texts, len(texts), voice=voice).summary
        numbers.warm[name] = piper_baseline.run_in_process(plan.warm[name], config.ttfa_requests, voice=voice).summary
    concurrencies = sorted({*config.concurrencies, config.sweep_concurrency})
    for concurrency in concurrencies:
        requests = concurrency * config.requests_per_stream
        _log(f"piper-tts: throughput, {concurrency} streams, {requests} requests")
        if concurrency == 1:
            run = piper_baseline.run_in_process(plan.load[requests], requests, threads=config.cores, voice=voice)
            numbers.load[1], numbers.all_load_runs[1] = run, [run]
        else:
            best, runs = piper_baseline.best_concurrent(plan.load[requests], requests, concurrency, cores=config.cores)
            numbers.load[concurrency], numbers.all_load_runs[concurrency] = best, runs
    return numbers


def build_rows(config: SpeedConfig, mesh: MeshNumbers, piper: PiperNumbers) -> list[Row]:
    """The table, row by row."""
    rows: list[Row] = []
    for state, mesh_side, piper_side in (("cold", mesh.cold, piper.cold), ("warm", mesh.warm, piper.warm)):
        for name in config.ttfa_texts:
            ours, theirs = mesh_side.get(name), piper_side[name]
            for label in ("p50", "p95"):
                rows.append(
                    Row(
                        f"first audio {label}, ms, cache {state} (lower is better)",
                        name,
                        "1",
                        _ms(getattr(ours.ttfa_s, label)) if ours else None,
                        _ms(getattr(theirs.ttfa_s, label)),
                        _errors(ours) or ("piper has no cache" if state == "warm" and label == "p50" else ""),
                    )
                )
    for concurrency in config.concurrencies:
        ours, theirs = mesh.load.get(concurrency), piper.load[concurrency]
        rows.append(
            Row(
                "throughput, audio s per wall s (higher is better)",
                config.throughput_text,
                str(concurrency),
                ours.throughput if ours else None,
                theirs.summary.throughput,
                "; ".join(filter(None, [f"piper: {theirs.setup.label}", _errors(ours)])),
            )
        )
    sweep_piper = piper.load[config.sweep_concurrency]
    for max_batch in config.batch_sizes:
        ours = mesh.sweep.get(max_batch)
        theirs = sweep_piper.summary
        for measure, mesh_value, piper_value in (
            ("throughput, audio s per wall s (higher is better)", ours.throughput if ours else None, theirs.throughput),
            ("first audio p50, ms (lower is better)", _ms(ours.ttfa_s.p50) if ours else None, _ms(theirs.ttfa_s.p50)),
            ("request p50, ms (lower is better)", _ms(ours.total_s.p50) if ours else None, _ms(theirs.total_s.p50)),
        ):
            rows.append(
                Row(f"max-batch {max_batch}: {measure}", config.throughput_text, str(config.sweep_concurrency), mesh_value, piper_value, _errors(ours))
            )
    top = max(config.concurrencies)
    single = next((run for run in piper.all_load_runs.get(top, []) if run.setup.processes == 1 and run.peak_rss_bytes), None)
    best = piper.load[top]
    for name in ("gateway", "acoustic", "vocoder", "redis"):
        value = mesh.rss.get(name)
        rows.append(
            Row(
                f"peak RSS {name}, MiB (lower is better)",
                "-",
                str(top),
                value / MIB if value is not None else None,
                single.peak_rss_bytes / MIB if single else None,
                "vs one piper-tts process" if single else "",
            )
        )
    total_mesh = sum(mesh.rss.values()) / MIB if mesh.rss else None
    total_piper = best.setup.processes * best.peak_rss_bytes / MIB if best.peak_rss_bytes else None
    rows.append(Row("peak RSS all processes, MiB (lower is better)", "-", str(top), total_mesh, total_piper, f"piper: {best.setup.label}"))
    return rows


def target_lines(config: SpeedConfig, mesh: MeshNumbers, piper: PiperNumbers) -> list[str]:
    """The issue's speed targets, each with its measured value and whether it was met."""

    def verdict(met: bool) -> str:
        return "met" if met else "MISSED"

    lines = []
    if "paragraph" in mesh.cold:
        ratio = mesh.cold["paragraph"].ttfa_s.p50 / piper.cold["paragraph"].ttfa_s.p50
        lines.append(f"Target first audio p50, cold, paragraph <= 0.25x piper-tts: {ratio:.2f}x, {verdict(ratio <= 0.25)}.")
        if "paragraph" in mesh.warm:
            hit = mesh.warm["paragraph"].ttfa_s.p50 / mesh.cold["paragraph"].ttfa_s.p50
            lines.append(f"Target first audio on a cache hit <= 0.2x cold (paragraph, p50): {hit:.2f}x, {verdict(hit <= 0.2)}.")
    if 8 in mesh.load and 8 in piper.load:
        ratio = mesh.load[8].throughput / piper.load[8].summary.throughput
        lines.append(f"Target throughput at 8 streams >= 1.0x the best piper-tts: {ratio:.2f}x, {verdict(ratio >= 1.0)}.")
    if mesh.rss:
        name, largest = max(mesh.rss.items(), key=lambda item: item[1])
        lines.append(
            f"Target no service above 1 GiB RSS at {max(config.concurrencies)} streams: largest {name} {largest / MIB:.0f} MiB, "
            f"{verdict(largest <= 1024 * MIB)}."
        )
    return lines


def notes(config: SpeedConfig, cores: list[int], mesh: MeshNumbers, seconds: float) -> list[str]:
    """What a reader needs to interpret the table."""
    lines = [
        f"{cpu_description()}; the benchmark, the mesh and piper-tts were all pinned to CPUs {cores} ({config.cores} cores).",
        "Mesh: embedded Redis + gateway, acoustic and vocoder as separate processes on loopback, each with its default flags"
        + ("" if config.precision == DEFAULT_PRECISION else f" but {PRECISION_FLAG} {config.precision}")
        + "; the load generator (bench.loadgen) runs in the benchmark process.",
        arithmetic_line(mesh.precisions, config.precision),
        "piper-tts 1.8.0, voice en_US-joe-medium, streaming per sentence (first audio = its first sentence's chunk). "
        f"One stream: in-process, {config.cores} onnxruntime threads. N streams: the better of "
        f"{config.cores} processes x 1 thread and 1 process x {config.cores} threads (named per row); latency includes queueing.",
        "Cold: every sentence of every request carries a distinct two-word tag, so nothing is in the cache; "
        "piper-tts speaks the same tagged texts. Warm: the same text again after one request filled the cache.",
        f"Throughput: audio seconds received by successful requests / wall seconds, {config.requests_per_stream} request(s) per stream; "
        f"text {config.throughput_text!r}" + (" (short, paragraph and long in turn)." if config.throughput_text == "mixed" else "."),
        "Peak RSS: VmHWM of each process after the throughput runs; piper-tts: VmHWM of its worker processes.",
        f"Ratio = mesh / piper-tts. Run took {seconds:.0f} s.",
    ]
    if mesh.failure:
        lines.append(f"No mesh numbers: {mesh.failure}.")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.speed", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run: every row, few requests (a few minutes)")
    parser.add_argument("--out", type=Path, default=None, help="also write the table as markdown to this file")
    parser.add_argument("--cores", type=int, default=None, help="CPU cores for everything (default 2)")
    parser.add_argument(
        PRECISION_FLAG, choices=PRECISIONS, default=DEFAULT_PRECISION, help="the workers' arithmetic (fp32: as a CPU without native bf16 serves)"
    )
    args = parser.parse_args(argv)
    config = replace(QUICK if args.quick else SpeedConfig(), precision=args.precision)
    if args.cores is not None:
        config = replace(config, cores=args.cores)
    started = time.monotonic()
    cores = pin_cores(config.cores)
    plan = TextPlan(config)
    _log("vocoder: streamed vs whole-sentence compute, in-process")
    streaming_cost = measure_streaming_cost()
    mesh = measure_mesh(config, plan)
    piper = measure_piper(config, plan)
    rows = build_rows(config, mesh, piper)
    title = f"Speed: tts-mesh vs piper-tts ({'quick' if args.quick else 'full'} run, {time.strftime('%Y-%m-%d %H:%M')})"
    lines = [*target_lines(config, mesh, piper), target_line(streaming_cost)]
    lines += notes(config, cores, mesh, time.monotonic() - started)
    table = render_markdown(rows, title, lines)
    print(table)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(table, encoding="utf-8")
        _log(f"table written to {args.out}")
    return 1 if mesh.failure else 0


if __name__ == "__main__":
    sys.exit(main())
