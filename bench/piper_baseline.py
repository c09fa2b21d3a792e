"""The peer: piper-tts 1.8.0 with the same voice, measured the way the load generator measures the mesh.

piper-tts synthesises one sentence at a time and yields each as one chunk, so its time to first audio
is the time to its first sentence's chunk. It is compared at equal total CPU:

- one stream: in this process, one onnxruntime session with `cores` intra-op threads;
- N concurrent streams: the best of the ways to spend the same cores: `cores` worker processes with
  one thread each (processes, because onnxruntime releases the GIL but the phonemiser and the Python
  around it do not), or one process with `cores` threads serving requests one after another.

Requests queue in front of the workers exactly as they would in front of a piper server, and their
latency is measured from submission, so queueing counts as it does for the mesh.

Each worker process runs `bench/piper_worker.py` as a script of its own and imports nothing of the
benchmark, torch or the mesh, so its peak RSS and start-up are piper-tts's alone.

    python -m bench.piper_baseline --concurrency 4 --requests 8 --texts paragraph
"""

from __future__ import annotations

import argparse
import json
import queue
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from bench.measure import OK, LoadSummary, RequestResult, format_summary, peak_rss_bytes, playback_stalls, summarize
from bench.piper_worker import WARM_UP_TEXT, load_voice, speak_timed
from bench.texts import TEXTS

DEFAULT_CORES: Final = 2
WORKER_SCRIPT: Final = Path(__file__).resolve().with_name("piper_worker.py")
WORKER_START_TIMEOUT_S: Final = 120.0
REQUEST_TIMEOUT_S: Final = 300.0
SHUTDOWN_TIMEOUT_S: Final = 10.0


@dataclass(frozen=True)
class PiperSetup:
    """How piper-tts spends its cores."""

    processes: int
    """Worker processes, each with its own onnxruntime session (count)."""
    threads_per_process: int
    """onnxruntime intra-op threads per session (count)."""

    @property
    def label(self) -> str:
        """Human-readable, e.g. "2 processes x 1 thread"."""
        processes = "process" if self.processes == 1 else "processes"
        threads = "thread" if self.threads_per_process == 1 else "threads"
        return f"{self.processes} {processes} x {self.threads_per_process} {threads}"


@dataclass(frozen=True)
class PiperRun:
    """One piper-tts measurement."""

    setup: PiperSetup
    """How the cores were used."""
    in_process: bool
    """True when piper ran in the benchmark's own process (single stream)."""
    results: list[RequestResult]
    """Every request, in order."""
    summary: LoadSummary
    """The same summary the load generator computes."""
    peak_rss_bytes: int
    """Largest peak RSS of a worker process (bytes); 0 when piper ran in-process (the bench's own memory would count)."""


def _result(
    index: int, text: str, submitted: float, first: float | None, ended: float, samples: int, rate: int, run_start: float,
    chunks: Sequence[Sequence[float]] = (),
) -> RequestResult:
    """The request as the load generator would report it; `chunks` ((time ready, samples) each) give its stalls."""
    stall_s, longest_stall_s = playback_stalls([(ready, count / rate) for ready, count in chunks])
    return RequestResult(
        index=index,
        status=OK,
        ttfa_s=None if first is None else first - submitted,
        total_s=ended - submitted,
        audio_s=samples / rate,
        audio_bytes=2 * samples,  # what 16-bit PCM of the same audio would weigh, as the mesh sends it
        text_chars=len(text),
        started_s=submitted - run_start,
        stall_s=stall_s,
        longest_stall_s=longest_stall_s,
    )


def run_in_process(texts: Sequence[str], requests: int, threads: int = DEFAULT_CORES, voice: Any = None) -> PiperRun:
    """One stream in this process: `requests` requests one after another (request i speaks texts[i % len])."""
    voice = voice or load_voice(threads)
    speak_timed(voice, WARM_UP_TEXT)
    results = []
    run_start = time.monotonic()
    for index in range(requests):
        text = texts[index % len(texts)]
        submitted = time.monotonic()
        first, samples, rate = speak_timed(voice, text)
        results.append(_result(index, text, submitted, first, time.monotonic(), samples, rate, run_start))
    wall_s = time.monotonic() - run_start
    return PiperRun(PiperSetup(1, threads), True, results, summarize(results, wall_s), 0)


class _Worker:
    """One `bench/piper_worker.py` process, and a thread that forwards each line it prints to the pool."""

    def __init__(
        self, threads: int, events: queue.Queue[tuple[_Worker, str | None]], preexec: Callable[[], None] | None = None
    ) -> None:
        # A script of its own, not multiprocessing: spawn would re-import the benchmark's main module
        # (torch, the mesh's packages) in the worker, and fork would copy the benchmark's gRPC and torch
        # threads. -I keeps the script's folder (bench/) and PYTHON* variables out of its import path.
        self.process = subprocess.Popen(
            [sys.executable, "-I", str(WORKER_SCRIPT), "--threads", str(threads)],
            preexec_fn=preexec,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            encoding="utf-8",
        )
        self.pid = self.process.pid
        threading.Thread(target=self._forward, args=(events,), name=f"piper-worker-{self.pid}", daemon=True).start()

    def _forward(self, events: queue.Queue[tuple[_Worker, str | None]]) -> None:
        assert self.process.stdout is not None
        with self.process.stdout:
            for line in self.process.stdout:
                events.put((self, line))
        events.put((self, None))  # end of its output: the worker has exited

    def send(self, request: dict[str, Any]) -> None:
        """Write one request line; RuntimeError when the worker has already exited."""
        assert self.process.stdin is not None
        try:
            self.process.stdin.write(json.dumps(request) + "\n")
            self.process.stdin.flush()
        except (BrokenPipeError, ValueError):
            raise RuntimeError(self.exit_message()) from None

    def exit_message(self) -> str:
        """Why the worker is gone, with its exit code when it has one."""
        try:
            return f"piper-tts worker {self.pid} exited with code {self.process.wait(timeout=5)}"
        except subprocess.TimeoutExpired:
            return f"piper-tts worker {self.pid} closed its output but is still running"

    def stop(self, kill: bool) -> None:
        """End the worker: at once when `kill`, else by ending its input and waiting for it to exit."""
        assert self.process.stdin is not None
        if kill:
            self.process.kill()
        try:
            self.process.stdin.close()  # end of input: an idle worker exits
            self.process.wait(timeout=SHUTDOWN_TIMEOUT_S)
        except (BrokenPipeError, subprocess.TimeoutExpired):
            pass
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


class PiperPool:
    """Worker processes that each hold one piper voice; a context manager. Reusable across runs."""

    def __init__(self, setup: PiperSetup, preexec: Callable[[], None] | None = None) -> None:
        """`preexec` runs in each worker process before it starts (e.g. joining a CPU quota's cgroup)."""
        self.setup = setup
        self._preexec = preexec
        self._events: queue.Queue[tuple[_Worker, str | None]] = queue.Queue()
        self._workers: list[_Worker] = []
        self.peak_rss_bytes = 0
        """Largest peak RSS of a worker (bytes), read as the pool closes."""

    @property
    def worker_pids(self) -> list[int]:
        """The workers' process ids."""
        return [worker.pid for worker in self._workers]

    def __enter__(self) -> PiperPool:
        try:
            self._workers = [_Worker(self.setup.threads_per_process, self._events, self._preexec) for _ in range(self.setup.processes)]
            for _ in self._workers:
                worker, event = self._next_event(WORKER_START_TIMEOUT_S)
                if event["event"] != "ready":
                    raise RuntimeError(f"piper-tts worker {worker.pid} sent {event['event']!r} before it was ready")
        except BaseException:
            self._stop(kill=True)
            raise
        return self

    def _next_event(self, timeout_s: float) -> tuple[_Worker, dict[str, Any]]:
        """The next event of any worker; RuntimeError as soon as a worker has died instead of waiting out `timeout_s`."""
        try:
            worker, line = self._events.get(timeout=timeout_s)
        except queue.Empty:
            raise TimeoutError(f"no answer from the piper-tts workers within {timeout_s} s") from None
        if line is None:
            raise RuntimeError(worker.exit_message())
        try:
            return worker, json.loads(line)
        except json.JSONDecodeError:
            raise RuntimeError(f"piper-tts worker {worker.pid} printed {line!r}, which is not an event") from None

    def _stop(self, kill: bool) -> None:
        for worker in self._workers:
            worker.stop(kill)

    def __exit__(self, exc_type: object, *exc: object) -> None:
        try:
            if exc_type is None:
                # Every worker is idle now, so its high-water mark is final.
                self.peak_rss_bytes = max((peak_rss_bytes(pid) for pid in self.worker_pids), default=0)
        finally:
            # After an error work may still be in flight: do not wait for it.
            self._stop(kill=exc_type is not None)

    def worker_modules(self) -> dict[int, list[str]]:
        """Every module each worker has imported (`sorted(sys.modules)`), by pid; call it between runs."""
        for worker in self._workers:
            worker.send({"op": "modules"})
        modules: dict[int, list[str]] = {}
        while len(modules) < len(self._workers):
            worker, event = self._next_event(REQUEST_TIMEOUT_S)
            if event["event"] != "modules":
                raise RuntimeError(f"unexpected piper-tts worker event {event['event']!r}")
            modules[worker.pid] = event["names"]
        return modules

    def run(self, texts: Sequence[str], requests: int, concurrency: int) -> PiperRun:
        """`concurrency` clients, each sending its next request when the last one ends, `requests` in all."""
        submitted: dict[int, float] = {}
        waiting: deque[int] = deque()  # sent by a client, not yet taken by a worker: the queue in front of a server
        idle = list(self._workers)
        results: list[RequestResult] = []
        next_index = 0
        run_start = time.monotonic()

        def submit() -> None:
            nonlocal next_index
            submitted[next_index] = time.monotonic()
            waiting.append(next_index)
            next_index += 1

        def dispatch() -> None:
            while waiting and idle:
                index = waiting.popleft()
                idle.pop().send({"op": "speak", "index": index, "text": texts[index % len(texts)]})

        for _ in range(min(concurrency, requests)):
            submit()
        dispatch()
        while len(results) < requests:
            worker, event = self._next_event(REQUEST_TIMEOUT_S)
            if event["event"] != "done":
                raise RuntimeError(f"unexpected piper-tts worker event {event['event']!r}")
            idle.append(worker)
            index = event["index"]
            first, ended = event["first_audio_at_s"], event["ended_at_s"]
            samples, rate = event["samples"], event["sample_rate_hz"]
            text = texts[index % len(texts)]
            results.append(_result(index, text, submitted[index], first, ended, samples, rate, run_start, event.get("chunks", ())))
            if next_index < requests:
                submit()
            dispatch()
        results.sort(key=lambda result: result.index)
        return PiperRun(self.setup, False, results, summarize(results, _wall_s(results)), 0)


    def run_arrivals(self, texts: Sequence[str], arrivals_s: Sequence[float]) -> PiperRun:
        """Request i (speaking texts[i % len]) sent `arrivals_s[i]` seconds after the start, whatever
        the pool is doing (open loop): a request finding every worker busy waits in the queue."""
        submitted: dict[int, float] = {}
        waiting: deque[int] = deque()
        idle = list(self._workers)
        results: list[RequestResult] = []
        run_start = time.monotonic()
        pending = list(enumerate(arrivals_s))
        while len(results) < len(arrivals_s):
            now = time.monotonic() - run_start
            while pending and pending[0][1] <= now:
                index, _ = pending.pop(0)
                submitted[index] = time.monotonic()
                waiting.append(index)
            while waiting and idle:
                index = waiting.popleft()
                idle.pop().send({"op": "speak", "index": index, "text": texts[index % len(texts)]})
            wait_s = max(0.001, pending[0][1] - now) if pending else REQUEST_TIMEOUT_S
            try:
                worker, event = self._next_event(wait_s)
            except TimeoutError:
                if not pending:
                    raise
                continue
            if event["event"] != "done":
                raise RuntimeError(f"unexpected piper-tts worker event {event['event']!r}")
            idle.append(worker)
            index = event["index"]
            text = texts[index % len(texts)]
            results.append(
                _result(index, text, submitted[index], event["first_audio_at_s"], event["ended_at_s"], event["samples"],
                        event["sample_rate_hz"], run_start, event.get("chunks", ()))
            )  # fmt: skip
        results.sort(key=lambda result: result.index)
        return PiperRun(self.setup, False, results, summarize(results, _wall_s(results)), 0)


def _wall_s(results: Sequence[RequestResult]) -> float:
    """From the first request's start to the last one's end (0 for no requests)."""
    if not results:
        return 0.0
    return max(r.started_s + r.total_s for r in results) - min(r.started_s for r in results)


def setups_for(cores: int) -> list[PiperSetup]:
    """The ways to spend `cores` cores: one process per core, and one process with every core."""
    return [PiperSetup(cores, 1), PiperSetup(1, cores)] if cores > 1 else [PiperSetup(1, 1)]


def best_concurrent(texts: Sequence[str], requests: int, concurrency: int, cores: int = DEFAULT_CORES) -> tuple[PiperRun, list[PiperRun]]:
    """Run every setup of `cores` cores; returns the one with the highest throughput, and all of them."""
    runs = []
    for setup in setups_for(cores):
        with PiperPool(setup) as pool:
            run = pool.run(texts, requests, concurrency)
        runs.append(PiperRun(run.setup, False, run.results, run.summary, pool.peak_rss_bytes))
    return max(runs, key=lambda run: run.summary.throughput), runs


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.piper_baseline", description="Measure piper-tts like the mesh.")
    parser.add_argument("--concurrency", type=int, default=1, help="concurrent clients")
    parser.add_argument("--requests", type=int, default=4, help="requests in all")
    parser.add_argument("--texts", choices=list(TEXTS), default="paragraph", help="which text length to speak")
    parser.add_argument("--cores", type=int, default=DEFAULT_CORES, help="cores piper may use in all")
    args = parser.parse_args(argv)
    texts = [TEXTS[args.texts]]
    if args.concurrency == 1:
        run = run_in_process(texts, args.requests, threads=args.cores)
        print(f"piper-tts in-process, {run.setup.label}\n{format_summary(run.summary)}")
        return 0
    best, runs = best_concurrent(texts, args.requests, args.concurrency, cores=args.cores)
    for run in runs:
        marker = " (best)" if run is best else ""
        rss_mib = run.peak_rss_bytes / 2**20
        print(f"piper-tts {run.setup.label}{marker}, peak RSS per worker {rss_mib:.0f} MiB\n{format_summary(run.summary)}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
