"""Dynamic micro-batching: many streams' small inference jobs run as one batched call.

Callers (one worker thread per stream, or asyncio code through `submit_async`) submit a job and
wait on its future. One compute thread takes the first waiting job, keeps collecting until the
batch is full or `max_wait_ms` has passed since that first job arrived, runs the batched function
once and resolves every future. A job whose caller cancelled it before compute started is
dropped; a batch that fails is rerun job by job, so an error reaches only the caller whose job
caused it. The queue is bounded: past `max_queue_depth` waiting jobs, `submit` raises
`Overloaded` with a pushback hint instead of letting latency grow without limit.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Final, Generic, TypeVar

DEFAULT_MAX_BATCH: Final = 8
DEFAULT_MAX_WAIT_MS: Final = 3.0
DEFAULT_MAX_QUEUE_DEPTH: Final = 64
MIN_RETRY_AFTER_S: Final = 0.05
DEFAULT_MAX_PADDING_SHARE: Final = 0.25

logger = logging.getLogger(__name__)

JobT = TypeVar("JobT")
ResultT = TypeVar("ResultT")


@dataclass(frozen=True)
class BatchingConfig:
    """How long a job may wait for company, and how many jobs may be in line."""

    max_batch: int = DEFAULT_MAX_BATCH
    """Most jobs in one batched call; 1 turns batching off (engines then call the model directly)."""
    max_wait_ms: float = DEFAULT_MAX_WAIT_MS
    """Longest a batch's first job waits for others before the batch runs."""
    max_queue_depth: int = DEFAULT_MAX_QUEUE_DEPTH
    """Waiting jobs beyond which `submit` refuses new ones with `Overloaded`."""

    def __post_init__(self) -> None:
        if self.max_batch < 1 or self.max_wait_ms < 0 or self.max_queue_depth < 1:
            raise ValueError(f"invalid batching config {self}")


@dataclass(frozen=True)
class BatchStats:
    """What one batched call did, for metrics."""

    batch_size: int
    """Jobs in the call."""
    queue_s: tuple[float, ...]
    """Seconds each job waited between submit and the start of compute."""
    compute_s: float
    """Seconds the batched call took (including any job-by-job rerun after a failure)."""
    failed_jobs: int = 0
    """Jobs whose caller got an exception."""


class Overloaded(RuntimeError):
    """The batcher's queue is full; the caller should retry after `retry_after_s` (maybe elsewhere)."""

    def __init__(self, queue_depth: int, retry_after_s: float) -> None:
        super().__init__(
            f"inference queue is full ({queue_depth} jobs waiting); retry in about {retry_after_s:.2f} s or on another worker"
        )
        self.queue_depth = queue_depth
        self.retry_after_s = retry_after_s


class BatcherClosed(RuntimeError):
    """The batcher was shut down; no new jobs are taken and waiting ones are cancelled."""


@dataclass
class _Job(Generic[JobT, ResultT]):
    payload: JobT
    future: Future
    submitted_s: float


class MicroBatcher(Generic[JobT, ResultT]):
    """Runs `run_batch(jobs) -> results` (one result per job, same order) on one compute thread."""

    def __init__(
        self,
        run_batch: Callable[[Sequence[JobT]], Sequence[ResultT]],
        config: BatchingConfig = BatchingConfig(),
        on_batch: Callable[[BatchStats], None] | None = None,
        name: str = "batcher",
        thread_setup: Callable[[], None] | None = None,
    ) -> None:
        self.config = config
        self._run_batch = run_batch
        self._on_batch = on_batch
        self._thread_setup = thread_setup
        self._queue: deque[_Job[JobT, ResultT]] = deque()
        self._condition = threading.Condition()
        self._closed = False
        self._recent_compute_s = 0.0
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    @property
    def queue_depth(self) -> int:
        """Jobs waiting for a batch (not counting the batch being computed)."""
        return len(self._queue)

    def submit(self, job: JobT) -> Future:
        """Queue `job`; the future resolves to its result. Raises `Overloaded` or `BatcherClosed`."""
        future: Future = Future()
        with self._condition:
            if self._closed:
                raise BatcherClosed("the batcher is shut down")
            depth = len(self._queue)
            if depth >= self.config.max_queue_depth:
                raise Overloaded(depth, self._retry_after_s(depth))
            self._queue.append(_Job(job, future, time.perf_counter()))
            self._condition.notify()
        return future

    def __call__(self, job: JobT, timeout_s: float | None = None) -> ResultT:
        """Submit `job` and block until its result (for worker threads)."""
        future = self.submit(job)
        try:
            return future.result(timeout_s)
        except BaseException:
            # A caller that stops waiting (timeout, interrupt) takes its job out if it has not started.
            future.cancel()
            raise

    async def submit_async(self, job: JobT) -> ResultT:
        """Submit `job` from asyncio code; cancelling the awaiting task drops the job if not started."""
        return await asyncio.wrap_future(self.submit(job))

    def close(self, timeout_s: float | None = 5.0) -> None:
        """Stop taking jobs, cancel the waiting ones, and let the batch in progress finish."""
        with self._condition:
            self._closed = True
            waiting = list(self._queue)
            self._queue.clear()
            self._condition.notify_all()
        for job in waiting:
            job.future.cancel()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout_s)

    def _retry_after_s(self, depth: int) -> float:
        batches_ahead = depth // self.config.max_batch + 1
        return max(MIN_RETRY_AFTER_S, batches_ahead * self._recent_compute_s)

    def _loop(self) -> None:
        if self._thread_setup is not None:
            self._thread_setup()
        while True:
            batch = self._collect()
            if batch is None:
                return
            self._compute(batch)

    def _collect(self) -> list[_Job[JobT, ResultT]] | None:
        """Wait for a first job, then for more until the batch is full or the window has passed."""
        with self._condition:
            while not self._queue and not self._closed:
                self._condition.wait()
            if self._closed:
                return None
            deadline = self._queue[0].submitted_s + self.config.max_wait_ms / 1000.0
            while len(self._queue) < self.config.max_batch and not self._closed:
                remaining = deadline - time.perf_counter()
                if remaining <= 0:
                    break
                self._condition.wait(remaining)
            count = min(len(self._queue), self.config.max_batch)
            return [self._queue.popleft() for _ in range(count)]

    def _compute(self, batch: list[_Job[JobT, ResultT]]) -> None:
        started_s = time.perf_counter()
        # Marks each future running; a future already cancelled by its caller is dropped here.
        live = [job for job in batch if job.future.set_running_or_notify_cancel()]
        if not live:
            return
        failed = 0
        try:
            results = list(self._run_batch([job.payload for job in live]))
            if len(results) != len(live):
                raise RuntimeError(f"run_batch returned {len(results)} results for {len(live)} jobs")
            for job, result in zip(live, results, strict=False):
                job.future.set_result(result)
        except Exception:
            # Which job broke the batch is unknown: rerun them one by one so only its caller fails.
            for job in live:
                try:
                    job.future.set_result(self._run_batch([job.payload])[0])
                except Exception as error:
                    job.future.set_exception(error)
                    failed += 1
        compute_s = time.perf_counter() - started_s
        self._recent_compute_s = compute_s
        if self._on_batch is not None:
            try:
                self._on_batch(BatchStats(len(live), tuple(started_s - job.submitted_s for job in live), compute_s, failed))
            except Exception:
                logger.exception("batch stats callback failed")


def padding_groups(lengths: Sequence[int], max_padding_share: float = DEFAULT_MAX_PADDING_SHARE) -> list[list[int]]:
    """Split a batch (item lengths) into sub-batches whose padding stays under `max_padding_share`.

    Items are taken longest first; an item joins the current group while the group's padded
    size (items x longest) stays within (1 + max_padding_share) x its real frames. Padding is
    computed and thrown away, so a short window should not ride along with a long one.
    """
    order = sorted(range(len(lengths)), key=lambda index: -lengths[index])
    groups: list[list[int]] = []
    real = 0
    for index in order:
        if groups:
            group = groups[-1]
            longest = lengths[group[0]]
            if longest * (len(group) + 1) <= (1.0 + max_padding_share) * (real + lengths[index]):
                group.append(index)
                real += lengths[index]
                continue
        groups.append([index])
        real = lengths[index]
    return groups
