"""A worker's inference threads, taking the waiting model step whose listener needs it first.

Every step is queued with its deadline (when its listener needs the audio it leads to) and its
estimate (libs.scheduling.costs: how long it takes on the clock now, and what must follow it). Its
latest start is the deadline less its lead. The threads take:

- a playing listener's step once its latest start is closer than the first audio at the head of the
  queue takes to run (it would otherwise be late behind it);
- otherwise a stream's first audio, by when its listener asked (each stream's steps through before
  the next stream's): a listener that has heard nothing is waiting, one that holds audio loses
  nothing by waiting;
- otherwise the playing step that must start first.

With lanes, each kind of work has threads of its own at its own OS priority, because the cores are
shared with other processes (the other worker, the gateway) and the kernel knows nothing of
deadlines, only of nice values, which it weighs across processes alike:

- urgent threads, at the process's own priority, take playing listeners' steps that must start now;
- first-audio threads, at FIRST_AUDIO_NICE, take first audios: a listener about to run dry in the
  other worker outranks them;
- background threads, at BACKGROUND_NICE (or at the kernel's idle policy: see `background_idle`), take
  only steps still in time at that priority, and none while first audios wait: audio made ahead of
  need uses what the rest leaves.

Without first-audio threads the urgent threads take first audios too, by the rule above.

Order changes only when a step runs, never what it computes, so audio stays bit-identical however
streams are interleaved.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import math
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import Executor, Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from libs.scheduling.costs import BACKGROUND_LANE, FIRST_AUDIO_LANE, NO_ESTIMATE, URGENT_LANE, StepEstimate

BACKGROUND_NICE: Final = 19
"""The OS nice value of background threads, the lowest there is: the kernel's weight for nice 19 is 15
against 1024 for nice 0 and 335 for a first-audio thread, so a first audio keeps about 96% of a core
beside one, and a step under way still moves (a step held back so says it is waiting, not stuck:
`cpu_wait_s`). In Poisson arrivals at 0.8 of the capacity on a whole and half a core, eight runs
against nice 10 (weight 110) each, the first audio's p95 came 2-44% sooner (median 37%) and its p50
24-45% sooner in seven (one was 71% later), as with the idle policy in the same runs; at a quarter of
a core the runs showed no difference (docs/performance.md, "History"). Where the threads run at the
idle policy (`SCHED_IDLE`) the kernel ignores it, and gives them a weight of 3 instead."""
FIRST_AUDIO_NICE: Final = 5
"""The OS nice value of first-audio threads: the kernel's weight for nice 5 is 335 against 1024 for an
urgent thread (which gets three quarters of a core shared with one) and 15 for a background one."""
UPSTREAM_URGENT_NICE: Final = 5
"""The OS nice value of the urgent threads of a worker whose every step is followed by another worker's
before anyone hears it (the acoustic worker, upstream of the vocoder). When both workers have work due,
the step nearer the listener goes first: the acoustic worker's due work is mel for audio the vocoder
will make after what it is making now. On a small CPU quota this is most of a lone listener's wait: a
starting stream's first audio is held until the vocoder's second step is done, and the acoustic
worker's next chunks (due, as the listener has been waiting) had taken half the quota from it."""
URGENT, FIRST_AUDIO, BACKGROUND = URGENT_LANE, FIRST_AUDIO_LANE, BACKGROUND_LANE
MAX_IDLE_WAIT_S: Final = 60.0
"""The longest an urgent thread sleeps before looking at the queue again (a wait may not exceed what the OS takes)."""


@dataclass(order=True)
class _Call:
    start_by_s: float
    order: int
    deadline_s: float = field(compare=False)
    estimate: StepEstimate = field(compare=False)
    future: Future = field(compare=False)
    fn: Callable[..., Any] = field(compare=False)
    args: tuple[Any, ...] = field(compare=False)
    kwargs: dict[str, Any] = field(compare=False)

    @property
    def background_start_by_s(self) -> float:
        """The latest start on a background thread."""
        return self.deadline_s - self.estimate.background_lead_s


RunObserver = Callable[[bool, float, float], None]
"""Called after every call with (ran at normal priority, wall seconds, CPU seconds)."""

_lane = threading.local()


def current_lane() -> str:
    """The lane of the calling thread (URGENT for a thread of an executor without lanes, or any other)."""
    return getattr(_lane, "name", URGENT)


class DeadlineExecutor(Executor):
    """A thread pool whose threads take the queued call that must start first (module docstring).

    `submit` queues a call due now with no estimate (plain calls keep arrival order among themselves);
    `submit_by` one due at `deadline_s` (`time.monotonic()`) with its `estimate`, marked `first_audio`
    for a step of a stream whose listener has heard nothing yet. Ties go in arrival order. With
    `by_deadline` False every call counts as due when submitted: plain arrival order (and no lanes).
    """

    def __init__(
        self,
        threads: int,
        name: str = "inference",
        on_run: RunObserver | None = None,
        by_deadline: bool = True,
        urgent_threads: int = 0,
        first_audio_threads: int = 0,
        urgent_nice: int = 0,
        background_idle: bool = False,
    ) -> None:
        """`threads` run everything without lanes, or are the background lane with them
        (`urgent_threads` > 0, and `first_audio_threads` for a lane of first audios of their own);
        `urgent_nice` is the OS nice value of the urgent lane (UPSTREAM_URGENT_NICE for an upstream worker).

        `background_idle`: with lanes, the background threads ask the kernel for its idle policy
        (`SCHED_IDLE`, where the OS has one), on top of BACKGROUND_NICE: they then run only on what the
        threads of every process at a normal policy leave (weight 3 against 1024), instead of about 1.4%
        of a core beside one of them at nice 19. In Poisson arrivals at 0.8 of the capacity the two cut
        the first audio's wait alike (docs/performance.md, "History"). Off by default: at the idle policy
        a step under way stops altogether while other processes in the CPU cgroup keep its cores busy,
        where at nice 19 it still finishes (libs.serving.worker.BACKGROUND_PRIORITIES)."""
        if not 0 <= urgent_nice <= FIRST_AUDIO_NICE:
            raise ValueError(f"urgent_nice must be 0 to {FIRST_AUDIO_NICE} (the first-audio lane's), got {urgent_nice}")
        if threads < 1:
            raise ValueError(f"threads must be at least 1, got {threads}")
        if urgent_threads < 0 or first_audio_threads < 0:
            raise ValueError(f"lanes cannot have a negative number of threads, got {urgent_threads} and {first_audio_threads}")
        self.threads = threads
        self.urgent_threads = urgent_threads
        self.by_deadline = by_deadline
        self.on_run = on_run
        self._lanes = by_deadline and urgent_threads > 0
        self._first_lane = self._lanes and first_audio_threads > 0
        self.first_audio_threads = first_audio_threads if self._first_lane else 0
        self.lane_nice = {URGENT: urgent_nice if self._lanes else 0, FIRST_AUDIO: FIRST_AUDIO_NICE, BACKGROUND: BACKGROUND_NICE}
        """The OS nice value of each lane's threads."""
        self.background_idle = self._lanes and background_idle and hasattr(os, "SCHED_IDLE")
        """Whether the background lane's threads ask for the kernel's idle policy (they keep their nice
        value if the kernel refuses)."""
        self._playing: list[_Call] = []
        self._first: list[_Call] = []
        self._order = itertools.count()
        self._condition = threading.Condition()
        self._shut_down = False
        self._queued_cpu_s = 0.0
        self.completed = 0
        """Calls run so far: a worker whose steps wait in its queue is busy, not hung, while this moves."""
        self._native_ids: list[int] = []
        lanes = [(BACKGROUND if self._lanes else URGENT, index) for index in range(threads)]
        if self._lanes:
            lanes += [(URGENT, index) for index in range(urgent_threads)]
            lanes += [(FIRST_AUDIO, index) for index in range(self.first_audio_threads)]
        self._workers = [
            threading.Thread(target=self._work, args=(lane,), name=f"{name}_{lane}_{index}", daemon=True) for lane, index in lanes
        ]
        for worker in self._workers:
            worker.start()

    @property
    def queue_depth(self) -> int:
        """Calls waiting for a thread."""
        return len(self._playing) + len(self._first)

    @property
    def queued_cpu_s(self) -> float:
        """Expected CPU seconds of the calls waiting for a thread."""
        return self._queued_cpu_s

    def lateness_s(self) -> float:
        """How late the playing step that must start first already is for its start (0: it is not)."""
        with self._condition:
            if not self._playing:
                return 0.0
            return max(0.0, time.monotonic() - self._playing[0].start_by_s)

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future:
        return self.submit_by(time.monotonic(), fn, *args, **kwargs)

    def submit_by(
        self,
        deadline_s: float,
        fn: Callable[..., Any],
        /,
        *args: Any,
        first_audio: bool = False,
        estimate: StepEstimate = NO_ESTIMATE,
        rank_s: float | None = None,
        **kwargs: Any,
    ) -> Future:
        """Queue `fn(*args, **kwargs)`, due at `deadline_s` and expected to take `estimate`;
        `first_audio` for a step of a stream that is starting, ranked among first audios by `rank_s`
        (when its listener asked; default `deadline_s`)."""
        future: Future = Future()
        if not self.by_deadline:
            deadline_s, first_audio = time.monotonic(), False
        elif math.isnan(deadline_s):  # it would break the heap's order
            deadline_s = time.monotonic()
        # First audios are all overdue: they go by when their listener asked (one stream's first audio
        # through before the next's), not by latest start, which would run every plan before any chunk.
        start_by_s = (deadline_s if rank_s is None or math.isnan(rank_s) else rank_s) if first_audio else deadline_s - estimate.lead_s
        call = _Call(start_by_s, next(self._order), deadline_s, estimate, future, fn, args, kwargs)
        with self._condition:
            if self._shut_down:
                raise RuntimeError("cannot schedule new calls after shutdown")
            heapq.heappush(self._first if first_audio else self._playing, call)
            self._queued_cpu_s += estimate.cpu_s
            # With lanes, the thread woken must be of the call's lane: wake them all (they are few).
            self._condition.notify_all() if self._lanes else self._condition.notify()
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._condition:
            self._shut_down = True
            if cancel_futures:
                for heap in (self._playing, self._first):
                    for call in heap:
                        call.future.cancel()
                    heap.clear()
                self._queued_cpu_s = 0.0
            self._condition.notify_all()
        if wait:
            for worker in self._workers:
                if worker is not threading.current_thread():
                    worker.join()

    def _pop(self, heap: list[_Call]) -> _Call:
        call = heapq.heappop(heap)
        self._queued_cpu_s = max(0.0, self._queued_cpu_s - call.estimate.cpu_s)
        return call

    def _take(self, lane: str) -> tuple[_Call | None, float | None]:
        """(the call a thread of `lane` runs next, or None; how long to wait before looking again, or
        None for "until woken"). Called with the lock held."""
        now = time.monotonic()
        playing, first = self._playing, self._first
        if not self._lanes:
            if not first:
                return (self._pop(playing) if playing else None), None
            if playing and playing[0].start_by_s <= now + first[0].estimate.wall_s:
                return self._pop(playing), None
            return self._pop(first), None
        if lane == FIRST_AUDIO:
            return (self._pop(first) if first else None), None
        if lane == BACKGROUND:  # only what is still in time at the background priority
            # Not while first audios wait: a step under way takes a share of the cores (a small one at
            # nice 19; and at either priority, of their caches and of a CPU quota) from them, for audio
            # nobody needs yet.
            if playing and not first and playing[0].background_start_by_s > now:
                return self._pop(playing), None
            return None, None  # an urgent thread takes it; woken by the next submit
        if first and not self._first_lane and not (playing and playing[0].start_by_s <= now + first[0].estimate.wall_s):
            return self._pop(first), None
        if not playing:
            return None, None
        top = playing[0]
        if top.start_by_s <= now:  # due: it would be late behind anything else
            return self._pop(playing), None
        if first and self._first_lane:
            # First audios wait: the cores are theirs until a playing step is due (a step taken
            # early here would run at a priority above theirs).
            return None, min(top.start_by_s - now, MAX_IDLE_WAIT_S)
        if top.background_start_by_s <= now:
            return self._pop(playing), None
        # A background thread may still take it in time; if none does, it becomes urgent then.
        return None, min(top.background_start_by_s - now, MAX_IDLE_WAIT_S)

    def cpu_wait_s(self) -> float:
        """Seconds the threads have spent ready to run while the kernel gave their cores to other
        threads (the run-queue wait of /proc/self/task/<id>/schedstat; 0 where the OS does not say).
        A step held back so, on a low-priority thread beside busy ones, is not stuck: it waits for CPU."""
        waited_ns = 0
        for native_id in list(self._native_ids):
            with contextlib.suppress(OSError, ValueError, IndexError):
                waited_ns += int(Path(f"/proc/self/task/{native_id}/schedstat").read_text().split()[1])
        return waited_ns / 1e9

    def _work(self, lane: str) -> None:
        native_id = threading.get_native_id()
        self._native_ids.append(native_id)
        # The OS knows the thread by this name too (top -H, /proc/<pid>/task/<tid>/comm: 15 bytes at most).
        with contextlib.suppress(OSError):
            Path(f"/proc/self/task/{native_id}/comm").write_text(threading.current_thread().name.split("_", 1)[-1][:15])
        if self.lane_nice[lane]:
            with contextlib.suppress(OSError):  # raising one's own nice value never needs a privilege
                os.setpriority(os.PRIO_PROCESS, native_id, os.getpriority(os.PRIO_PROCESS, 0) + self.lane_nice[lane])
        if lane == BACKGROUND and self.background_idle:
            with contextlib.suppress(OSError):  # nor does moving to the idle policy (only leaving it does)
                os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))  # 0: the calling thread
        normal_priority = self.lane_nice[lane] == 0
        _lane.name = lane
        while True:
            with self._condition:
                while True:
                    call, wait_s = self._take(lane)
                    if call is not None or self._shut_down:
                        break
                    self._condition.wait(wait_s)
                if call is None:
                    return
                if self._lanes and self._playing:
                    self._condition.notify_all()  # the new top may be for the other lane
            if not call.future.set_running_or_notify_cancel():
                continue  # its caller stopped waiting before it started
            started_s, started_cpu_s = time.perf_counter(), time.thread_time()
            error: BaseException | None = None
            try:
                result = call.fn(*call.args, **call.kwargs)
            except BaseException as raised:  # the caller gets its own error
                error = raised
            # Counted before the caller hears of it, so whatever the caller does next comes after.
            self.completed += 1
            if self.on_run is not None:
                self.on_run(normal_priority, time.perf_counter() - started_s, time.thread_time() - started_cpu_s)
            if error is not None:
                call.future.set_exception(error)
            else:
                call.future.set_result(result)
