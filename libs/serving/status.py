"""The one table that turns any error into the status a caller gets, at every door.

Servicers and HTTP routes never pick status codes themselves: they raise (or let through) domain
errors, `grpc_status_for` decides the gRPC code and the client-facing message, and an HTTP door
turns that code into its HTTP status and error type with `http_status_for` (`HTTP_STATUS`).
`field_of` says which request field an error is about, so a door can name it to the client.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
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


HTTP_STATUS: Final[Mapping[grpc.StatusCode, tuple[int, str]]] = {
    grpc.StatusCode.INVALID_ARGUMENT: (400, "invalid_request_error"),
    grpc.StatusCode.OUT_OF_RANGE: (400, "invalid_request_error"),
    grpc.StatusCode.NOT_FOUND: (404, "invalid_request_error"),
    # The request is fine but what it acts on is not in a state that allows it (a job that has not
    # succeeded has no audio; an idempotency key already used for another request).
    grpc.StatusCode.FAILED_PRECONDITION: (409, "invalid_request_error"),
    grpc.StatusCode.UNAUTHENTICATED: (401, "authentication_error"),
    grpc.StatusCode.PERMISSION_DENIED: (403, "permission_error"),
    grpc.StatusCode.RESOURCE_EXHAUSTED: (429, "rate_limit_error"),
    grpc.StatusCode.UNAVAILABLE: (503, "service_unavailable"),
    grpc.StatusCode.DEADLINE_EXCEEDED: (504, "timeout"),
}
"""The HTTP status and OpenAI error `type` of each gRPC status code a client can act on; any other
code is 500 `server_error` (`http_status_for`)."""
SERVER_ERROR: Final = (500, "server_error")


def http_status_for(code: grpc.StatusCode) -> tuple[int, str]:
    """The HTTP status and OpenAI error type an HTTP door answers for the gRPC status `code`."""
    return HTTP_STATUS.get(code, SERVER_ERROR)


def field_of(error: BaseException) -> str:
    """The request field `error` is about, by its name in the proto ("text", "voice", "speed"); ""
    when it is about no one field."""
    if isinstance(error, InvalidRequestError):
        return error.field
    if isinstance(error, TextError):
        return "text"
    if isinstance(error, UnknownVoiceError):
        return "voice"
    return ""


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
