"""Cold first audio of two source trees, interleaved: one tree's mesh, then the other's, for a few
rounds, so that both meet the same machine. `make bench` runs one tree after the other, and on a
small shared machine its cold first audio moves 10-20 % between runs of one tree.

    git worktree add /tmp/before <commit>
    python -m bench.cold_interleaved --before /tmp/before --rounds 3 --calls 20

Each round starts the tree's mesh (as `make bench` does), warms it with one request, and times
`--calls` cold requests per text (each a new sentence, a pause between them); it prints the
median per text and round, as a markdown table.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

TEXT_NAMES = ("short", "paragraph", "long")
PAUSE_S = 0.3
"""Between cold calls, so one call's remaining sentences never overlap the next one's first audio."""


def _measure(calls: int, first_tag: int) -> list[float]:
    """In this process's tree: start a mesh and return the median cold first audio (ms) per text."""
    from bench.loadgen import LoadConfig, run_load
    from bench.mesh import start_mesh
    from bench.speed import pin_cores
    from bench.texts import TEXTS, unique_variants

    pin_cores(2)
    mesh = start_mesh([])
    try:
        target = mesh.gateway_address
        warm_up = unique_variants(TEXTS["paragraph"], 1, first_tag + 9_000)
        asyncio.run(run_load(LoadConfig(target=target, requests=1), warm_up))
        medians = []
        for offset, name in enumerate(TEXT_NAMES):
            first_audio_ms = []
            for text in unique_variants(TEXTS[name], calls, first_tag + offset * 1000):
                result = asyncio.run(run_load(LoadConfig(target=target, requests=1), [text])).results[0]
                first_audio_ms.append(result.ttfa_s * 1000.0)
                time.sleep(PAUSE_S)
            medians.append(statistics.median(first_audio_ms))
        return medians
    finally:
        mesh.stop()


def _round(tree: Path, calls: int, first_tag: int) -> list[float]:
    """`_measure` in a process of its own on the sources of `tree` (this file runs there by path, so
    a tree older than it is measured the same way; the mesh and its launcher are the tree's own)."""
    command = [sys.executable, __file__, "--measure", str(calls), str(first_tag)]
    environment = {**os.environ, "PYTHONPATH": str(tree)}
    output = subprocess.run(command, cwd=tree, env=environment, check=True, capture_output=True, text=True)
    return [float(value) for value in output.stdout.split()[-len(TEXT_NAMES) :]]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cold_interleaved", description=__doc__.split("\n\n")[0])
    parser.add_argument("--measure", nargs=2, type=int, metavar=("CALLS", "TAG"), help=argparse.SUPPRESS)
    parser.add_argument("--before", type=Path, help="a checkout of the tree to compare with (git worktree)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds; each runs both trees once")
    parser.add_argument("--calls", type=int, default=20, help="cold calls per text and round")
    args = parser.parse_args(argv)
    if args.measure:
        print(*_measure(*args.measure))
        return 0
    if args.before is None:
        parser.error("--before is required")
    after = Path(__file__).resolve().parents[1]
    trees = {"before": args.before.resolve(), "after": after}
    lines = ["| run | cold " + " / ".join(TEXT_NAMES) + ", ms |", "|---|---|"]
    tag = int(time.time()) % 10_000 * 10_000
    for round_index in range(1, args.rounds + 1):
        for label, tree in trees.items():
            medians = _round(tree, args.calls, tag)
            tag += 5_000
            lines.append(f"| {label} ({tree.name}), round {round_index} | " + " / ".join(f"{m:.1f}" for m in medians) + " |")
            print(lines[-1], file=sys.stderr, flush=True)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
