"""Per-pod routing at scale on one machine: streams per worker, a worker joining, a worker leaving.

    python -m bench.scale_out [--clients 16] [--seconds 8] [--toy]

Starts 3 acoustic and 3 vocoder worker processes per zone in two zones, each on its own loopback
address (127.0.0.x) and all of a kind and zone on one port behind one name, and two gateways (one per
zone: the real WorkerPool and synthesis API, in this process, without a cache) that find the workers
by re-resolving the names every 2 s (the production default; tests/support/faults/pod_fleet.py). The workers
are the services themselves (`python -m services.acoustic` / `services.vocoder` with the installed
default voice, plaintext, one model thread each, real-time admission off), all started at once;
`--toy` runs the real servicers around small engines instead (tests/support/faults/toy_mesh.py), ready in a
second.

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
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from libs.routing.endpoints import Endpoint
from libs.voice.registry import default_registry
from tests.support.faults.pod_fleet import Fleet, Load, Pod, ServiceFleet, gateway_pool, sample_inflight, synthesizer
from tests.support.faults.toy_mesh import wait_until

ZONES = ("zone-a", "zone-b")
PER_ZONE = 3
RESOLVE_EVERY_S = 2.0
GRACE_S = 60.0
"""How long a SIGTERMed worker's streams in flight get to finish."""
SERVICE_WORKER_ARGS = ("--realtime-headroom", "0")
"""The real-time limit off: 16 listeners ask for more audio per second than 12 model processes on two
shared cores make, so with it on the workers refuse streams, rightly, and the run would measure
shedding instead of where streams go."""


def _spread_line(label: str, inflight: dict[str, float]) -> str:
    mean = sum(inflight.values()) / len(inflight)
    worst = max(abs(value - mean) / mean for value in inflight.values()) if mean else float("nan")
    values = ", ".join(f"{address.split(':')[0]} {value:.2f}" for address, value in sorted(inflight.items()))
    return f"| {label} | {values} | {mean:.2f} | ±{100 * worst:.0f} % |"


def _resident_gib(pods: Sequence[Pod]) -> float:
    """The pods' resident memory together (their own process metrics; a toy worker exports none)."""
    return sum(pod.metrics().get("process_resident_memory_bytes", 0.0) for pod in pods) / 2**30


async def run(clients: int, seconds: float, toy: bool, log_dir: Path) -> int:
    if toy:
        fleet = Fleet(acoustic_chunk_delay_s=0.25, grace_s=GRACE_S)
    else:
        fleet = ServiceFleet(log_dir, grace_s=GRACE_S, worker_args=SERVICE_WORKER_ARGS)
    pools = []
    try:
        started_at = time.monotonic()
        fleet.start_groups([(kind, zone, index, PER_ZONE) for index, zone in enumerate(ZONES) for kind in ("acoustic", "vocoder")])
        workers = "toy workers (real servicers, small engines)" if toy else "worker services (installed default voice, 1 model thread each)"
        print(f"{len(fleet.pods)} {workers} SERVING {time.monotonic() - started_at:.1f} s after they were started")
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
        measured_pods, resident_gib = len(fleet.pods), await asyncio.to_thread(_resident_gib, fleet.pods)

        # A worker joins zone-a (it starts in a thread: the gateways and clients of this loop keep running).
        joining = (await asyncio.to_thread(fleet.start, "acoustic", "zone-a", 0, 1, publish=False))[0]
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
        exit_code = await asyncio.to_thread(leaving.process.wait, 90)
        await asyncio.sleep(2.0)
        await load.stop()
        print()
        print(f"added worker: first stream {first_stream_s:.2f} s after it joined its name (resolved every {RESOLVE_EVERY_S:g} s)")
        print(
            f"removed worker: {in_flight_then:.0f} streams in flight at SIGTERM, drained and forgotten by both gateways in "
            f"{drained_s:.2f} s, exit code {exit_code}, client errors during the removal: {len(load.errors) - errors_before}"
        )
        audio_s = sum(load.samples) / len(load.samples) / default_registry().default.sample_rate_hz if load.samples else 0.0
        print(f"utterances completed: {load.completed} ({audio_s:.1f} s of audio each), client errors in the whole run: {len(load.errors)}")
        if resident_gib:
            print(f"the {measured_pods} workers' resident memory under load: {resident_gib:.1f} GiB in all")
        return 0 if not load.errors else 1
    finally:
        for pool in pools:
            await pool.close()
        fleet.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=16, help="utterances kept in flight")
    parser.add_argument("--seconds", type=float, default=8.0, help="length of each in-flight sample")
    parser.add_argument("--toy", action="store_true", help="toy workers (small engines): a quick check of the routing alone")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="scale-out-") as log_dir:
        return asyncio.run(run(args.clients, args.seconds, args.toy, Path(log_dir)))


if __name__ == "__main__":
    sys.exit(main())
