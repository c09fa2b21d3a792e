"""The lifecycle both of the gateway's worker streams share: one utterance's call to one kind of
worker that survives the worker.

A `ResumableCall` opens its call on the endpoint its `Attempts` chooses and waits for the worker to
admit it; watches for silence while the worker owes an answer; when the call breaks, classifies the
failure, and either backs off and lets its subclass reopen (a retry, or a resume once the client
has audio) or raises the error the client gets; and releases the call when it is done, failed or
cancelled. The subclasses say only what is particular to them: which RPC to start, what the
worker owes when, and what a reopened call must be sent again (docs/ARCHITECTURE.md, "Exact
streaming and resume").
"""

from __future__ import annotations

import asyncio
import logging
import time
from abc import ABC, abstractmethod
from typing import Any, ClassVar

import grpc

from libs.routing.attempts import AttemptFailure, Attempts
from libs.routing.endpoints import Endpoint
from libs.routing.retry import RetryDecision, parse_pushback
from libs.telemetry.tracing import attempt_span
from libs.upstream.calls import CALL_ERRORS, CallReader, Deadline, accepted, failure_of
from libs.upstream.metrics import SHED_RETRY_BUDGET, SHED_WORKERS_SATURATED
from libs.upstream.playback import PlaybackClock
from libs.upstream.pool import WorkerPool
from libs.wire.errors import DownstreamError, NoWorkerError
from libs.wire.headers import ANNOUNCES_END_METADATA, LISTENING_METADATA

_log = logging.getLogger(__name__)

CLOSE_TIMEOUT_S = 1.0
"""How long a clean close waits for the worker to finish its side of the call."""


class ResumableCall(ABC):
    """One utterance's stream to a `kind` worker, reopened on another worker when it fails."""

    kind: ClassVar[str]
    """"acoustic" or "vocoder"."""

    def __init__(self, pool: WorkerPool, deadline: Deadline, attempts: Attempts) -> None:
        self._pool = pool
        self._deadline = deadline
        self._timeout_s = pool.settings.attempt_timeout_s
        self.attempts = attempts
        """Endpoint choice and retry decisions for the piece of work in progress."""
        self._call: Any = None  # a grpc.aio.StreamStreamCall while one is open
        self._reader: CallReader | None = None
        self._endpoint: Endpoint | None = None
        self.model_version = ""
        """Model version the current call's worker named ("" before a call, or when it named none)."""
        self.fast_model_version = ""
        """A vocoder's: its voice's fast tier's model version ("" before a call, or when it has none)."""
        self._owed_since_s: float | None = None
        """Since when the worker owes an answer (None: it owes nothing, so its silence is fine)."""
        self._progressed = False
        """Whether the client has audio of this utterance: from then on a reopen is a resume."""
        self._clock: PlaybackClock | None = None
        """The listener's clock, where the stream has one (set by the kinds that take it)."""
        self._under_way = False
        """Whether earlier sentences of the utterance are on their way to the listener without this
        stream (served from the cache before any call was opened)."""
        self._free_resume_spent = False
        """Whether this stream has had its one resume outside the retry budget (see `_recover`)."""
        self._cancelled = False

    @abstractmethod
    def _start(self, endpoint: Endpoint, timeout_s: float | None) -> Any:
        """Start this stream's RPC on `endpoint` (the client's remaining deadline as its timeout)."""

    @abstractmethod
    def _end_request(self) -> Any:
        """This stream's request marked `end`: the last one, which carries nothing else."""

    async def _announce_end(self, call: Any) -> None:
        """Send `call` the request marked `end` and half-close it: the worker knows the half-close for a
        clean end, and not a cancellation on its way, and ends the stream without waiting."""
        await call.write(self._end_request())
        await call.done_writing()

    @abstractmethod
    def _position(self) -> str:
        """Where in the utterance the stream is, for logs ("in sentence 2 at frame 40")."""

    def _owed_on_open(self) -> float | None:
        """`_owed_since_s` for a call that has just been started."""
        return None

    def _open_metadata(self, metadata: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
        """`metadata` for a new call, which announces its end (`_announce_end`, ANNOUNCES_END_METADATA), marked
        LISTENING_METADATA once the listener has audio of the utterance, or has it coming: from its
        worker, or from the cache before any call was opened."""
        clock = self._clock
        listening = self._progressed or self._under_way or (clock is not None and clock.started)
        metadata = (*metadata, ANNOUNCES_END_METADATA)
        return (*metadata, LISTENING_METADATA) if listening else metadata

    def cancel(self) -> None:
        """Cancel the call at once (client gone or utterance failed); the stream never reopens."""
        self._cancelled = True
        self._drop()

    async def close(self) -> None:
        """Announce the last request and half-close the call (the worker then ends it cleanly at
        once), and stop counting it."""
        call = self._call
        if call is None:
            return
        try:
            async with asyncio.timeout(CLOSE_TIMEOUT_S):
                await self._announce_end(call)
            # Let the worker finish its handler (its last metrics, an OK status) before the call is
            # dropped: dropping cancels it, and it would end as CANCELLED mid-bookkeeping.
            async with asyncio.timeout(CLOSE_TIMEOUT_S):
                await call.code()
        except (TimeoutError, *CALL_ERRORS):
            pass
        self._drop()

    async def ready(self) -> None:
        """Open the call now (as the first use would), retrying elsewhere like any failed attempt."""
        while self._call is None:
            try:
                await self._open()
            except CALL_ERRORS as error:
                await self._recover(error)

    async def _open(self) -> None:
        """Start a call on the best endpoint and wait until its worker admits it."""
        self._stop_if_cancelled()
        endpoint = self.attempts.choose()
        if endpoint is None:
            raise self._give_up(None)
        self._call = self._start(endpoint, self._deadline.remaining_s())
        self._reader = CallReader(self._call)
        self._endpoint = endpoint
        self._pool.table(self.kind).stream_started(endpoint)
        self._owed_since_s = self._owed_on_open()
        admitted = await accepted(self._call, self._timeout_s)
        if self._cancelled:  # cancelled while it opened: nobody would close it
            self._drop()
            raise asyncio.CancelledError("the stream was cancelled")
        self.model_version = admitted.model_version
        self.fast_model_version = admitted.fast_model_version
        if admitted.stream_limit is not None:
            self._pool.table(self.kind).set_stream_limit(endpoint, admitted.stream_limit)

    async def _read(self) -> Any:
        """The call's next message (or grpc.aio.EOF); WorkerSilent once the worker has owed an answer
        for longer than the attempt timeout while this read waited for it."""
        assert self._reader is not None
        reading_since_s = time.monotonic()
        return await self._reader.read(lambda: self._silent_too_long(reading_since_s), check_every_s=self._timeout_s / 4)

    def _silent_too_long(self, reading_since_s: float) -> bool:
        """Whether the worker owes an answer and has been silent past the attempt timeout since
        `reading_since_s`. Time before the read began is not the worker's silence: the gateway was
        not reading (its own client was not, and flow control held the worker back), and whatever
        the worker sent meanwhile waits to be read."""
        owed_since_s = self._owed_since_s
        return owed_since_s is not None and time.monotonic() - max(owed_since_s, reading_since_s) > self._timeout_s

    async def _recover(self, error: BaseException) -> None:
        """After `error` broke the call: drop it, and wait out the backoff before a retry or resume
        on another worker, or raise the error the client gets."""
        call, endpoint = self._call, self._endpoint
        self._drop()  # cancels the call first, so a writer blocked on it lets go
        if endpoint is None:  # no call was open: the error is not a worker's
            raise error
        self._stop_if_cancelled()
        failure = await failure_of(call, error, self._timeout_s)
        self._stop_if_cancelled()
        # A stream its listener already hears, whose worker went away (UNAVAILABLE: the connection
        # broke), may resume once without a retry token: the work was admitted and its worker no
        # longer carries it, so moving it adds no load, and a worker's death must not cost the
        # streams it held once more of them than the budget holds tokens. A second resume is a retry
        # like any other, so an input that kills every worker it reaches is stopped by the budget.
        free = self._progressed and not self._free_resume_spent and failure.code is grpc.StatusCode.UNAVAILABLE
        decision = self.attempts.failed(endpoint, failure, self._deadline.remaining_s(), budgeted=not free)
        if free and decision.retry:
            self._free_resume_spent = True
        _log.warning(
            "%s stream on %s failed %s: %s %s; %s",
            self.kind, endpoint, self._position(), failure.code.name, failure.details,
            f"retrying in {decision.delay_s:.3f} s" if decision.retry else f"giving up ({decision.reason})",
        )  # fmt: skip
        if not decision.retry:
            raise self._give_up(decision)
        await self._back_off(endpoint.zone, failure, decision.delay_s)

    async def _back_off(self, failed_zone: str, failure: AttemptFailure, delay_s: float) -> None:
        """Count and trace the retry (or resume) about to be made, and wait its backoff. The span
        covers the wait; its attributes say which zone failed, why, and which attempt comes next."""
        reason = failure.code.name.lower()
        if self._progressed:
            self._pool.metrics.resumed(self.kind, failed_zone, reason)
        span_reason = f"resume:{reason}" if self._progressed else reason
        with attempt_span(self.kind, failed_zone, self.attempts.made + 1, span_reason, tracer_provider=self._pool.tracer_provider):
            await asyncio.sleep(delay_s)

    def _give_up(self, decision: RetryDecision | None) -> Exception:
        """The error the client gets when no attempt is left (`decision` None: no endpoint was left).

        A piece of work whose workers are all used up after one of them refused it for room (say its
        stream broke on the worker that did take it, and the one that had refused is the only one
        left) is shed as pushback too: the mesh is full, not broken, and the client should back off."""
        failure = self.attempts.last_failure
        refused = self.attempts.refusal if decision is None else None
        if failure is not None and failure.code is grpc.StatusCode.RESOURCE_EXHAUSTED:
            refused = failure
        if refused is not None:
            budget_spent = decision is not None and decision.reason == "budget"
            self._pool.metrics.shed(SHED_RETRY_BUDGET if budget_spent else SHED_WORKERS_SATURATED)
            broke = f"; its stream broke on another ({failure.details})" if failure is not refused and failure is not None else ""
            pushback = parse_pushback(refused.trailers)
            return DownstreamError(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"every {self.kind} worker that could take this request is overloaded ({refused.details}){broke}; retry with backoff",
                # The worker's pushback is the client's hint: a 429 then says Retry-After, a gRPC refusal its pushback.
                retry_after_s=pushback.delay_s if pushback is not None else None,
            )
        if failure is None:
            return NoWorkerError(f"no {self.kind} worker is available right now; retry shortly")
        why = "no other worker is available" if decision is None else f"not retried: {decision.reason}"
        return DownstreamError(failure.code, f"{self.kind} worker failed ({failure.details}); {why}")

    def _stop_if_cancelled(self) -> None:
        """Raise CancelledError once `cancel()` has run.

        The task working the stream is being cancelled too, but a cancellation that lands as the call
        it waits on ends can be lost on the way (Python 3.11's asyncio.wait_for did; this code waits
        with asyncio.timeout instead); a failure seen after `cancel` must not be retried on a fresh
        call that nobody would ever end.
        """
        if self._cancelled:
            raise asyncio.CancelledError("the stream was cancelled")

    def _drop(self) -> None:
        """Cancel the call (if any), drop its pending read, and stop counting it on its endpoint."""
        call = self._call
        if call is not None:
            call.cancel()
            _end_requests(call)
            if self._reader is not None:
                self._reader.close()
            self._pool.table(self.kind).stream_finished(self._endpoint)  # type: ignore[arg-type]
        self._call = self._reader = self._endpoint = None


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
