"""A worker's admission over real gRPC: past its real-time capacity it refuses a new stream, but a stream
opened for an utterance whose listener already hears it (the gateway's LISTENING_METADATA: a cached
first sentence, or a stream moved from another worker) is admitted past the real-time checks, since
refusing it would cut the listener off mid-utterance; the hard stream limit still applies."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import grpc
import pytest

from libs.serving.admission import Admission, AdmissionSettings
from libs.wire.headers import LISTENING_METADATA
from tests.support.servers import aio_server

METHOD = "/test.Worker/Stream"


async def _serve(admission: Admission) -> tuple[grpc.aio.Server, str]:
    async def stream(requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext) -> AsyncIterator[bytes]:
        await admission.admit(context, object())
        async for request in requests:
            yield request

    handler = grpc.method_handlers_generic_handler(
        "test.Worker", {"Stream": grpc.stream_stream_rpc_method_handler(stream)}
    )
    server = aio_server()
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, f"127.0.0.1:{port}"


async def _opened(channel: grpc.aio.Channel, listening: bool) -> tuple[grpc.aio.StreamStreamCall, str]:
    """A stream that has sent one message and read its echo: "admitted", or the refusal's code."""
    call = channel.stream_stream(METHOD)(metadata=(LISTENING_METADATA,) if listening else (), timeout=30)
    try:
        # A refusal can end the call before the write: the write then raises the refusal itself.
        await call.write(b"x")
        await call.read()
        return call, "admitted"
    except grpc.aio.AioRpcError as error:
        return call, error.code().name


@pytest.mark.parametrize("max_streams", [0, 2])
async def test_a_listening_stream_is_admitted_past_the_real_time_checks_but_not_past_the_hard_limit(max_streams: int) -> None:
    # Room for one listener: 0.5 audio s per s, used at 100%, overcommitted twice.
    settings = AdmissionSettings(max_streams=max_streams, realtime_capacity=0.5, realtime_headroom=1.0, realtime_overcommit=2.0)
    admission = Admission(settings)
    server, address = await _serve(admission)
    try:
        async with grpc.aio.insecure_channel(address) as channel:
            held, first = await _opened(channel, listening=False)
            _, new_one = await _opened(channel, listening=False)
            listening, resumed = await _opened(channel, listening=True)
            _, past_the_limit = await _opened(channel, listening=True)
            for call in (held, listening):
                call.cancel()
            await asyncio.sleep(0.1)
    finally:
        await server.stop(None)
    assert (first, new_one, resumed) == ("admitted", "RESOURCE_EXHAUSTED", "admitted")
    assert past_the_limit == ("RESOURCE_EXHAUSTED" if max_streams == 2 else "admitted")
