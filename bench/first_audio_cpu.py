"""Where a lone listener's first audio goes on a small machine: the CPU of every service, thread by
thread, from the request to the first audio.

One mesh with `make run`'s defaults runs inside a CFS CPU quota (`bench.cpu_quota`), pinned to one
core. Cold streams (unique paragraphs, so every sentence misses the cache) are sent one after another
with a pause between them. A sampler reads every thread's CPU (`/proc/<pid>/task/<tid>/schedstat`, in
nanoseconds) every few milliseconds, so each stream's first audio can be split into who spent what
before it: each service, and within a worker each of its inference lanes (the executor names their
threads urgent_N, first_N and background_N for the OS too).
Under a quota every thread of the mesh draws on the same budget, so CPU spent before the first audio on
work the first audio does not need is the listener's wait.

    python -m bench.first_audio_cpu [--quota 0.25] [--streams 6] [--after-burst 2]

With `--after-burst N` a burst of N streams plays to its end before the lone ones, as on a service
that has been busy: what the gateway learned from the burst's starts is then in what it knows.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from bench.cpu_quota import CpuQuota
from bench.mesh import BenchMesh
from bench.realtime import PROXY, Texts, burst
from bench.report import machine_header
from bench.speed import pin_cores
from libs.scheduling.costs import BACKGROUND_LANE, FIRST_AUDIO_LANE, URGENT_LANE

SAMPLE_EVERY_S = 0.003
PAUSE_S = 1.5
"""Between streams: the last one's tail is done and the workers are idle."""
SERVICES = ("gateway", "acoustic", "vocoder")

ThreadCpu = dict[str, dict[int, tuple[str, int]]]
"""service -> thread id -> (thread name, CPU nanoseconds so far)."""


def thread_cpu(pid: int) -> dict[int, tuple[str, int]]:
    """Every thread of process `pid`: its name and its CPU so far (ns)."""
    threads = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            name = (task / "comm").read_text().strip()
            threads[int(task.name)] = (name, int((task / "schedstat").read_text().split()[0]))
        except (OSError, ValueError):
            continue  # the thread ended between the listing and the read
    return threads


class Sampler(threading.Thread):
    """Every thread's CPU of the given processes, sampled every SAMPLE_EVERY_S, with its time."""

    def __init__(self, pids: dict[str, int]) -> None:
        super().__init__(daemon=True)
        self.pids = pids
        self.samples: list[tuple[float, ThreadCpu]] = []
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.is_set():
            self.samples.append((time.perf_counter(), {name: thread_cpu(pid) for name, pid in self.pids.items()}))
            time.sleep(SAMPLE_EVERY_S)

    def at(self, when_s: float) -> ThreadCpu:
        """The sample nearest `when_s` (`time.perf_counter()`)."""
        return min(self.samples, key=lambda sample: abs(sample[0] - when_s))[1]


def spent_ms(before: ThreadCpu, after: ThreadCpu, lane_names: dict[int, str]) -> dict[str, float]:
    """CPU between two samples (ms) by service, and by '<service> <lane>' for the threads `lane_names` names."""
    spent: dict[str, float] = {}
    for service, threads in after.items():
        for tid, (_, cpu_ns) in threads.items():
            delta_ms = (cpu_ns - before.get(service, {}).get(tid, ("", 0))[1]) / 1e6  # a thread started since: all of it
            spent[service] = spent.get(service, 0.0) + delta_ms
            if tid in lane_names:
                key = f"{service} {lane_names[tid]}"
                spent[key] = spent.get(key, 0.0) + delta_ms
    return spent


def inference_lanes(pids: dict[str, int]) -> dict[int, str]:
    """Thread id -> lane of the workers' inference threads, by the names the executor gives them
    (libs.scheduling.executor: urgent_N, first_N, background_N)."""
    lanes = {}
    for service in ("acoustic", "vocoder"):
        for tid, (name, _) in thread_cpu(pids[service]).items():
            lane = name.rsplit("_", 1)[0]
            if lane in (URGENT_LANE, FIRST_AUDIO_LANE, BACKGROUND_LANE):
                lanes[tid] = f"lane {lane}"
    return lanes


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.first_audio_cpu", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quota", type=float, default=0.25, help="the mesh's CPU quota, in cores (of the one pinned)")
    parser.add_argument("--streams", type=int, default=6, help="lone cold streams, one after another")
    parser.add_argument("--after-burst", type=int, default=0, metavar="N", help="a burst of N streams before the lone ones")
    args = parser.parse_args(argv)
    cores = pin_cores(1)
    print(machine_header(cores))
    texts = Texts()
    rows: list[tuple[float, dict[str, float]]] = []
    with CpuQuota(None, name=f"tts-bench-clients-{os.getpid()}") as clients, CpuQuota(args.quota) as quota:
        clients.add(os.getpid())
        mesh = BenchMesh(log_dir=Path(tempfile.mkdtemp(prefix="tts-bench-first-cpu-")), preexec=quota.preexec,
                         gateway_args=["--trusted-proxies", PROXY]).start()  # fmt: skip
        try:
            if mesh.redis is not None and mesh.redis.pid is not None:
                quota.add(mesh.redis.pid)
            burst(mesh.gateway_address, texts.take(1))  # warm: first calls of every kind
            if args.after_burst:
                burst(mesh.gateway_address, texts.take(args.after_burst))
            pids = {name: pid for name, pid in mesh.pids().items() if name in SERVICES}
            lanes = inference_lanes(pids)
            sampler = Sampler(pids)
            sampler.start()
            for _ in range(args.streams):
                time.sleep(PAUSE_S)
                sent_s = time.perf_counter()
                result = burst(mesh.gateway_address, texts.take(1))[0]
                if result.ttfa_s is None:
                    print(f"a stream failed: {result.status} {result.error}")
                    continue
                first_audio_s = sent_s + result.started_s + result.ttfa_s
                rows.append((result.ttfa_s, spent_ms(sampler.at(sent_s), sampler.at(first_audio_s), lanes)))
            sampler.stopped.set()
        finally:
            mesh.stop()
    if not rows:
        return 1
    keys = sorted({key for _, spent in rows for key in spent}, key=lambda key: (key.split(" ")[0], " " in key, key))
    after = f" after a burst of {args.after_burst}" if args.after_burst else ""
    print(f"\nCPU quota {args.quota:g} of a core: {len(rows)} lone cold streams{after}, first audio "
          f"{', '.join(f'{ttfa * 1000:.0f}' for ttfa, _ in rows)} ms (median {statistics.median(t for t, _ in rows) * 1000:.0f})\n")
    print("| CPU before the first audio | median ms | of all |\n|---|---:|---:|")
    total = statistics.median(sum(spent[service] for service in SERVICES if service in spent) for _, spent in rows)
    for key in keys:
        value = statistics.median(spent.get(key, 0.0) for _, spent in rows)
        print(f"| {key} | {value:.0f} | {value / total:.0%} |")
    print(f"| all three | {total:.0f} | 100% |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
