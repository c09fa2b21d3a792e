"""`make bench-load`: what each of many concurrent listeners hears, from the mesh and from piper-tts.

For every stream count, that many cold streams (each a three-sentence paragraph made unique, so the
mel cache misses) start together; a player per stream starts at its first audio and pauses whenever
its buffer runs dry (`bench.measure.playback_stalls`). One row per count, mesh and piper-tts side by
side, measured in one run on the same pinned cores:

- first audio p50 / p95 over the streams served;
- streams whose playback stalled more than 100 ms in all, and the worst stream's stall;
- audio seconds delivered per wall second;
- streams refused (any status but OK: the mesh sheds with RESOURCE_EXHAUSTED);
- for a mesh this run started: the CPU one stream's first audio cost (both workers' first-audio steps,
  `tts_<worker>_step_cpu_seconds_total{first_audio="true"}`), and the floor that cost sets: the p95
  first audio the pinned cores would reach if they did nothing but first audios, back to back.

piper-tts is served the obvious way: a pool of piper-tts worker processes, each speaking one request
at a time, sentence by sentence, with requests queued in front of the pool; every pool size in
`piper_setups` is run and the best (most streams within the bar, then lowest p95) is shown per count.
The last lines name the largest count each served with first audio p95 <= 250 ms, no stream stalled
over 100 ms and none refused.

    python -m bench.load_table [--quick] [--counts 1,8,16] [--target HOST:PORT] [--out bench/load.md]
"""

from __future__ import annotations

import argparse
import asyncio
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Final

from bench import piper_baseline
from bench.loadgen import LoadConfig, run_load
from bench.measure import STALL_BAR_S, RequestResult, percentile
from bench.mesh import WORKERS, BenchMesh, start_mesh
from bench.report import run_heading
from bench.speed import pin_cores
from bench.texts import PARAGRAPH, unique_variants

DEFAULT_COUNTS: Final = (1, 8, 16, 24, 32, 48)
QUICK_COUNTS: Final = (1, 8)
FIRST_AUDIO_BAR_S: Final = 0.25
"""First audio p95 a count must keep to count as served in real time."""
TAGS_PER_REQUEST: Final = 16
REQUEST_TIMEOUT_S: Final = 300.0


@dataclass(frozen=True)
class LoadRow:
    """One stream count, as one server handled it."""

    streams: int
    """Streams started together."""
    first_audio_p50_s: float
    """Median first audio over the streams served (seconds; NaN when none was)."""
    first_audio_p95_s: float
    """95th percentile of the same."""
    stalled: int
    """Streams served whose playback stalled more than STALL_BAR_S in all."""
    served: int
    """Streams that finished with OK."""
    worst_stall_s: float
    """The largest total stall of any stream served (seconds)."""
    audio_s_per_s: float
    """Audio delivered per wall second, from the first start to the last end."""
    refused: int
    """Streams that did not finish with OK."""
    label: str = ""
    """How the server was set up (piper-tts pool size)."""
    first_audio_cpu_s: float = math.nan
    """CPU seconds of the steps before one stream's first audio, both workers, per stream that heard
    audio (NaN when the workers' metrics were not read)."""
    first_audio_floor_p95_s: float = math.nan
    """The first audio p95 the cores would reach doing nothing but first audios (`first_audio_floor`)."""

    @property
    def real_time(self) -> bool:
        """Whether every stream was served, first audio p95 within the bar and no stream stalled."""
        return self.refused == 0 and self.stalled == 0 and self.first_audio_p95_s <= FIRST_AUDIO_BAR_S


def row_of(streams: int, results: Sequence[RequestResult], label: str = "") -> LoadRow:
    """The row of one run of `streams` streams."""
    served = [result for result in results if result.ok]
    first = [result.ttfa_s for result in served if result.ttfa_s is not None]
    start = min((result.started_s for result in results), default=0.0)
    end = max((result.started_s + result.total_s for result in results), default=0.0)
    return LoadRow(
        streams=streams,
        first_audio_p50_s=percentile(first, 50),
        first_audio_p95_s=percentile(first, 95),
        stalled=sum(result.stall_s > STALL_BAR_S for result in served),
        served=len(served),
        worst_stall_s=max((result.stall_s for result in served), default=0.0),
        audio_s_per_s=sum(result.audio_s for result in served) / (end - start) if end > start else 0.0,
        refused=len(results) - len(served),
        label=label,
    )


def first_audio_floor(streams: int, cpu_s: float, cores: float) -> list[float]:
    """When each of `streams` first audios could come at the earliest, if each costs `cpu_s` of CPU and
    `cores` cores (a fraction under a CPU quota) did nothing else from the moment all were asked for
    (seconds, earliest first): the k-th waits for its own steps, one after another on at most one core,
    and for k streams' steps shared by the cores. Gateway work, hops and every started stream's next
    audio come on top."""
    if cores <= 0:
        raise ValueError(f"cores must be more than 0, got {cores}")
    return [max(cpu_s / min(1.0, cores), index * cpu_s / cores) for index in range(1, streams + 1)]


def first_audio_floor_p95(first_audio_cpu_s: float, streams: int, cores: float) -> float:
    """The p95 of `first_audio_floor` for `streams` first audios that cost `first_audio_cpu_s` in all (NaN for none)."""
    if streams <= 0:
        return math.nan
    return percentile(first_audio_floor(streams, first_audio_cpu_s / streams, cores), 95)


def with_first_audio_cost(row: LoadRow, first_audio_cpu_s: float, cores: float) -> LoadRow:
    """`row` with what its first audios cost: `first_audio_cpu_s` in all, over the streams that heard audio."""
    heard = row.served
    if heard == 0:
        return row
    floor = first_audio_floor_p95(first_audio_cpu_s, heard, cores)
    return replace(row, first_audio_cpu_s=first_audio_cpu_s / heard, first_audio_floor_p95_s=floor)


def first_audio_cpu(mesh: BenchMesh) -> float:
    """CPU seconds both workers have spent so far in steps of streams that had not yet heard audio."""
    total = 0.0
    for worker in WORKERS:
        for key, sample in mesh.metrics(worker).items():
            if key.startswith(f"tts_{worker}_step_cpu_seconds_total{{") and 'first_audio="true"' in key:
                total += sample
    return total


def largest_real_time(rows: Sequence[LoadRow]) -> int:
    """The largest stream count served in real time (0 when none was)."""
    return max((row.streams for row in rows if row.real_time), default=0)


def paragraphs(count: int, first_tag: int) -> list[str]:
    """`count` different paragraphs (unique sentences: the cache misses), tags from `first_tag` on."""
    return [unique_variants(PARAGRAPH, 1, first_tag + index * TAGS_PER_REQUEST)[0] for index in range(count)]


def mesh_rows(
    target: str, counts: Sequence[int], texts: dict[int, list[str]], *, mesh: BenchMesh | None = None, cores: int = 1
) -> list[LoadRow]:
    """One row per count against the gateway at `target`; each count's streams start together. With
    `mesh` (the one serving `target`, on `cores` cores), each row also says what its first audios cost."""
    rows = []
    for count in counts:
        _log(f"mesh: {count} streams")
        spent_before = first_audio_cpu(mesh) if mesh is not None else 0.0
        config = LoadConfig(target=target, concurrency=count, requests=count, request_timeout_s=REQUEST_TIMEOUT_S)
        results = asyncio.run(run_load(config, texts[count])).results
        refusals = sorted({f"{result.status}: {result.error}" for result in results if not result.ok})
        for refusal in refusals[:3]:
            _log(f"  refused: {refusal[:200]}")
        row = row_of(count, results)
        if mesh is not None:
            row = with_first_audio_cost(row, first_audio_cpu(mesh) - spent_before, cores)
        rows.append(row)
    return rows


def piper_setups(cores: int) -> list[piper_baseline.PiperSetup]:
    """The pool sizes tried: one process per core, two per core, and one process with every core."""
    setups = [piper_baseline.PiperSetup(cores, 1), piper_baseline.PiperSetup(2 * cores, 1)]
    return setups + ([piper_baseline.PiperSetup(1, cores)] if cores > 1 else [])


def piper_rows(counts: Sequence[int], texts: dict[int, list[str]], cores: int) -> list[LoadRow]:
    """One row per count from the best piper-tts pool for that count."""
    best: dict[int, LoadRow] = {}
    for setup in piper_setups(cores):
        # One process serves one stream at a time: with more than one stream a pool of one only queues them.
        setup_counts = counts if setup.processes > 1 else [count for count in counts if count == 1]
        if not setup_counts:
            continue
        with piper_baseline.PiperPool(setup) as pool:
            for count in setup_counts:
                _log(f"piper-tts {setup.label}: {count} streams")
                row = row_of(count, pool.run(texts[count], count, count).results, setup.label)
                if count not in best or _better(row, best[count]):
                    best[count] = row
    return [best[count] for count in counts]


def _better(row: LoadRow, other: LoadRow) -> bool:
    if row.real_time != other.real_time:
        return row.real_time
    return (row.stalled, _finite(row.first_audio_p95_s)) < (other.stalled, _finite(other.first_audio_p95_s))


def _finite(value: float) -> float:
    return math.inf if math.isnan(value) else value


def render(mesh: Sequence[LoadRow], piper: Sequence[LoadRow]) -> str:
    """The markdown table and the largest real-time counts."""

    def ms(value: float) -> str:
        return "-" if math.isnan(value) else f"{value * 1000:.0f}"

    def cells(row: LoadRow | None) -> list[str]:
        if row is None:
            return ["", "", "", "", ""]
        return [
            f"{ms(row.first_audio_p50_s)} / {ms(row.first_audio_p95_s)} ms",
            f"{row.stalled} of {row.served}",
            f"{row.worst_stall_s:.2f} s",
            f"{row.audio_s_per_s:.1f}",
            str(row.refused),
        ]

    piper_by_count = {row.streams: row for row in piper}
    header = (
        "| streams | mesh first audio p50 / p95 | mesh stalled > 100 ms | mesh worst stall | mesh audio s per s | mesh refused "
        "| piper-tts first audio p50 / p95 | piper-tts stalled > 100 ms | piper-tts worst stall | piper-tts audio s per s "
        "| piper-tts refused | piper-tts pool |"
    )
    lines = [header, "|" + "---:|" * 11 + "---|"]
    for row in mesh:
        other = piper_by_count.get(row.streams)
        lines.append(f"| {row.streams} | " + " | ".join(cells(row) + cells(other) + [other.label if other else ""]) + " |")
    lines.append("")
    lines.append(
        f"Largest count with first audio p95 <= 250 ms, no stall over 100 ms, none refused: mesh {largest_real_time(mesh)}"
    )
    if piper:
        lines[-1] += f", piper-tts {largest_real_time(piper)}"
    costed = [row for row in mesh if not math.isnan(row.first_audio_cpu_s)]
    if costed:
        lines += [
            "",
            "What the mesh's first audios cost (CPU of both workers' steps before each stream's first audio), and the",
            "p95 the pinned cores would reach if they made nothing but first audios, one after another:",
            "",
            "| streams | CPU per first audio | p95 floor from that CPU | mesh first audio p95 |",
            "|---:|---:|---:|---:|",
        ]
        lines += [
            f"| {row.streams} | {ms(row.first_audio_cpu_s)} ms | {ms(row.first_audio_floor_p95_s)} ms | {ms(row.first_audio_p95_s)} ms |"
            for row in costed
        ]
    return "\n".join(lines) + "\n"


def _started_mesh_rows(
    worker_args: Sequence[list[str]], counts: Sequence[int], texts: dict[int, list[str]], warm_up: list[str], cores: int
) -> list[list[LoadRow]]:
    """Start one mesh per entry of `worker_args` (its workers' flags), warm each with one request, and
    measure every count on each in turn, so the meshes meet the same machine load; stop them."""
    meshes = []
    try:
        for flags in worker_args:
            _log(f"starting the mesh {' '.join(flags)}".rstrip())
            meshes.append(start_mesh(flags))
            asyncio.run(run_load(LoadConfig(target=meshes[-1].gateway_address, requests=1), warm_up))
        rows: list[list[LoadRow]] = [[] for _ in meshes]
        for count in counts:
            for index, started in enumerate(meshes):
                rows[index].extend(mesh_rows(started.gateway_address, [count], texts, mesh=started, cores=cores))
        return rows
    finally:
        for started in meshes:
            started.stop()


def _log(message: str) -> None:
    print(f"[bench-load] {message}", file=sys.stderr, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.load_table", description=__doc__.split("\n\n")[0])
    parser.add_argument("--counts", default=None, help="comma-separated stream counts (default 1,8,16,24,32,48)")
    parser.add_argument("--quick", action="store_true", help="only 1 and 8 streams")
    parser.add_argument(
        "--target", default=None, help="drive this running gateway (loopback HOST:PORT) instead of starting a mesh"
    )
    parser.add_argument("--cores", type=int, default=2, help="cores the run is pinned to (mesh and piper-tts alike)")
    parser.add_argument("--no-piper", action="store_true", help="measure the mesh only")
    parser.add_argument(
        "--worker-args", default="", help='extra flags for both workers, e.g. "--scheduling arrival --realtime-headroom 0"'
    )
    parser.add_argument(
        "--baseline-args", default=None,
        help='also run a second mesh with these worker flags, e.g. "--scheduling arrival --realtime-headroom 0", '
        "count by count with the first",
    )  # fmt: skip
    parser.add_argument("--out", default=None, metavar="PATH", help="also write the table here")
    args = parser.parse_args(argv)
    counts = tuple(int(c) for c in args.counts.split(",")) if args.counts else QUICK_COUNTS if args.quick else DEFAULT_COUNTS
    cores = pin_cores(args.cores)
    _log(f"pinned to cores {cores}")
    texts, tag = {}, 0
    for count in counts:
        texts[count] = paragraphs(count, tag)
        tag += count * TAGS_PER_REQUEST
    warm_up = paragraphs(1, tag)
    baseline: list[LoadRow] | None = None
    if args.target:
        asyncio.run(run_load(LoadConfig(target=args.target, requests=1), warm_up))
        mesh = mesh_rows(args.target, counts, texts)
    else:
        flags = [args.worker_args.split()] + ([] if args.baseline_args is None else [args.baseline_args.split()])
        mesh, *others = _started_mesh_rows(flags, counts, texts, warm_up, len(cores))
        baseline = others[0] if others else None
    piper = [] if args.no_piper else piper_rows(counts, texts, args.cores)
    table = render(mesh, piper)
    if baseline is not None:
        table += f"\nThe same streams, mesh with worker flags `{args.baseline_args}`:\n\n" + render(baseline, [])
    print(table)
    if args.out:
        heading = run_heading("Many listeners at once", "make bench-load")
        Path(args.out).write_text(f"{heading}\n\n{table}", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
