"""The one table that turns any error into the gRPC status a caller gets.

Servicers never pick status codes themselves: they raise (or let through) domain errors, and
`grpc_status_for` decides the code and the client-facing message.
"""

from __future__ import annotations

import logging
import math
from typing import Final

import grpc

from libs.text.errors import TextError
from libs.voice.batching import Overloaded
from libs.voice.registry import UnknownVoiceError
from libs.wire.errors import DownstreamError, InvalidRequestError, ModelVersionMismatchError, NoWorkerError, shortened
from libs.wire.headers import PUSHBACK_METADATA_KEY

_log = logging.getLogger(__name__)


MAX_MESSAGE_CHARS: Final = 1024
"""Longest status message sent: the messages say what to fix in a line or two, and one that carries
more (a worker's, relayed) is cut rather than sent whole."""


def grpc_status_for(error: BaseException) -> tuple[grpc.StatusCode, str]:
    """The status code and message a client gets for `error`."""
    code, message = _status_for(error)
    return code, shortened(message, MAX_MESSAGE_CHARS)


def _status_for(error: BaseException) -> tuple[grpc.StatusCode, str]:
    if isinstance(error, (InvalidRequestError, TextError)):
        return grpc.StatusCode.INVALID_ARGUMENT, str(error)
    if isinstance(error, UnknownVoiceError):
        return grpc.StatusCode.NOT_FOUND, str(error)
    if isinstance(error, ModelVersionMismatchError):
        return grpc.StatusCode.FAILED_PRECONDITION, str(error)
    if isinstance(error, NoWorkerError):
        return grpc.StatusCode.UNAVAILABLE, str(error)
    if isinstance(error, DownstreamError):
        return error.code, str(error)
    if isinstance(error, Overloaded):  # a worker's inference queue filled after the stream was admitted
        return grpc.StatusCode.RESOURCE_EXHAUSTED, str(error)
    if isinstance(error, grpc.aio.AioRpcError):
        return error.code(), f"downstream call failed: {error.details()}"
    # Anything else is a bug: log it with its traceback, and do not leak internals to the client.
    _log.error("internal error", exc_info=error)
    return grpc.StatusCode.INTERNAL, "internal error; see the server log"


def retry_after_s(error: BaseException) -> float | None:
    """When a caller refused with `error` may retry and find room (None: not said)."""
    return getattr(error, "retry_after_s", None) if isinstance(error, DownstreamError) else None


async def abort_for(context: grpc.aio.ServicerContext, error: BaseException) -> None:
    """Abort the call with the status `grpc_status_for` gives `error` (raises, as context.abort does);
    a refusal that says when to retry carries it as `grpc-retry-pushback-ms`."""
    code, message = grpc_status_for(error)
    after_s = retry_after_s(error)
    trailers = ((PUSHBACK_METADATA_KEY, str(max(1, math.ceil(after_s * 1000)))),) if after_s is not None else ()
    await context.abort(code, message, trailing_metadata=trailers)
