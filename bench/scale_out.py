"""Per-pod routing at scale on one machine: streams per worker, a worker joining, a worker leaving.

    python -m bench.scale_out [--clients 16] [--seconds 8]

Starts 3 acoustic and 3 vocoder worker processes per zone in two zones, each on its own loopback
address (127.0.0.x) and all of a kind and zone on one port behind one name, and two gateways (one per
zone: the real WorkerPool and synthesis API, in this process) that find the workers by re-resolving
the names every 2 s (the production default; tests/faults/pod_fleet.py). The workers are the real
servicers around small engines (tests/faults/toy_mesh.py): this measures routing, not the models.

Then, with `--clients` utterances always in flight:
1. each worker's in-flight streams (its own gauge), averaged over `--seconds`;
2. a fourth acoustic worker is started in zone-a and put behind its name: the time until it has
   taken its first stream;
3. a zone-b acoustic worker leaves its name and gets SIGTERM (as Kubernetes does on a scale-down):
   its streams in flight then, and whether any client saw an error.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time

from libs.routing.endpoints import Endpoint
from tests.faults.pod_fleet import Fleet, Load, gateway_pool, sample_inflight, synthesizer
from tests.faults.toy_mesh import wait_until

ZONES = ("zone-a", "zone-b")
PER_ZONE = 3
RESOLVE_EVERY_S = 2.0


def _spread_line(label: str, inflight: dict[str, float]) -> str:
    mean = sum(inflight.values()) / len(inflight)
    worst = max(abs(value - mean) / mean for value in inflight.values()) if mean else float("nan")
    values = ", ".join(f"{address.split(':')[0]} {value:.2f}" for address, value in sorted(inflight.items()))
    return f"| {label} | {values} | {mean:.2f} | ±{100 * worst:.0f} % |"


async def run(clients: int, seconds: float) -> int:
    fleet = Fleet(acoustic_chunk_delay_s=0.25, grace_s=60.0)
    pools = []
    try:
        for index, zone in enumerate(ZONES):
            fleet.start("acoustic", zone, index, PER_ZONE)
            fleet.start("vocoder", zone, index, PER_ZONE)
        pools = [gateway_pool(fleet, ZONES, zone, interval_s=RESOLVE_EVERY_S) for zone in ZONES]
        for pool in pools:
            pool.start()
        await wait_until(lambda: all(pool.ready for pool in pools), timeout_s=30)
        load = Load([synthesizer(pool) for pool in pools], clients)
        load.start()
        await asyncio.sleep(3.0)
        print(f"{clients} concurrent utterances, two gateways (one per zone), workers re-resolved every {RESOLVE_EVERY_S:g} s\n")
        print("| workers | in-flight streams per worker (time average) | mean | worst deviation |")
        print("|---|---|---|---|")
        for kind in ("acoustic", "vocoder"):
            for zone in ZONES:
                print(_spread_line(f"{kind} {zone}", await sample_inflight(fleet.of(kind, zone), seconds)))

        # A worker joins zone-a.
        joining = fleet.start("acoustic", "zone-a", 0, 1, publish=False)[0]
        fleet.resolver.publish(joining)
        joined_at = time.monotonic()
        await wait_until(lambda: joining.streams_total() > 0, timeout_s=60, poll_s=0.02)
        first_stream_s = time.monotonic() - joined_at
        await asyncio.sleep(3.0)
        print(_spread_line("acoustic zone-a, after the join", await sample_inflight(fleet.of("acoustic", "zone-a"), seconds)))

        # A worker leaves zone-b.
        leaving = fleet.of("acoustic", "zone-b")[0]
        in_flight_then = leaving.inflight()
        errors_before = len(load.errors)
        fleet.resolver.withdraw(leaving)
        fleet.terminate(leaving)
        left_at = time.monotonic()
        gone = Endpoint("zone-b", leaving.address, "acoustic")
        await wait_until(lambda: all(not pool.table("acoustic").tracks(gone) for pool in pools), timeout_s=90, poll_s=0.1)
        drained_s = time.monotonic() - left_at
        exit_code = leaving.process.wait(timeout=90)
        await asyncio.sleep(2.0)
        await load.stop()
        print()
        print(f"added worker: first stream {first_stream_s:.2f} s after it joined its name (resolved every {RESOLVE_EVERY_S:g} s)")
        print(
            f"removed worker: {in_flight_then:.0f} streams in flight at SIGTERM, drained and forgotten by both gateways in "
            f"{drained_s:.2f} s, exit code {exit_code}, client errors during the removal: {len(load.errors) - errors_before}"
        )
        print(f"utterances completed: {load.completed}, client errors in the whole run: {len(load.errors)}")
        return 0 if not load.errors else 1
    finally:
        for pool in pools:
            await pool.close()
        fleet.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=16, help="utterances kept in flight")
    parser.add_argument("--seconds", type=float, default=8.0, help="length of each in-flight sample")
    args = parser.parse_args(argv)
    return asyncio.run(run(args.clients, args.seconds))


if __name__ == "__main__":
    sys.exit(main())
