"""The soak: the mesh in containers under steady load for a long time, through worker kills and a Redis
restart, checked for client errors, audio that differs from its reference, and memory or file
descriptor growth.

    python -m bench.soak [--minutes 30] [--load 0.7] [--kill-every-min 5] [--redis-restart-at-min 15] [--out bench/soak.md]

1. The mesh in containers (scripts/containers/mesh.py): Redis, one acoustic and one vocoder container
   and one gateway in each of two zones, the edge in front of both gateways, as the k8s base runs
   them; workers unbatched in float32 (as the fault tests), so audio can be compared sample for sample.
2. Capacity: streams through the edge saturate the workers for a minute, and the mesh's capacity in
   real-time streams is the audio seconds they delivered per second. (What the workers report, each
   worker's `tts_<kind>_realtime_capacity` summed, is printed beside it: containers on one machine do
   not see each other's share of its cores, so each reports the machine's capacity as its own.) The
   soak then holds `load` times that many streams open, through the edge, for `minutes`.
3. References: every text of the run (one sentence each) spoken before the soak three ways, each what
   a client can get: synthesised (cache empty), a cache hit with the sentence's cached audio head, a
   cache hit of the mel alone (head not written yet). A completed stream must equal one of them
   sample for sample.
4. Faults: every `kill_every_min` a worker container is killed (SIGKILL; the zones' acoustic and
   vocoder in turn) and started again at once, as a pod's container is restarted; the Redis container
   is killed and started again once, at `redis_restart_at_min` (by default about half way, between
   two worker kills). Every client dials from this machine: to the gateways it is one client, which
   may use the whole mesh alone.
5. Every 30 s the resident memory and open file descriptors of each service (its process and the
   processes under it, read from /proc on this machine) are recorded. A service's growth is measured
   from 5 minutes into each of its lives (a restarted worker starts a new one) to the end of that life.

Passes when: no client error other than RESOURCE_EXHAUSTED (pushback), every completed stream equal
to a reference, every service's RSS growth under 10 %, and no file descriptor growth (at most 5
above the 5-minute count, the connections a restarted peer reopens). Prints the table and writes it
to `--out`; exits 1 on a miss.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import grpc
import numpy as np

from bench.measure import percentile
from scripts.containers.mesh import ContainerMesh, open_fds, rss_bytes
from tests.support.faults.zone_mesh import EXACT_WORKER_ENV, metric_sum, speak

TEXTS: Final = (
    "The morning train to the coast was late again, so the passengers read their newspapers on the platform.",
    "A small boat drifted past the harbour wall while the fishermen mended their nets in the sun.",
    "She wrote every measurement in a green notebook and checked each number twice before the meeting.",
    "The old clock in the hall struck nine, and the whole house was quiet except for the rain.",
    "Nobody expected the committee to finish its report before the end of the summer holidays.",
    "The children built a tall tower of wooden blocks and laughed when it finally fell over.",
    "Fresh bread from the village bakery sells out within an hour on most Saturday mornings.",
    "Heavy clouds gathered over the hills, and the farmers hurried to bring the hay inside.",
    "The museum opened a new room for maps of the river as it was drawn three hundred years ago.",
    "Every evening the lighthouse keeper climbed the narrow stairs to light the great lamp.",
    "The engineers tested the bridge with trucks full of sand before it opened to the public.",
    "A quiet library is the best place to read a long novel on a cold and windy afternoon.",
)
SAMPLE_EVERY_S: Final = 30.0
WARM_S: Final = 300.0
"""Growth is measured from this far into each life of a service."""
RSS_GROWTH_LIMIT: Final = 0.10
FD_GROWTH_LIMIT: Final = 5
PUSHBACK: Final = "RESOURCE_EXHAUSTED"
CALIBRATION_S: Final = 60.0


@dataclass
class Life:
    """One process lifetime of a service: its samples (seconds into the soak, RSS bytes, fds)."""

    service: str
    pid: int
    samples: list[tuple[float, int, int]] = field(default_factory=list)

    def growth(self) -> tuple[float, int] | None:
        """(RSS growth ratio, fd growth) from WARM_S into the life to its end; None for a life shorter than that."""
        if not self.samples:
            return None
        start = self.samples[0][0]
        warm = [sample for sample in self.samples if sample[0] - start >= WARM_S]
        if len(warm) < 2:
            return None
        (_, rss0, fds0), (_, rss1, fds1) = warm[0], warm[-1]
        return (rss1 - rss0) / rss0, fds1 - fds0


@dataclass
class Tally:
    """What the clients saw."""

    completed: int = 0
    equal: int = 0
    differing: list[str] = field(default_factory=list)
    pushback: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    first_audio_s: list[float] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


def references(mesh: ContainerMesh, address: str, texts: Sequence[str]) -> dict[str, list[np.ndarray]]:
    """Each text's audio as a client can get it: synthesised, a hit with its audio head, a hit of the mel alone."""
    import redis

    found: dict[str, list[np.ndarray]] = {}
    client = redis.Redis.from_url(mesh.redis_url, socket_timeout=5)
    try:
        for text in texts:
            client.flushall()
            fresh = speak(address, text).samples
            time.sleep(0.5)  # the mel and the head are written as the stream ends
            with_head = speak(address, text).samples
            client.delete(*client.keys("tts:head:*") or ["-"])
            mel_only = speak(address, text).samples
            found[text] = [fresh, with_head, mel_only]
        client.flushall()
    finally:
        client.close()
    return found


def capacity_streams(mesh: ContainerMesh, address: str, texts: Sequence[str], seconds: float) -> tuple[float, float]:
    """Saturate the mesh for `seconds`: the real-time streams it carried (audio seconds delivered to the
    clients per second), and the streams its workers say they can carry (the smaller of the acoustic
    and vocoder sums of `tts_<kind>_realtime_capacity`), for the record."""
    stop = threading.Event()
    delivered_s = [0.0]
    lock = threading.Lock()

    def client(offset: int) -> None:
        index = offset
        while not stop.is_set():
            with contextlib.suppress(grpc.RpcError):  # a refusal is what saturation looks like
                # One sentence the cache has never seen: the mesh makes all of its audio.
                unique = f"{texts[index % len(texts)].rstrip('.')}, calibration {index}."
                spoken = speak(address, unique, timeout_s=120)
                if spoken.sample_rate_hz and not stop.is_set():  # a call ending after the window had time it was not given
                    with lock:
                        delivered_s[0] += len(spoken.samples) / spoken.sample_rate_hz
            index += 1

    threads = [threading.Thread(target=client, args=(offset,)) for offset in range(2 * len(mesh.workers))]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    time.sleep(seconds)
    stop.set()
    elapsed_s = time.monotonic() - started
    for thread in threads:
        thread.join()
    sums = dict.fromkeys(("acoustic", "vocoder"), 0.0)
    for name in mesh.workers:
        kind, _, zone = name.partition("@")
        sums[kind] += metric_sum(mesh.worker_metrics(kind, zone), f"tts_{kind}_realtime_capacity")
    return delivered_s[0] / elapsed_s, min(sums.values())


def run_clients(address: str, refs: dict[str, list[np.ndarray]], streams: int, until: float, tally: Tally) -> list[threading.Thread]:
    texts = list(refs)

    def client(offset: int) -> None:
        index = offset
        while time.monotonic() < until:
            text = texts[index % len(texts)]
            index += streams
            try:
                spoken = speak(address, text, timeout_s=120)
            except grpc.RpcError as error:
                code = error.code().name  # type: ignore[attr-defined]
                with tally.lock:
                    if code == PUSHBACK:
                        tally.pushback += 1
                    else:
                        tally.errors[f"{code}: {error.details()}"] += 1  # type: ignore[attr-defined]
                time.sleep(0.2)
                continue
            same = any(spoken.samples.shape == ref.shape and np.array_equal(spoken.samples, ref) for ref in refs[text])
            with tally.lock:
                tally.completed += 1
                tally.first_audio_s.append(spoken.first_audio_s)
                if same:
                    tally.equal += 1
                else:
                    tally.differing.append(text[:40])

    threads = [threading.Thread(target=client, args=(offset,), daemon=True) for offset in range(streams)]
    for thread in threads:
        thread.start()
    return threads


class Sampler:
    """RSS and open fds of every service every SAMPLE_EVERY_S, by process lifetime."""

    def __init__(self, mesh: ContainerMesh, started: float) -> None:
        self.mesh = mesh
        self.started = started
        self.lives: list[Life] = []
        self._current: dict[str, Life] = {}
        self._lock = threading.Lock()

    def sample(self) -> None:
        with self._lock:
            for service in self.mesh.services():
                try:
                    pid = self.mesh.engine.pid(service.container)
                except Exception:
                    continue
                if pid <= 0:
                    continue
                life = self._current.get(service.name)
                if life is None or life.pid != pid:
                    life = self._current[service.name] = Life(service.name, pid)
                    self.lives.append(life)
                life.samples.append((time.monotonic() - self.started, rss_bytes(pid), open_fds(pid)))


def faults(mesh: ContainerMesh, started: float, minutes: float, kill_every_s: float, redis_at_s: float, log: Callable[[str], None]) -> None:
    """Kill a worker every `kill_every_s` (and start it again), and Redis once at `redis_at_s`."""
    order = [(kind, zone) for zone in mesh.zones for kind in ("acoustic", "vocoder")]
    order = order[::2] + order[1::2]  # alternate zones and kinds
    events = [(kill_every_s * (n + 1), "worker", order[n % len(order)]) for n in range(int(minutes * 60 // kill_every_s))]
    events.append((redis_at_s, "redis", ("", "")))
    for at_s, what, (kind, zone) in sorted(events):
        if at_s >= minutes * 60:
            continue
        time.sleep(max(0.0, started + at_s - time.monotonic()))
        if what == "redis":
            mesh.kill_redis()
            mesh.restart_redis()
            log(f"{at_s / 60:5.1f} min  Redis container killed and started again")
        else:
            mesh.kill_worker(kind, zone)
            mesh.restart_worker(kind, zone, wait=False)
            log(f"{at_s / 60:5.1f} min  {kind}@{zone} container killed and started again")


def half_way_between_kills(minutes: float, kill_every_min: float) -> float:
    """The minute to restart Redis at: about half way, between two worker kills, so the two faults
    are each their own."""
    return kill_every_min * math.floor(minutes / 2 / kill_every_min) + kill_every_min / 2


def report(minutes: float, load: float, capacity: float, streams: int, tally: Tally, lives: list[Life], events: list[str]) -> tuple[str, bool]:
    lines = [f"Soak: {minutes:g} min at {load:g} of capacity ({capacity:.2f} real-time streams measured -> {streams} streams), "
             "through the edge container, workers killed in turn, Redis restarted once.", ""]  # fmt: skip
    first_audio = percentile(tally.first_audio_s, 95) if tally.first_audio_s else math.nan
    lines += [
        "| streams completed | equal to a reference | pushback refusals | other client errors | p95 first audio s |",
        "|---|---|---|---|---|",
        f"| {tally.completed} | {tally.equal} | {tally.pushback} | {sum(tally.errors.values())} | {first_audio:.3f} |",
        "",
        "| service (life) | from | RSS at 5 min MiB | RSS at end MiB | RSS growth | fds at 5 min | fds at end |",
        "|---|---|---|---|---|---|---|",
    ]
    passed = tally.completed > 0 and tally.equal == tally.completed and not tally.errors
    for life in lives:
        growth = life.growth()
        start_min = life.samples[0][0] / 60 if life.samples else 0.0
        if growth is None:
            lines.append(f"| {life.service} | {start_min:.1f} min | - | - | (shorter than 5 min) | - | - |")
            continue
        warm = [sample for sample in life.samples if sample[0] - life.samples[0][0] >= WARM_S]
        rss_growth, fd_growth = growth
        passed &= rss_growth < RSS_GROWTH_LIMIT and fd_growth <= FD_GROWTH_LIMIT
        lines.append(f"| {life.service} | {start_min:.1f} min | {warm[0][1] / 2**20:.0f} | {warm[-1][1] / 2**20:.0f} | "
                     f"{100 * rss_growth:+.1f} % | {warm[0][2]} | {warm[-1][2]} |")  # fmt: skip
    lines += ["", *[f"- {event}" for event in events]]
    lines += [f"- client error: {count} x {error}" for error, count in tally.errors.most_common()]
    lines += [f"- differing audio: {text}" for text in tally.differing[:10]]
    lines.append(f"\nResult: {'PASS' if passed else 'MISS'}")
    return "\n".join(lines), passed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--load", type=float, default=0.7, help="share of the measured capacity to hold open")
    parser.add_argument("--kill-every-min", type=float, default=5.0)
    parser.add_argument("--redis-restart-at-min", type=float, default=None, help="default: about half way, between two worker kills")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--log-dir", type=Path, default=None)
    args = parser.parse_args(argv)
    log_dir = args.log_dir or Path(tempfile.mkdtemp(prefix="tts-soak-"))
    events: list[str] = []

    def log(line: str) -> None:
        events.append(line)
        print(f"[soak] {line}", flush=True)

    # Every client of the soak dials from this machine, so the gateways see one client: alone, it may
    # use the whole mesh (shares between clients bite only when several compete).
    mesh = ContainerMesh(zones=("zone-a", "zone-b"), worker_env={"*": dict(EXACT_WORKER_ENV)}, log_dir=log_dir)
    mesh.start()
    try:
        # A gateway in each zone behind the edge, as prod spreads them: each prefers its own zone's workers.
        mesh.start_gateway("gateway-b", zone="zone-b", behind_edge=True)
        time.sleep(10)  # the edge re-resolves `gateway` (STRICT_DNS, every 5 s) and finds both
        assert mesh.edge_service is not None
        address = mesh.edge_service.address
        print(f"[soak] mesh in containers up ({mesh.engine.name}, network {mesh.network}); measuring capacity", flush=True)
        capacity, reported = capacity_streams(mesh, address, TEXTS, CALIBRATION_S)
        streams = max(1, round(args.load * capacity))
        log(f"capacity {capacity:.2f} real-time streams carried (the workers report {reported:.2f}); holding {streams} streams open")
        refs = references(mesh, address, TEXTS)
        tally = Tally()
        started = time.monotonic()
        sampler = Sampler(mesh, started)
        until = started + args.minutes * 60
        clients = run_clients(address, refs, streams, until, tally)
        redis_at_s = 60 * (args.redis_restart_at_min if args.redis_restart_at_min is not None else half_way_between_kills(args.minutes, args.kill_every_min))
        fault_thread = threading.Thread(
            target=faults, args=(mesh, started, args.minutes, args.kill_every_min * 60, redis_at_s, log), daemon=True
        )
        fault_thread.start()
        while time.monotonic() < until:
            sampler.sample()
            with tally.lock:
                print(f"[soak] {(time.monotonic() - started) / 60:5.1f} min: {tally.completed} completed, {tally.equal} equal, "
                      f"{tally.pushback} pushback, {sum(tally.errors.values())} errors", flush=True)  # fmt: skip
            time.sleep(min(SAMPLE_EVERY_S, max(0.0, until - time.monotonic())))
        sampler.sample()
        for thread in clients:
            thread.join(timeout=180)
        fault_thread.join(timeout=60)
        text, passed = report(args.minutes, args.load, capacity, streams, tally, sampler.lives, events)
    finally:
        mesh.stop()
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n", encoding="utf-8")
    print(f"service logs: {log_dir}")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
