"""Where an audio second's CPU goes: the mesh's processes and model stages against piper-tts, same texts.

A mesh with `make run`'s defaults speaks a burst of cold paragraphs (every sentence misses the
cache); each process's CPU over the burst (its child processes included: the gateway's text
processes) and the workers' model-step counters (`tts_<worker>_step_cpu_seconds_total`, by stage),
divided by the audio the clients received, give CPU seconds per audio second. A piper-tts pool of
one process per core then speaks the same number of other paragraphs of the same kind, and its
processes' CPU is divided the same way. Both run on the same pinned cores, one after the other.

With `--tiers quality,fast` the mesh speaks a burst in each tier of the voice, one after the other
on the same mesh (each its own cold paragraphs), and a second table sets the tiers side by side:
CPU per audio second of all the mesh's processes, and the CPU of the workers' first-audio steps per
stream (`first_audio="true"` step counters).

    python -m bench.cpu_per_audio [--cores 1] [--streams 4] [--tiers quality,fast] [--no-piper] [--precision fp32]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from bench import piper_baseline
from bench.load_table import WORKERS, first_audio_cpu, paragraphs
from bench.mesh import PRECISION_FLAG, BenchMesh
from bench.realtime import burst
from bench.report import arithmetic_line, machine_header
from bench.speed import pin_cores
from libs.scheduling.capacity import process_cpu_s
from libs.voice.precision import DEFAULT_PRECISION, PRECISIONS
from libs.voice.tiers import tier_enum, tier_of_name

STEP_PREFIX = "_step_cpu_seconds_total{"


def tree_cpu_s(pid: int) -> float:
    """CPU seconds of process `pid` and of its children."""
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text(encoding="ascii").split()
    except OSError:
        children = []
    return process_cpu_s(pid) + sum(process_cpu_s(int(child)) for child in children)


def per_audio_s(spend: Callable[[], dict[str, float]], run: Callable[[], float]) -> dict[str, float]:
    """CPU seconds per audio second of each entry of `spend()` over `run()`, which returns the audio it made."""
    before = spend()
    audio_s = run()
    after = spend()
    return {name: (after[name] - before.get(name, 0.0)) / audio_s for name in after if after[name] > before.get(name, 0.0)}


def mesh_spend(mesh: BenchMesh) -> dict[str, float]:
    """CPU seconds so far: each process's, and each worker stage's model steps."""
    spent = {f"{name} process": tree_cpu_s(pid) for name, pid in mesh.pids().items()}
    for worker in WORKERS:
        for key, value in mesh.metrics(worker).items():
            if key.startswith(f"tts_{worker}{STEP_PREFIX}"):
                labels = key[len(f"tts_{worker}{STEP_PREFIX}") : -1].replace('"', "")
                spent[f"{worker} steps {{{labels}}}"] = spent.get(f"{worker} steps {{{labels}}}", 0.0) + value
    return spent


def render(mesh: dict[str, float], piper: dict[str, float]) -> str:
    mesh_total = sum(value for name, value in mesh.items() if name.endswith(" process"))
    piper_total = sum(piper.values())
    lines = ["| where | CPU s per audio s | share of piper-tts's |", "|---|---:|---:|"]
    for name, value in sorted(mesh.items()):
        lines.append(f"| mesh: {name} | {value:.4f} | {value / piper_total:.2f} |")
    lines.append(f"| **mesh, all processes** | **{mesh_total:.4f}** | **{mesh_total / piper_total:.2f}** |")
    lines.append(f"| **piper-tts, all processes** | **{piper_total:.4f}** | 1.00 |")
    return "\n".join(lines)


def render_tiers(by_tier: dict[str, tuple[dict[str, float], float]]) -> str:
    """The tiers side by side: all processes' CPU per audio second and the first audio's step CPU,
    each also as a share of the first tier's."""
    totals = {tier: sum(value for name, value in spent.items() if name.endswith(" process")) for tier, (spent, _) in by_tier.items()}
    first = next(iter(by_tier))
    lines = ["| tier | mesh CPU s per audio s | share | CPU per first audio | share |", "|---|---:|---:|---:|---:|"]
    for tier, (_, first_audio_s) in by_tier.items():
        lines.append(
            f"| {tier} | {totals[tier]:.4f} | {totals[tier] / totals[first]:.2f} | {1000 * first_audio_s:.1f} ms | "
            f"{first_audio_s / by_tier[first][1]:.2f} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cores", type=int, default=1, help="cores the run is pinned to")
    parser.add_argument("--streams", type=int, default=4, help="streams started together, for each of the two")
    parser.add_argument("--tiers", default="quality", help="the voice's tiers to measure, one burst each (quality, fast)")
    parser.add_argument("--no-piper", action="store_true", help="leave piper-tts out")
    parser.add_argument(
        PRECISION_FLAG, choices=PRECISIONS, default=DEFAULT_PRECISION, help="the workers' arithmetic (fp32: as a CPU without native bf16 serves)"
    )
    args = parser.parse_args(argv)
    cores = pin_cores(args.cores)
    tiers = [tier_of_name(name) for name in args.tiers.split(",")]
    mesh = BenchMesh(log_dir=Path(tempfile.mkdtemp(prefix="tts-bench-cpu-")), worker_args=[PRECISION_FLAG, args.precision]).start()
    by_tier: dict[str, tuple[dict[str, float], float]] = {}
    try:
        precisions = mesh.precisions()
        for offset, tier in enumerate(tiers):
            burst(mesh.gateway_address, paragraphs(2, 9_000_000 + offset), tier=tier_enum(tier))  # warm: first calls of every kind
            texts = paragraphs(args.streams, 9_100_000 + 10_000 * offset)
            first_before = first_audio_cpu(mesh)
            spent = per_audio_s(
                lambda: mesh_spend(mesh), lambda: sum(r.audio_s for r in burst(mesh.gateway_address, texts, tier=tier_enum(tier)))  # noqa: B023
            )
            by_tier[tier] = (spent, (first_audio_cpu(mesh) - first_before) / args.streams)
    finally:
        mesh.stop()
    print(machine_header(cores) + arithmetic_line(precisions, args.precision) + "\n")
    if len(by_tier) > 1:
        print(render_tiers(by_tier))
        print()
    if args.no_piper:
        return 0
    mesh_part = next(iter(by_tier.values()))[0]
    with piper_baseline.PiperPool(piper_baseline.PiperSetup(len(cores), 1)) as pool:
        pool.run(paragraphs(1, 9_200_000), 1, 1)  # warm
        texts = paragraphs(args.streams, 9_300_000)
        piper_part = per_audio_s(
            lambda: {f"worker {pid}": tree_cpu_s(pid) for pid in pool.worker_pids},
            lambda: sum(r.audio_s for r in pool.run_arrivals(texts, [0.0] * len(texts)).results),
        )
    print(render(mesh_part, piper_part))
    return 0


if __name__ == "__main__":
    sys.exit(main())
