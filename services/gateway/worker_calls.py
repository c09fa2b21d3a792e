"""What the gateway's resumable worker streams share: the deadline, reads that notice a silent
worker, turning a broken call into an `AttemptFailure`, and the error a client gets when no
attempt is left."""

from __future__ import annotations

import asyncio
import time
from typing import Any, Callable, Final

import grpc

from libs.mesh.admission import MODEL_VERSION_METADATA_KEY, STREAM_ACCEPTED_METADATA
from libs.mesh.errors import DownstreamError, NoWorkerError
from libs.mesh.worker_choice import AttemptFailure, Attempts
from libs.routing.retry import RetryDecision
from libs.telemetry.tracing import attempt_span
from services.gateway.routing_metrics import SHED_RETRY_BUDGET, SHED_WORKERS_SATURATED, RoutingMetrics


class Deadline:
    """The client's deadline, as an absolute monotonic time (or none)."""

    def __init__(self, timeout_s: float | None) -> None:
        self._at_s = None if timeout_s is None else time.monotonic() + timeout_s

    def remaining_s(self) -> float | None:
        """Seconds left (never negative), or None when the client set no deadline."""
        if self._at_s is None:
            return None
        return max(0.0, self._at_s - time.monotonic())


class WorkerSilent(Exception):
    """A worker that owed an answer said nothing for longer than the attempt timeout."""


class StreamEnded(Exception):
    """A worker closed its stream cleanly while it still owed work (e.g. it is draining for shutdown)."""


REFUSAL_STATUS_GRACE_S: Final = 0.2
"""How long a stream whose headers lack the admission header may take to show its refusal status."""
REFUSAL_STATUS_POLL_S: Final = 0.002


class StreamRefused(Exception):
    """The worker ended the call before accepting it (e.g. RESOURCE_EXHAUSTED at admission)."""


async def accepted(call: Any, timeout_s: float) -> str:
    """Wait until the worker has accepted the stream (it sends its headers on admission); returns the
    model version it named there ("" from a worker that names none).

    Writing before that can race a worker's immediate refusal, and gRPC core then fails the call as
    INTERNAL, losing the refusal's status and pushback hint; waiting costs one local round trip.
    """
    try:
        headers = await asyncio.wait_for(call.initial_metadata(), timeout_s)
    except asyncio.TimeoutError:
        raise WorkerSilent() from None
    if call.done():
        raise StreamRefused()
    named = {key: value for key, value in headers or ()}
    if STREAM_ACCEPTED_METADATA[0] in named:
        return str(named.get(MODEL_VERSION_METADATA_KEY, ""))
    # Headers without the admission header: a refusal (or a broken connection) whose status is a
    # moment behind, or a worker from before that header. Writing into the first would turn the
    # refusal into INTERNAL "Internal error from Core"; dropping the call before its status is in
    # would read as CANCELLED. So wait briefly for the status: a refusal ends the call at once.
    deadline_s = time.monotonic() + REFUSAL_STATUS_GRACE_S
    while time.monotonic() < deadline_s:
        await asyncio.sleep(REFUSAL_STATUS_POLL_S)
        if call.done():
            raise StreamRefused()
    return ""


CALL_ERRORS: Final = (grpc.aio.AioRpcError, asyncio.InvalidStateError, WorkerSilent, StreamEnded, StreamRefused)
"""What an operation on a worker call raises when the call (or the worker behind it) has failed."""


class CallReader:
    """Reads one call's messages while a `stalled` check decides when silence means a hung worker.

    The pending read survives the periodic checks (a cancelled read would cancel the whole call).
    """

    def __init__(self, call: Any) -> None:
        self._call = call
        self._pending: asyncio.Future[Any] | None = None

    async def read(self, stalled: Callable[[], bool], check_every_s: float) -> Any:
        """The next message (or grpc.aio.EOF); raises the call's error, or WorkerSilent once `stalled()`."""
        if self._pending is None:
            self._pending = asyncio.ensure_future(self._call.read())
        while True:
            done, _ = await asyncio.wait({self._pending}, timeout=check_every_s)
            if done:
                pending, self._pending = self._pending, None
                return pending.result()
            if stalled():
                raise WorkerSilent()

    def close(self) -> None:
        """Drop the pending read (call after cancelling the call)."""
        if self._pending is not None:
            self._pending.cancel()
            # Retrieve the outcome so asyncio does not log "exception was never retrieved".
            self._pending.add_done_callback(lambda future: future.cancelled() or future.exception())
            self._pending = None


def stop_if_cancelled(cancelled: bool) -> None:
    """Raise CancelledError for a worker stream whose `cancel()` has run.

    The task working the stream is being cancelled too, but asyncio.wait_for (Python 3.11) can
    swallow a cancellation that lands as the call it waits on ends; a failure seen after `cancel`
    must not be retried on a fresh call that nobody would ever end.
    """
    if cancelled:
        raise asyncio.CancelledError("the stream was cancelled")


def release(pool: Any, kind: str, call: Any, reader: CallReader | None, endpoint: Any) -> None:
    """Cancel a worker call (no-op for None), drop its pending read, and stop counting it on `endpoint`."""
    if call is None:
        return
    call.cancel()
    _end_requests(call)
    if reader is not None:
        reader.close()
    pool.table(kind).stream_finished(endpoint)


def _end_requests(call: Any) -> None:
    """Close the request side of a dropped call.

    Behind a client interceptor, grpc pumps a call's requests from a queue in a task of its own.
    `cancel()` on a call the worker has already ended stops nothing, so that task would wait on the
    queue until garbage collection destroys it pending (logged as "Task was destroyed but it is
    pending!"). Half-closing lets it finish; a call that cannot be half-closed any more has no pump.
    """
    done_writing = getattr(call, "done_writing", None)
    if done_writing is None:
        return
    task = asyncio.ensure_future(done_writing())
    task.add_done_callback(lambda done: done.cancelled() or done.exception())


async def failure_of(call: Any, error: BaseException, silence_s: float) -> AttemptFailure:
    """The AttemptFailure behind `error`, raised by an operation on `call` or by reading it."""
    if isinstance(error, WorkerSilent):
        return AttemptFailure(grpc.StatusCode.DEADLINE_EXCEEDED, f"no answer for {silence_s:.1f} s")
    if isinstance(error, StreamEnded):
        return AttemptFailure(grpc.StatusCode.UNAVAILABLE, "the stream ended before its work was done")
    if isinstance(error, grpc.aio.AioRpcError):
        return AttemptFailure(_transport_aware_code(error), error.details() or "", error.trailing_metadata())
    # A write on a call that has already ended (asyncio.InvalidStateError): the call has the status.
    try:
        code = await asyncio.wait_for(call.code(), 1.0)
        details = await call.details()
        trailers = await call.trailing_metadata()
    except (asyncio.TimeoutError, grpc.aio.AioRpcError, asyncio.CancelledError):
        return AttemptFailure(grpc.StatusCode.UNAVAILABLE, f"stream broke: {type(error).__name__}")
    if code is grpc.StatusCode.OK:
        code = grpc.StatusCode.UNAVAILABLE  # ended without finishing the work: as good as a broken stream
    return AttemptFailure(code, details or "", trailers)


# What gRPC core reports, as INTERNAL, when the connection under a stream breaks (the worker process
# died, or the stream was reset) without the worker ever sending a status. That is a lost worker,
# not a worker's verdict on the request, so it is handled like UNAVAILABLE.
_TRANSPORT_FAILURE_DETAILS: Final = ("Internal error from Core", "RST_STREAM", "Stream removed", "Socket closed")


def _transport_aware_code(error: grpc.aio.AioRpcError) -> grpc.StatusCode:
    details = error.details() or ""
    if error.code() is grpc.StatusCode.INTERNAL and any(marker in details for marker in _TRANSPORT_FAILURE_DETAILS):
        return grpc.StatusCode.UNAVAILABLE
    return error.code()


async def retry_after(pool: Any, attempts: Attempts, failed_zone: str, failure: AttemptFailure, delay_s: float,
                      resumed: bool) -> None:  # fmt: skip
    """Count and trace the retry (or mid-stream resume) `attempts` is about to make on `pool`, and
    wait its backoff. The span covers the wait; its attributes say which zone failed, why, and
    which attempt comes next."""
    reason = failure.code.name.lower()
    if resumed:
        pool.metrics.resumed(attempts.kind, failed_zone, reason)
    span_reason = f"resume:{reason}" if resumed else reason
    with attempt_span(attempts.kind, failed_zone, attempts.made + 1, span_reason, tracer_provider=pool.tracer_provider):
        await asyncio.sleep(delay_s)


def give_up(attempts: Attempts, decision: RetryDecision | None, metrics: RoutingMetrics) -> Exception:
    """The error the client gets when `attempts` cannot go on (`decision` None: no endpoint was left)."""
    failure = attempts.last_failure
    if failure is not None and failure.code is grpc.StatusCode.RESOURCE_EXHAUSTED:
        budget_spent = decision is not None and decision.reason == "budget"
        metrics.shed(SHED_RETRY_BUDGET if budget_spent else SHED_WORKERS_SATURATED)
        return DownstreamError(
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            f"every {attempts.kind} worker that could take this request is overloaded ({failure.details}); retry with backoff",
        )
    if failure is None:
        return NoWorkerError(f"no {attempts.kind} worker is available right now; retry shortly")
    why = "no other worker is available" if decision is None else f"not retried: {decision.reason}"
    return DownstreamError(failure.code, f"{attempts.kind} worker failed ({failure.details}); {why}")
