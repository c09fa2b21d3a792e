"""Deadline-aware scheduling in a worker: every model step runs in order of its listener's need.

Each request from the gateway says how long its listener can wait (`playback_slack_ms`): the audio
buffered ahead of the listener, or, overdue, minus how long it has waited (a first audio, or a
listener that ran dry). The worker
turns that into a deadline on its own clock when the request arrives, moves it on by the audio each
step produces, and its inference threads always take the waiting step with the earliest deadline
(docs/ARCHITECTURE.md, "Scheduling and admission"). Order changes only when a step runs, never what
it computes, so audio stays bit-identical however streams are interleaved.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import threading
import time
from concurrent.futures import Executor, Future
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Callable, Final, TypeVar

RequestT = TypeVar("RequestT")

VOCODER_LAG_FRAMES: Final = 21
"""How far the vocoder's samples lag its mel (frames; `output_lag`, docs/ARCHITECTURE.md, "Exact
streaming and resume"): the audio of frame f comes out only once frame f + 21 is in, so the mel a
listener needs is always that much ahead of what it hears."""
FIRST_AUDIO_BUDGET_S: Final = 0.15
"""How long a stream's very first step may wait behind steps of listeners about to run dry. First
audio is wanted now, but a listener that has heard nothing loses nothing yet while one that runs
dry hears a gap; within this budget (well inside the 250 ms a first audio may take) streams that
started a moment earlier keep playing. What follows the first audio is due as if it had played at
once, so a stream never pays the budget twice."""
READ_AHEAD_REQUESTS: Final = 16
"""Requests a worker reads ahead of the one it works on: enough that each is stamped when it
arrives, few enough that gRPC flow control still holds back a gateway that writes too much."""


class DeadlineExecutor(Executor):
    """A thread pool whose threads take the queued call with the earliest deadline first.

    `submit` queues with the deadline "now" (so plain calls keep arrival order among themselves);
    `submit_by` with an explicit deadline in `time.monotonic()` seconds. Ties go in arrival order.
    `on_run(seconds)` is called after every call with the time it ran, for capacity measurement.
    With `by_deadline` False every call counts as due when submitted: plain arrival order.
    """

    def __init__(
        self, threads: int, name: str = "inference", on_run: Callable[[float], None] | None = None, by_deadline: bool = True
    ) -> None:
        if threads < 1:
            raise ValueError(f"threads must be at least 1, got {threads}")
        self.threads = threads
        self.by_deadline = by_deadline
        self.on_run = on_run
        self._heap: list[tuple[float, int, Future, Callable[..., Any], tuple[Any, ...], dict[str, Any]]] = []
        self._order = itertools.count()
        self._condition = threading.Condition()
        self._shut_down = False
        self._workers = [threading.Thread(target=self._work, name=f"{name}_{index}", daemon=True) for index in range(threads)]
        for worker in self._workers:
            worker.start()

    @property
    def queue_depth(self) -> int:
        """Calls waiting for a thread."""
        return len(self._heap)

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future:
        return self.submit_by(time.monotonic(), fn, *args, **kwargs)

    def submit_by(self, deadline_s: float, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future:
        """Queue `fn(*args, **kwargs)` to run before every queued call with a later `deadline_s`."""
        future: Future = Future()
        if not self.by_deadline:
            deadline_s = time.monotonic()
        with self._condition:
            if self._shut_down:
                raise RuntimeError("cannot schedule new calls after shutdown")
            heapq.heappush(self._heap, (deadline_s, next(self._order), future, fn, args, kwargs))
            self._condition.notify()
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._condition:
            self._shut_down = True
            if cancel_futures:
                for _, _, future, *_ in self._heap:
                    future.cancel()
                self._heap.clear()
            self._condition.notify_all()
        if wait:
            for worker in self._workers:
                if worker is not threading.current_thread():
                    worker.join()

    def _work(self) -> None:
        while True:
            with self._condition:
                while not self._heap and not self._shut_down:
                    self._condition.wait()
                if not self._heap:
                    return
                _, _, future, fn, args, kwargs = heapq.heappop(self._heap)
            if not future.set_running_or_notify_cancel():
                continue  # its caller stopped waiting before it started
            started_s = time.perf_counter()
            error: BaseException | None = None
            try:
                result = fn(*args, **kwargs)
            except BaseException as raised:  # noqa: BLE001 - the caller gets its own error
                error = raised
            # Counted before the caller hears of it, so whatever the caller does next (a worker
            # resetting its meter once the model has loaded) comes after.
            if self.on_run is not None:
                self.on_run(time.perf_counter() - started_s)
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(result)


@dataclass
class PlaybackDeadline:
    """When the listener of one request needs its next audio, on this worker's `time.monotonic()` clock."""

    listener_s: float
    """When the listener needs the audio of the request's next step."""
    budget_s: float = 0.0
    """Extra wait allowed for the next step (FIRST_AUDIO_BUDGET_S for a stream's first audio)."""

    @classmethod
    def on_arrival(cls, received_s: float, playback_slack_ms: float, first_audio: bool = False) -> "PlaybackDeadline":
        """The deadline of a request that arrived at `received_s` with `playback_slack_ms` of slack;
        `first_audio` when it starts the stream's audio (sentence 0 from frame 0)."""
        listener_s = received_s + float(playback_slack_ms) / 1000.0  # negative slack: overdue already
        return cls(listener_s, FIRST_AUDIO_BUDGET_S if first_audio else 0.0)

    @property
    def at_s(self) -> float:
        """The deadline of the request's next step."""
        return self.listener_s + self.budget_s

    def advance(self, audio_s: float) -> None:
        """A step produced `audio_s` of audio: the next one is needed that much later."""
        self.listener_s += max(0.0, audio_s)
        self.budget_s = 0.0


async def stamped(requests: AsyncIterator[RequestT]) -> AsyncIterator[tuple[RequestT, float]]:
    """`requests` with the `time.monotonic()` at which each arrived.

    A background task reads up to READ_AHEAD_REQUESTS ahead, so a request that arrives while the
    stream's previous one is still being worked on is stamped then, not when its turn comes (its
    slack was measured when it was sent). An error reading the stream is raised in order.
    """
    queue: asyncio.Queue[tuple[Any, float]] = asyncio.Queue(READ_AHEAD_REQUESTS)
    end = object()

    async def read() -> None:
        try:
            async for request in requests:
                await queue.put((request, time.monotonic()))
        except Exception as error:  # noqa: BLE001 - handed to the consumer, raised there in order
            await queue.put((error, 0.0))
            return
        await queue.put((end, 0.0))

    reader = asyncio.ensure_future(read())
    try:
        while True:
            item, received_s = await queue.get()
            if item is end:
                return
            if isinstance(item, Exception):
                raise item
            yield item, received_s
    finally:
        reader.cancel()


@dataclass
class RealtimeMeter:
    """A worker's real-time capacity (audio seconds it makes per second when busy) and its demand.

    Capacity is audio produced per second of inference-thread time, times the threads: when the
    worker is saturated that is exactly its throughput, and since busy steps run slower when the
    cores are shared, it also drops when another process takes them. Each window of `window_busy_s`
    busy seconds moves it by `weight` of the difference: one window measured while another process
    held the cores must not shut the worker, and one that refuses most streams is seldom busy, so
    its windows come slowly. Demand is one audio second
    per second for every open stream (each has a listener playing in real time).
    """

    threads: int
    """Inference threads whose busy time is counted."""
    window_busy_s: float = 1.0
    """Busy thread-seconds per measurement window."""
    weight: float = 0.5
    """Share of the difference to a new window's measurement taken (0..1]."""
    capacity_audio_s_per_s: float = 0.0
    """The current estimate; 0 until the first window is complete."""
    _audio_s: float = field(default=0.0, init=False)
    _busy_s: float = field(default=0.0, init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def ran(self, busy_s: float) -> None:
        """An inference thread was busy for `busy_s` seconds (called from that thread)."""
        with self._lock:
            self._busy_s += busy_s
            if self._busy_s < self.window_busy_s or self._audio_s <= 0.0:
                return
            measured = self._audio_s / self._busy_s * self.threads
            self._audio_s = self._busy_s = 0.0
            current = self.capacity_audio_s_per_s
            self.capacity_audio_s_per_s = measured if current <= 0.0 else current + self.weight * (measured - current)

    def reset(self) -> None:
        """Forget what was counted so far (the model's load and warm-up are not serving)."""
        with self._lock:
            self._audio_s = self._busy_s = 0.0

    def produced(self, audio_s: float) -> None:
        """The worker made `audio_s` seconds of audio (mel or samples)."""
        with self._lock:
            self._audio_s += audio_s
