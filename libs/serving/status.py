"""The one table that turns any error into the gRPC status a caller gets.

Servicers never pick status codes themselves: they raise (or let through) domain errors, and
`grpc_status_for` decides the code and the client-facing message.
"""

from __future__ import annotations

import logging

import grpc

from libs.text.errors import TextError
from libs.voice.batching import Overloaded
from libs.voice.registry import UnknownVoiceError
from libs.wire.errors import DownstreamError, InvalidRequestError, ModelVersionMismatchError, NoWorkerError

_log = logging.getLogger(__name__)


def grpc_status_for(error: BaseException) -> tuple[grpc.StatusCode, str]:
    """The status code and message a client gets for `error`."""
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


async def abort_for(context: grpc.aio.ServicerContext, error: BaseException) -> None:
    """Abort the call with the status `grpc_status_for` gives `error` (raises, as context.abort does)."""
    code, message = grpc_status_for(error)
    await context.abort(code, message)
