"""A worker's model steps on its inference executor: queued by deadline with their estimate, timed into
the cost model and the metrics, traced in the caller's trace.

`loop.run_in_executor` does not carry context variables into the thread, so a span started there
would begin a new trace; `StepRunner.run` runs the step in a copy of the caller's context.
"""

from __future__ import annotations

import asyncio
import contextvars
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from concurrent.futures import Executor
from typing import Any, Final, TypeVar

from libs.scheduling.costs import NO_ESTIMATE, CostModel
from libs.scheduling.executor import DeadlineExecutor, current_lane
from libs.telemetry import tracing
from libs.telemetry.metrics import WorkerMetrics

T = TypeVar("T")

HEARTBEAT_S: Final = 1.0
"""How often a stream whose next step waits in a busy worker's queue tells its gateway it is not forgotten."""

PROGRESS_CPU_S: Final = 0.02
"""CPU the worker's process spends, or its inference threads wait for ready to run, that counts as
much progress as a finished step. On a starved machine (a small CPU quota, a slow core shared by many
processes) one step can outlast the gateway's attempt timeout: the CPU it burns says the worker is
working. A step on a background thread (nice 19) beside busy threads of other processes burns little
(about 14 ms a second against one at nice 0), but it is ready to run all along: the kernel holds it
back, nothing is stuck. An idle or stuck process (threads waiting on a lock, a frozen one) neither
spends this nor waits for the CPU this long in a heartbeat."""

WAIT_READ_EVERY_S: Final = HEARTBEAT_S / 10
"""How long one reading of the inference threads' wait for the CPU serves `StepRunner.progress`. Every
step asks for progress as it starts (the heartbeats' baseline), and a reading is one /proc file per
thread, about a hundred times the cost of reusing one: read afresh for each step it would cost up to
a few percent of a small step. A tenth of a heartbeat old, it still shows a held-back step's wait
within the heartbeat."""


class StepRunner:
    """Runs model steps on `executor` and records their queue time, run time and CPU time in
    `metrics` and their cost in `costs`."""

    def __init__(self, executor: Executor, metrics: WorkerMetrics, costs: CostModel, batched: Callable[[], bool]) -> None:
        """`batched()` says whether the engine now runs its steps through a dynamic batcher (whose
        `on_batch` callback then reports queue time and batch size instead, and whose steps' CPU is
        the batcher's thread's, not the stream's)."""
        self.executor = executor
        self.costs = costs
        self._metrics = metrics
        self._batched = batched
        self._waited_read_at_s, self._waited_s = -math.inf, 0.0

    async def run(
        self,
        stage: str,
        units: float,
        function: Callable[..., T],
        *args: Any,
        deadline_s: float | None = None,
        first_audio: bool = False,
        starting: bool | None = None,
        rank_s: float | None = None,
        after_s: float = 0.0,
        span: str | None = None,
        span_attributes: Mapping[str, Any] | None = None,
        on_start: Callable[[float], None] | None = None,
    ) -> T:
        """`function(*args)` on the executor, as a model step of `stage` and size `units`.

        `deadline_s` (`time.monotonic()`; None: now) is when its listener needs the audio, and
        `after_s` what must follow the step before then; `starting` (default `first_audio`) a step that
        goes with first audios (libs.scheduling.stream.StreamPlayback.starting), ranked among them by
        `rank_s` (when its listener asked); `first_audio` marks, for the metrics, a step of a stream whose
        listener has heard nothing yet. `span` names a span around the step (child of the caller's
        current span) with `span_attributes` and what says how the step was scheduled (the
        ATTR_STEP_* attributes of libs.telemetry.tracing); `on_start` is called on the executor thread
        with the `time.perf_counter()` at which the step starts.
        """
        submitted_s = time.perf_counter()
        context = contextvars.copy_context()
        batched = self._batched()
        by_deadline = isinstance(self.executor, DeadlineExecutor)
        starting = first_audio if starting is None else starting
        estimate = self.costs.estimate(stage, units, after_s, starting) if by_deadline else NO_ESTIMATE
        due_s = time.monotonic() if deadline_s is None else deadline_s

        def timed() -> T:
            started_s, started_cpu_s = time.perf_counter(), time.thread_time()
            if on_start is not None:
                on_start(started_s)
            try:
                if span is None:
                    return context.run(function, *args)

                def facts() -> dict[str, Any]:
                    scheduled = {
                        **(span_attributes or {}),
                        tracing.ATTR_STEP_UNITS: float(units),
                        tracing.ATTR_STEP_LANE: current_lane(),
                        tracing.ATTR_STEP_STARTING: bool(starting),
                        tracing.ATTR_STEP_QUEUED_S: started_s - submitted_s,
                    }
                    if by_deadline:
                        scheduled[tracing.ATTR_STEP_SLACK_S] = due_s - estimate.lead_s - time.monotonic()
                    return scheduled

                return context.run(_in_span, span, facts, started_cpu_s, function, args)
            finally:
                wall_s, cpu_s = time.perf_counter() - started_s, time.thread_time() - started_cpu_s
                self._metrics.observe_step(stage, started_s - submitted_s, wall_s, batched)
                if not batched:
                    self._metrics.observe_step_cpu(stage, first_audio, cpu_s)
                    self.costs.observe(stage, units, cpu_s, wall_s, current_lane())

        if by_deadline:
            return await asyncio.wrap_future(self.executor.submit_by(due_s, timed, first_audio=starting, estimate=estimate, rank_s=rank_s))
        return await asyncio.get_running_loop().run_in_executor(self.executor, timed)

    def progress(self) -> float:
        """Work done so far, in finished steps: those the executor has finished (none counted by a plain
        executor), and the process's CPU and its inference threads' wait for the CPU in units of
        `PROGRESS_CPU_S` (a step still running on a slow core, or held back by the kernel for busier
        threads, is progress too)."""
        return getattr(self.executor, "completed", 0) + (time.process_time() + self._cpu_wait_s()) / PROGRESS_CPU_S

    def _cpu_wait_s(self) -> float:
        """The executor's threads' wait for the CPU, as read at most WAIT_READ_EVERY_S ago (0 for a plain executor)."""
        if not isinstance(self.executor, DeadlineExecutor):
            return 0.0
        now_s = time.monotonic()
        if now_s - self._waited_read_at_s >= WAIT_READ_EVERY_S:
            self._waited_read_at_s, self._waited_s = now_s, self.executor.cpu_wait_s()
        return self._waited_s


async def with_heartbeats(step: Awaitable[T], progress: Callable[[], float], every_s: float = HEARTBEAT_S) -> AsyncIterator[T | None]:
    """Yields None every `every_s` while `step` is still waiting, as long as the worker made progress
    (`progress()` grew by a step's worth, 1, since the last one); then the step's result. A worker
    that is busy but working tells its caller so; one whose threads are stuck says nothing."""
    task = asyncio.ensure_future(step)
    try:
        seen = progress()
        while True:
            done, _ = await asyncio.wait({task}, timeout=every_s)
            if done:
                yield task.result()
                return
            now = progress()
            if now - seen >= 1:
                seen = now
                yield None
    finally:
        if not task.done():
            task.cancel()


def _in_span(
    name: str, facts: Callable[[], Mapping[str, Any]], started_cpu_s: float, function: Callable[..., Any], args: tuple[Any, ...]
) -> Any:
    """`function(*args)` in a span `name`. A span the sampler keeps gets `facts()` as it starts and the
    CPU the step took (ATTR_STEP_CPU_S, from `started_cpu_s`, this thread's `time.thread_time()`) as it
    ends; one it drops (most requests') costs neither."""
    with tracing.step_span(name) as span:
        recording = span.is_recording()
        if recording:
            span.set_attributes(facts())
        try:
            return function(*args)
        finally:
            if recording:
                span.set_attribute(tracing.ATTR_STEP_CPU_S, time.thread_time() - started_cpu_s)
