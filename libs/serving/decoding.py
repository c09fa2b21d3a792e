"""A request that does not parse is INVALID_ARGUMENT naming what is wrong, on every server.

gRPC parses a request with the message class's `FromString`; when that raises (corrupt wire format,
a string field that is not UTF-8) it answers UNKNOWN with the parser's exception as text, which a
client cannot tell from a crash. `RequestDecodingInterceptor` gives every method whose request
parser is a message class's `FromString` the decoder of `libs.wire.request_decoding` instead, and
answers what it could not decode with INVALID_ARGUMENT and that decoder's reason (the field and
byte, or that the bytes are not the message). Handlers with a decoder of their own (the gateway's)
are left as they are.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
from google.protobuf.message import Message

from libs.wire.request_decoding import UndecodableRequest, request_decoder


class RequestDecodingInterceptor(grpc.aio.ServerInterceptor):
    """Swaps each handler's protobuf parser for one that never raises, and refuses what it could not parse."""

    def __init__(self) -> None:
        self._handlers: dict[str, grpc.RpcMethodHandler | None] = {}

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        if handler is None:  # no such method: nothing to cache, however many names a caller tries
            return handler
        method = handler_call_details.method
        if method not in self._handlers:  # a method's handler is the same for every call
            self._handlers[method] = _decoding(handler)
        return self._handlers[method] or handler


def _decoding(handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler | None:
    """`handler` with the safe decoder, or None when it has no message-class parser to replace."""
    message_type = getattr(handler.request_deserializer, "__self__", None)
    if not (isinstance(message_type, type) and issubclass(message_type, Message)):
        return None
    decode = request_decoder(message_type)
    if handler.unary_unary is not None:
        return handler._replace(request_deserializer=decode, unary_unary=_unary(handler.unary_unary))
    if handler.unary_stream is not None:
        return handler._replace(request_deserializer=decode, unary_stream=_unary(handler.unary_stream))
    if handler.stream_unary is not None:
        return handler._replace(request_deserializer=decode, stream_unary=_streamed(handler.stream_unary))
    return handler._replace(request_deserializer=decode, stream_stream=_streamed(handler.stream_stream))


async def _refuse(request: Any, context: grpc.aio.ServicerContext) -> None:
    if isinstance(request, UndecodableRequest):
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, request.reason)


def _unary(behaviour: Callable[..., Any]) -> Callable[..., Any]:
    if inspect.isasyncgenfunction(behaviour):

        async def responses(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            await _refuse(request, context)
            async for response in behaviour(request, context):
                yield response

        return responses

    async def response(request: Any, context: grpc.aio.ServicerContext) -> Any:
        await _refuse(request, context)
        return await behaviour(request, context)

    return response


async def _checked(requests: AsyncIterator[Any], context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
    async for request in requests:
        await _refuse(request, context)
        yield request


def _streamed(behaviour: Callable[..., Any]) -> Callable[..., Any]:
    if inspect.isasyncgenfunction(behaviour):

        async def responses(requests: AsyncIterator[Any], context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            async for response in behaviour(_checked(requests, context), context):
                yield response

        return responses

    async def response(requests: AsyncIterator[Any], context: grpc.aio.ServicerContext) -> Any:
        return await behaviour(_checked(requests, context), context)

    return response
