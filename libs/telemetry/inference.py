"""A worker's model steps on its inference executor, timed into metrics and traced in the caller's trace.

`loop.run_in_executor` does not carry context variables into the thread, so a span started there
would begin a new trace; `InferenceRunner.run` runs the step in a copy of the caller's context.
"""

from __future__ import annotations

import asyncio
import contextvars
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Executor, Future
from typing import Any, Protocol, runtime_checkable

from libs.telemetry.metrics import WorkerMetrics
from libs.telemetry.tracing import step_span


@runtime_checkable
class DeadlineSubmitter(Protocol):
    """An executor that runs queued calls earliest deadline first (libs.serving.scheduling.DeadlineExecutor)."""

    def submit_by(self, deadline_s: float, fn: Callable[..., Any], /, *args: Any, first_audio: bool = False) -> Future: ...


class InferenceRunner:
    """Runs model steps on `executor` and records their queue time, run time and CPU time in `metrics`."""

    def __init__(self, executor: Executor, metrics: WorkerMetrics, batched: Callable[[], bool]) -> None:
        """`batched()` says whether the engine now runs its chunks through a dynamic batcher (whose
        `on_batch` callback then reports queue time and batch size instead)."""
        self._executor = executor
        self._metrics = metrics
        self._batched = batched

    async def run(
        self,
        stage: str,
        function: Callable[..., Any],
        *args: Any,
        span: str | None = None,
        span_attributes: Mapping[str, Any] | None = None,
        on_start: Callable[[float], None] | None = None,
        deadline_s: float | None = None,
        first_audio: bool = False,
    ) -> Any:
        """`function(*args)` on the executor, as model step `stage`.

        `span` names a span around the step (child of the caller's current span); `on_start` is
        called on the executor thread with the `time.perf_counter()` at which the step starts.
        `deadline_s` (`time.monotonic()`) orders the step among waiting ones on an executor that
        schedules by deadline; None means "now". `first_audio` marks a step of a stream whose listener
        has heard nothing yet (such an executor runs it before steps not about to run dry).
        """
        submitted_s = time.perf_counter()
        context = contextvars.copy_context()
        batched = self._batched()

        def timed() -> Any:
            started_s, started_cpu_s = time.perf_counter(), time.thread_time()
            if on_start is not None:
                on_start(started_s)
            try:
                if span is None:
                    return context.run(function, *args)
                return context.run(_in_span, span, span_attributes, function, args)
            finally:
                self._metrics.observe_step(stage, started_s - submitted_s, time.perf_counter() - started_s, batched)
                if not batched:
                    self._metrics.observe_step_cpu(stage, first_audio, time.thread_time() - started_cpu_s)

        if deadline_s is not None and isinstance(self._executor, DeadlineSubmitter):
            return await asyncio.wrap_future(self._executor.submit_by(deadline_s, timed, first_audio=first_audio))
        return await asyncio.get_running_loop().run_in_executor(self._executor, timed)


def _in_span(name: str, attributes: Mapping[str, Any] | None, function: Callable[..., Any], args: tuple[Any, ...]) -> Any:
    with step_span(name, attributes):
        return function(*args)
