"""A burst past the quality tier's capacity, asked for in `auto`: does the mesh degrade before it refuses?

A mesh with `make run`'s defaults reports its real-time capacity (quality listeners); a burst of
`--over` times that many cold paragraphs starts at once, first asking for the quality tier, then
(fresh paragraphs) for `auto`. For each: streams refused, streams admitted in each tier (the
gateway's `tts_gateway_streams_by_tier_total`), playing streams moved to the fast tier at a sentence
boundary (`tts_gateway_moved_to_fast_total`), streams whose player stalled over 100 ms, and first
audio p95. The fast tier's capacity is the quality tier's over what a fast listener costs
(`WorkerPool.fast_tier_cost`, from the workers' own measurements).

    python -m bench.tier_burst [--cores 1] [--over 1.5]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from bench.load_table import paragraphs
from bench.measure import percentile
from bench.mesh import BenchMesh
from bench.realtime import burst, reported_capacity
from bench.report import machine_header
from bench.speed import pin_cores
from libs.pb.tts.v1 import tts_pb2

STALL_BAR_S = 0.1
TIER_METRIC = "tts_gateway_streams_by_tier_total"
MOVED_METRIC = "tts_gateway_moved_to_fast_total"


def tier_counts(mesh: BenchMesh) -> dict[str, float]:
    """Streams admitted so far by (asked, tier) label pair."""
    return {key: value for key, value in mesh.metrics("gateway").items() if key.startswith(TIER_METRIC + "{") or key == MOVED_METRIC}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cores", type=int, default=1, help="cores the run is pinned to")
    parser.add_argument("--over", type=float, default=1.5, help="the burst, as a multiple of the reported capacity")
    args = parser.parse_args(argv)
    cores = pin_cores(args.cores)
    mesh = BenchMesh(log_dir=Path(tempfile.mkdtemp(prefix="tts-bench-tiers-"))).start()
    rows = []
    try:
        burst(mesh.gateway_address, paragraphs(2, 8_000_000))  # warm: first calls of every kind
        capacity = reported_capacity(mesh)
        fast_cost = mesh.metrics("gateway").get("tts_gateway_fast_tier_cost", 1.0)
        streams = max(2, round(args.over * capacity))
        for offset, (name, tier) in enumerate((("quality", tts_pb2.TIER_QUALITY), ("auto", tts_pb2.TIER_AUTO))):
            before = tier_counts(mesh)
            results = burst(mesh.gateway_address, paragraphs(streams, 8_100_000 + 10_000 * offset), tier=tier)
            after = tier_counts(mesh)
            moved = after.pop(MOVED_METRIC, 0.0) - before.pop(MOVED_METRIC, 0.0)
            admitted = {key: after[key] - before.get(key, 0.0) for key in after if after[key] > before.get(key, 0.0)}
            heard = [result for result in results if result.ok]
            firsts = [result.ttfa_s for result in heard if result.ttfa_s is not None]
            rows.append((
                name, streams, sum(1 for result in results if result.status == "RESOURCE_EXHAUSTED"),
                ", ".join(f"{key[len(TIER_METRIC):]}: {value:.0f}" for key, value in sorted(admitted.items())), moved,
                sum(1 for result in heard if result.longest_stall_s > STALL_BAR_S), len(heard),
                percentile(firsts, 95) if firsts else float("nan"),
            ))  # fmt: skip
    finally:
        mesh.stop()
    print(machine_header(cores))
    print(
        f"reported capacity {capacity:.1f} quality listeners, {capacity / fast_cost:.1f} fast ones (a fast listener costs "
        f"{fast_cost:.2f} of a quality one); burst of {streams} ({args.over:g}x)"
    )
    print()
    print("| asked | streams | refused | admitted by tier | moved to fast while playing | stalled > 100 ms | first audio p95 |")
    print("|---|---:|---:|---|---:|---:|---:|")
    for name, count, refused, admitted_text, moved, stalled, heard_count, p95 in rows:
        print(f"| {name} | {count} | {refused} | {admitted_text} | {moved:.0f} | {stalled} of {heard_count} | {1000 * p95:.0f} ms |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
