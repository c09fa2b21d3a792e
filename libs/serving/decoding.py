"""A request that does not parse is INVALID_ARGUMENT naming what is wrong, on every server.

gRPC parses a request with the message class's `FromString`; when that raises (corrupt wire format,
a string field that is not UTF-8) it answers UNKNOWN with the parser's exception as text, which a
client cannot tell from a crash. `RequestDecodingInterceptor` gives every method whose request
parser is a message class's `FromString` the decoder of `libs.wire.request_decoding` instead, and
answers what it could not decode with INVALID_ARGUMENT and that decoder's reason (the field and
byte, or that the bytes are not the message). Handlers with a decoder of their own (the gateway's)
keep it, and answer what it could not decode themselves.

A call of a method that takes one request message can also end before that message is whole: its
request stream closes with no message, or with the first bytes of one (a client or proxy that cut
it short). gRPC's asyncio server then runs no handler and sends no status, so the call hangs until
the client gives up. The interceptor serves every such method as one that takes a stream of
requests and reads its first message itself: a call whose requests end before one is whole gets
INVALID_ARGUMENT at once. On the wire nothing changes; a whole request is handled as before.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import aclosing
from typing import Any, Final

import grpc
from google.protobuf.message import Message

from libs.wire.request_decoding import UndecodableRequest, request_decoder

NO_WHOLE_REQUEST: Final = "the call's request ended before one whole request message arrived; send the request message complete"


class RequestDecodingInterceptor(grpc.aio.ServerInterceptor):
    """Swaps each handler's protobuf parser for one that never raises, refuses what it could not
    parse, and answers a call whose one request message never arrived whole."""

    def __init__(self) -> None:
        self._handlers: dict[str, tuple[grpc.RpcMethodHandler, grpc.RpcMethodHandler]] = {}
        """Per method, the handler last given and what it became. Inner interceptors may give a
        handler of each call's own (the API-key check's: refusing, or charging the caller's key), so
        what a handler became is reused only for that same handler, never for the method."""

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        if handler is None:  # no such method: nothing to cache, however many names a caller tries
            return handler
        method = handler_call_details.method
        given, guarded = self._handlers.get(method, (None, None))
        if given is not handler or guarded is None:
            guarded = _guarded(handler)
            self._handlers[method] = (handler, guarded)
        return guarded


def _guarded(handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
    """`handler` with the safe decoder where it has a message-class parser (what it cannot decode
    refused), and, where it takes one request message, served as a request stream whose first
    message it reads itself (a stream that ends before one is whole refused). Handlers that are not
    asyncio functions are left as they are."""
    behaviour = handler.unary_unary or handler.unary_stream or handler.stream_unary or handler.stream_stream
    if not _is_async(behaviour):
        return handler
    message_type = getattr(handler.request_deserializer, "__self__", None)
    decodes = isinstance(message_type, type) and issubclass(message_type, Message)
    if decodes:
        handler = handler._replace(request_deserializer=request_decoder(message_type))
    single = handler.unary_unary or handler.unary_stream
    if single is not None:
        take = _first_refused if decodes else _first
        if handler.unary_unary is not None:
            return handler._replace(request_streaming=True, unary_unary=None, stream_unary=_adapted(single, take))
        return handler._replace(request_streaming=True, unary_stream=None, stream_stream=_adapted(single, take))
    if not decodes:
        return handler
    if handler.stream_unary is not None:
        return handler._replace(stream_unary=_adapted(handler.stream_unary, _checked_stream))
    return handler._replace(stream_stream=_adapted(handler.stream_stream, _checked_stream))


def _is_async(behaviour: Callable[..., Any]) -> bool:
    return inspect.iscoroutinefunction(behaviour) or inspect.isasyncgenfunction(behaviour)


async def _refuse(request: Any, context: grpc.aio.ServicerContext) -> None:
    if isinstance(request, UndecodableRequest):
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, request.reason)


async def _first(requests: AsyncIterator[Any], context: grpc.aio.ServicerContext) -> Any:
    async for request in requests:
        return request
    await context.abort(grpc.StatusCode.INVALID_ARGUMENT, NO_WHOLE_REQUEST)


async def _first_refused(requests: AsyncIterator[Any], context: grpc.aio.ServicerContext) -> Any:
    request = await _first(requests, context)
    await _refuse(request, context)
    return request


async def _checked(requests: AsyncIterator[Any], context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
    async for request in requests:
        await _refuse(request, context)
        yield request


async def _checked_stream(requests: AsyncIterator[Any], context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
    """`requests` with what could not be decoded refused as it comes (an argument for `_adapted`)."""
    return _checked(requests, context)


def _adapted(behaviour: Callable[..., Any], argument: Callable[..., Awaitable[Any]]) -> Callable[..., Any]:
    """`behaviour` as a request-stream handler that passes it `await argument(requests, context)`;
    an async generator's responses are closed in the call's own task however the call ends."""
    if inspect.isasyncgenfunction(behaviour):

        async def responses(requests: AsyncIterator[Any], context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            async with aclosing(behaviour(await argument(requests, context), context)) as inner:
                async for response in inner:
                    yield response

        return responses

    async def response(requests: AsyncIterator[Any], context: grpc.aio.ServicerContext) -> Any:
        return await behaviour(await argument(requests, context), context)

    return response
