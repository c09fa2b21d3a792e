"""One gRPC call to a worker, as the gateway sees it: the client's deadline, the worker's admission
headers, reads that notice a silent worker, and what a broken call's failure was."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import grpc

from libs.routing.attempts import AttemptFailure
from libs.wire.headers import (
    FAST_MODEL_VERSION_METADATA_KEY,
    MODEL_VERSION_METADATA_KEY,
    STREAM_ACCEPTED_METADATA,
    STREAM_LIMIT_METADATA_KEY,
)


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
"""How often the call is looked at within REFUSAL_STATUS_GRACE_S: a refusal is seen within this of its status."""


class StreamRefused(Exception):
    """The worker ended the call before accepting it (e.g. RESOURCE_EXHAUSTED at admission)."""


@dataclass(frozen=True)
class Accepted:
    """What a worker said when it admitted a stream."""

    model_version: str = ""
    """The model the stream runs on ("" from a worker that names none)."""
    stream_limit: int | None = None
    """Streams the worker takes at once (0: no limit; None: it did not say)."""
    fast_model_version: str = ""
    """A vocoder's: the model of its voice's fast tier ("": it has none, or did not say)."""


def _stream_limit(value: str | None) -> int | None:
    try:
        return max(0, int(value)) if value is not None else None
    except ValueError:
        return None


async def accepted(call: Any, timeout_s: float) -> Accepted:
    """Wait until the worker has accepted the stream (it sends its headers on admission); returns
    what it said there.

    Writing before that can race a worker's immediate refusal, and gRPC core then fails the call as
    INTERNAL, losing the refusal's status and pushback hint; waiting costs one local round trip.
    """
    try:
        async with asyncio.timeout(timeout_s):
            headers = await call.initial_metadata()
    except TimeoutError:
        raise WorkerSilent() from None
    if call.done():
        raise StreamRefused()
    named = dict(headers or ())
    if STREAM_ACCEPTED_METADATA[0] in named:
        return Accepted(
            str(named.get(MODEL_VERSION_METADATA_KEY, "")),
            _stream_limit(named.get(STREAM_LIMIT_METADATA_KEY)),
            str(named.get(FAST_MODEL_VERSION_METADATA_KEY, "")),
        )
    # Headers without the admission header: a refusal (or a broken connection) whose status is a
    # moment behind, or a worker from before that header. Writing into the first would turn the
    # refusal into INTERNAL "Internal error from Core"; dropping the call before its status is in
    # would read as CANCELLED. So wait briefly for the status: a refusal ends the call at once.
    deadline_s = time.monotonic() + REFUSAL_STATUS_GRACE_S
    while time.monotonic() < deadline_s:
        await asyncio.sleep(REFUSAL_STATUS_POLL_S)
        if call.done():
            raise StreamRefused()
    return Accepted()


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
        async with asyncio.timeout(1.0):
            code = await call.code()
        details = await call.details()
        trailers = await call.trailing_metadata()
    except (TimeoutError, grpc.aio.AioRpcError, asyncio.CancelledError):
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
