"""Deadline-aware scheduling in a worker: every model step runs in order of its listener's need.

Each request from the gateway says how long its listener can wait (`playback_slack_ms`): the audio
buffered ahead of the listener, or, overdue, minus how long it has waited (a first audio, or a
listener that ran dry). The worker
turns that into a deadline on its own clock when the request arrives, moves it on by the audio each
step produces, and its threads take the waiting step with the earliest deadline, a stream's first
audio before listeners that are not about to run dry, and what can wait on threads at a lower OS
priority (docs/ARCHITECTURE.md, "Scheduling and admission"). Order changes only when a step runs,
never what it computes, so audio stays bit-identical however streams are interleaved.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import math
import os
import threading
import time
from collections.abc import AsyncIterator, Callable
from concurrent.futures import Executor, Future
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar

from libs.voice.chunking import VOCODER_SCHEDULE, ChunkSchedule
from libs.wire.errors import InvalidRequestError

RequestT = TypeVar("RequestT")

VOCODER_LAG_FRAMES: Final = 21
"""How far the vocoder's samples lag its mel (frames; `output_lag`, docs/ARCHITECTURE.md, "Exact
streaming and resume"): the audio of frame f comes out only once frame f + 21 is in, so the mel a
listener needs is always that much ahead of what it hears."""
def vocoder_frames_out(
    mel_frames: int, total_frames: int, schedule: ChunkSchedule = VOCODER_SCHEDULE, lag_frames: int = VOCODER_LAG_FRAMES
) -> int:
    """Frames of a sentence's audio a vocoder can have made once its first `mel_frames` of mel are in.

    The vocoder steps through whole chunks of `schedule`, and each step's audio lags its mel by
    `lag_frames`; the sentence's last step takes what is left and ends its audio. So the mel a
    listener's next audio waits on is the rest of the vocoder's next step, not just `lag_frames`
    more: the acoustic worker counts its chunks' deadlines by this (counted by frames alone, a
    third chunk of 288 frames was due ~0.4 s after the vocoder needed it, and 24 streams stalled).
    """
    if mel_frames >= total_frames:
        return total_frames
    end, index = 0, 0
    while end + schedule.chunk_frames(index) <= mel_frames:
        end += schedule.chunk_frames(index)
        index += 1
    return max(0, end - lag_frames)


RUN_DRY_GUARD_S: Final = 0.25
"""A playing listener's step goes before every waiting first audio once its listener would run dry
within this long: enough for an acoustic chunk and the vocoder step it unlocks (288 and 128 frames:
~80 ms alone, about twice that with both workers' urgent threads sharing two cores), and the hops to
the listener. At 150 ms, 24 streams arriving together now and then stalled 0.1-0.3 s at a vocoder
step of 128 frames. Until then first audios go first: a listener that has heard nothing waits for it,
one that holds audio loses nothing by waiting."""
URGENT_HORIZON_S: Final = 0.5
"""With lanes (`DeadlineExecutor`), a step due sooner than this, or a first audio, runs on an urgent
thread at the process's own priority; one due later on a background thread, at BACKGROUND_NICE."""
BACKGROUND_NICE: Final = 10
"""The OS nice value of background threads: at 10 the kernel gives a busy thread about a tenth of
what a thread at 0 gets when both want a core, and all of it when nothing urgent runs."""
MAX_IDLE_WAIT_S: Final = 60.0
"""The longest an urgent thread sleeps before looking at the queue again."""
READ_AHEAD_REQUESTS: Final = 16
"""Requests a worker reads ahead of the one it works on: enough that each is stamped when it
arrives, few enough that gRPC flow control still holds back a gateway that writes too much."""


_Call = tuple[float, int, Future, Callable[..., Any], tuple[Any, ...], dict[str, Any]]


class DeadlineExecutor(Executor):
    """A thread pool whose threads take the queued call with the earliest deadline first.

    `submit` queues with the deadline "now" (so plain calls keep arrival order among themselves);
    `submit_by` with an explicit deadline in `time.monotonic()` seconds. Ties go in arrival order.
    A call marked `first_audio` (a stream whose listener has heard nothing yet) goes before every
    other call unless that one's deadline is within RUN_DRY_GUARD_S (or past): first audios go first,
    and a playing listener is served only when it is about to run dry.

    With `urgent_threads`, the pool has two lanes. Its `threads` run at a lower OS priority
    (`background_nice`) and take only calls due later than `urgent_horizon_s` from now; the urgent
    threads run at the process's own priority and take only first audios and calls due sooner. The
    cores are shared with other processes (the other worker, the gateway), and the OS knows nothing
    of deadlines: without lanes, one worker making audio seconds ahead of need takes a core from
    another worker's first audio. With lanes, work that can wait uses only what urgent work leaves.

    `on_run(seconds)` is called after every call with the time it ran, for capacity measurement.
    With `by_deadline` False every call counts as due when submitted: plain arrival order (and no lanes).
    """

    def __init__(
        self,
        threads: int,
        name: str = "inference",
        on_run: Callable[[float], None] | None = None,
        by_deadline: bool = True,
        urgent_threads: int = 0,
        urgent_horizon_s: float = URGENT_HORIZON_S,
        background_nice: int = BACKGROUND_NICE,
    ) -> None:
        if threads < 1:
            raise ValueError(f"threads must be at least 1, got {threads}")
        if urgent_threads < 0:
            raise ValueError(f"urgent_threads must not be negative, got {urgent_threads}")
        self.threads = threads
        self.by_deadline = by_deadline
        self.on_run = on_run
        self.urgent_horizon_s = urgent_horizon_s
        self._lanes = by_deadline and urgent_threads > 0
        self._background_nice = background_nice if self._lanes else 0
        self._heap: list[_Call] = []
        self._first_heap: list[_Call] = []
        self._order = itertools.count()
        self._condition = threading.Condition()
        self._shut_down = False
        lanes = [(False, index) for index in range(threads)]
        if self._lanes:
            lanes += [(True, index) for index in range(urgent_threads)]
        self._workers = [
            threading.Thread(target=self._work, args=(urgent,), name=f"{name}_{'urgent' if urgent else 'step'}_{index}", daemon=True)
            for urgent, index in lanes
        ]
        for worker in self._workers:
            worker.start()

    @property
    def queue_depth(self) -> int:
        """Calls waiting for a thread."""
        return len(self._heap) + len(self._first_heap)

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future:
        return self.submit_by(time.monotonic(), fn, *args, **kwargs)

    def submit_by(
        self, deadline_s: float, fn: Callable[..., Any], /, *args: Any, first_audio: bool = False, **kwargs: Any
    ) -> Future:
        """Queue `fn(*args, **kwargs)` to run before every queued call with a later `deadline_s`;
        `first_audio` for a step of a stream whose listener has heard nothing yet."""
        future: Future = Future()
        if not self.by_deadline:
            deadline_s, first_audio = time.monotonic(), False
        elif math.isnan(deadline_s):  # it would break the heap's order
            deadline_s = time.monotonic()
        with self._condition:
            if self._shut_down:
                raise RuntimeError("cannot schedule new calls after shutdown")
            heap = self._first_heap if first_audio else self._heap
            heapq.heappush(heap, (deadline_s, next(self._order), future, fn, args, kwargs))
            # With lanes, the thread woken must be of the call's lane: wake them all (they are few).
            self._condition.notify_all() if self._lanes else self._condition.notify()
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._condition:
            self._shut_down = True
            if cancel_futures:
                for heap in (self._heap, self._first_heap):
                    for _, _, future, *_ in heap:
                        future.cancel()
                    heap.clear()
            self._condition.notify_all()
        if wait:
            for worker in self._workers:
                if worker is not threading.current_thread():
                    worker.join()

    def _take(self, urgent: bool) -> tuple[_Call | None, float | None]:
        """(the call this thread runs next, or None; how long to wait before looking again, or None
        for "until woken"). Called with the lock held."""
        now = time.monotonic()
        if not self._lanes:
            if not self._first_heap:
                return (heapq.heappop(self._heap) if self._heap else None), None
            if self._heap and self._heap[0][0] <= now + RUN_DRY_GUARD_S:
                return heapq.heappop(self._heap), None
            return heapq.heappop(self._first_heap), None
        if not self._heap:
            return (heapq.heappop(self._first_heap) if urgent and self._first_heap else None), None
        due_in_s = self._heap[0][0] - now
        if not urgent:  # the background lane: only what can wait
            if due_in_s > self.urgent_horizon_s:
                return heapq.heappop(self._heap), None
            return None, None  # an urgent thread takes it; woken by the next submit
        if self._first_heap and due_in_s > RUN_DRY_GUARD_S:
            return heapq.heappop(self._first_heap), None
        if due_in_s <= self.urgent_horizon_s:
            return heapq.heappop(self._heap), None
        # It becomes urgent then (a far deadline still wakes the thread now and then: a wait may not
        # exceed what the OS takes, and a request may say its listener holds years of audio).
        return None, min(due_in_s - self.urgent_horizon_s, MAX_IDLE_WAIT_S)

    def _work(self, urgent: bool) -> None:
        if not urgent and self._background_nice:
            with contextlib.suppress(OSError):  # raising one's own nice value never needs a privilege
                os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), self._background_nice)
        while True:
            with self._condition:
                while True:
                    call, wait_s = self._take(urgent)
                    if call is not None or self._shut_down:
                        break
                    self._condition.wait(wait_s)
                if call is None:
                    return
                if self._lanes and self._heap:
                    self._condition.notify_all()  # the new top may be for the other lane
                _, _, future, fn, args, kwargs = call
            if not future.set_running_or_notify_cancel():
                continue  # its caller stopped waiting before it started
            started_s = time.perf_counter()
            error: BaseException | None = None
            try:
                result = fn(*args, **kwargs)
            except BaseException as raised:
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
class StreamPlayback:
    """A worker's own view of one stream's listener: when the stream's first audio was made here, and
    how much audio it has made since. A listener starts playing at its first audio, not when it asked,
    so the audio made here says when it runs dry at the earliest; a request's slack, measured by the
    gateway, may have been taken before the listener started and then says "overdue" too soon."""

    started_s: float | None
    """When the stream's first audio was made (`time.monotonic()`); None while its listener has heard
    nothing; -inf for a stream that opened on a playing listener (a resumed one)."""
    made_s: float = 0.0
    """Audio made since (seconds)."""

    @classmethod
    def opening(cls, first_audio: bool) -> StreamPlayback:
        """A stream whose first request starts its audio (`first_audio`) or continues a playing listener's."""
        return cls(None if first_audio else float("-inf"))

    @property
    def first_audio(self) -> bool:
        """True while the stream's listener has heard nothing."""
        return self.started_s is None

    def deadline(self, received_s: float, playback_slack_ms: float) -> PlaybackDeadline:
        """The deadline of a request that arrived at `received_s` with `playback_slack_ms` of slack
        (negative: overdue already); InvalidRequestError when the slack is not a finite number."""
        if not math.isfinite(playback_slack_ms):
            raise InvalidRequestError(
                f"playback_slack_ms is {playback_slack_ms}; send a finite number of milliseconds (the audio the "
                "listener holds before this request's audio, negative when overdue)"
            )
        return PlaybackDeadline(received_s + float(playback_slack_ms) / 1000.0, self)

    def made(self, audio_s: float, done_s: float | None = None) -> None:
        """A step done at `done_s` (now by default) made `audio_s` of the listener's audio."""
        if self.started_s is None:
            self.started_s = time.monotonic() if done_s is None else done_s
        self.made_s += max(0.0, audio_s)


@dataclass
class PlaybackDeadline:
    """When the listener of one request needs its next audio, on this worker's `time.monotonic()` clock."""

    listener_s: float
    """When the listener needs the audio of the request's next step, by the request's slack."""
    stream: StreamPlayback
    """The request's stream."""

    @property
    def first_audio(self) -> bool:
        """True while the stream's listener has heard nothing: the step goes before others that are
        not about to run dry (`DeadlineExecutor`)."""
        return self.stream.first_audio

    @property
    def at_s(self) -> float:
        """The deadline of the request's next step: by its slack, or later when the audio this worker
        made since the stream's first audio lasts longer."""
        return self.at_offset_s(0.0)

    def at_offset_s(self, offset_s: float) -> float:
        """The deadline of a step whose audio starts `offset_s` after the audio the request's slack
        was measured for (negative: before it)."""
        by_slack = self.listener_s + offset_s
        if self.stream.started_s is None:
            return by_slack
        return max(by_slack, self.stream.started_s + self.stream.made_s)

    def advance(self, audio_s: float, done_s: float | None = None) -> None:
        """A step done at `done_s` (now by default) made `audio_s` of audio: the next one is needed that
        much later."""
        self.listener_s += max(0.0, audio_s)
        self.stream.made(audio_s, done_s)


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
        except Exception as error:
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
