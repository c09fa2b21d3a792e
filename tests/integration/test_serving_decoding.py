"""A request whose bytes do not parse gets INVALID_ARGUMENT naming what is wrong, from any server that
registers the generated stubs (the workers), not gRPC's UNKNOWN with a parser's exception; a call of a
one-request method whose request stream ends before the message is whole (none sent, or its first
bytes only, as raw HTTP/2 lets a client do) gets INVALID_ARGUMENT at once instead of hanging."""

from __future__ import annotations

import asyncio
import socket
import struct
from collections.abc import AsyncIterator

import grpc
import h2.config
import h2.connection
import h2.events
import pytest

from libs.pb.tts.acoustic.v1 import acoustic_pb2, acoustic_pb2_grpc
from libs.pb.tts.common.v1 import mel_pb2
from libs.serving.decoding import NO_WHOLE_REQUEST, RequestDecodingInterceptor
from tests.support.servers import aio_server

BAD_UTF8_VOICE = b"\x22\x02\xc3\x28"  # field 4 (voice), two bytes that are not UTF-8
CORRUPT = b"\x1a\xff\xff\xff\x0f"  # a length that runs far past the message


class _Acoustic(acoustic_pb2_grpc.AcousticServicer):
    async def SynthesizeMel(
        self, request_iterator: AsyncIterator[acoustic_pb2.SentenceRequest], context
    ) -> AsyncIterator[mel_pb2.MelSlices]:
        async for request in request_iterator:
            yield mel_pb2.MelSlices(slices=[mel_pb2.MelSlice(utterance_id=request.utterance_id)])

    async def GetModelInfo(self, request: acoustic_pb2.GetModelInfoRequest, context) -> acoustic_pb2.ModelInfo:
        return acoustic_pb2.ModelInfo(model_version="v1")


@pytest.fixture()
async def address() -> AsyncIterator[str]:
    server = aio_server(interceptors=[RequestDecodingInterceptor()])
    acoustic_pb2_grpc.add_AcousticServicer_to_server(_Acoustic(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        await server.stop(None)


async def _stream(address: str, messages: list[bytes]) -> list[bytes] | grpc.aio.AioRpcError:
    async with grpc.aio.insecure_channel(address) as channel:
        try:
            return [
                answer
                async for answer in channel.stream_stream("/tts.acoustic.v1.Acoustic/SynthesizeMel")(iter(messages), timeout=10)
            ]
        except grpc.aio.AioRpcError as error:
            return error


async def test_a_string_field_that_is_not_utf8_is_invalid_argument_naming_the_field(address: str) -> None:
    good = acoustic_pb2.SentenceRequest(utterance_id="u").SerializeToString()
    outcome = await _stream(address, [good, BAD_UTF8_VOICE])
    assert isinstance(outcome, grpc.aio.AioRpcError)
    assert outcome.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "field `voice` is not valid UTF-8: byte 0xc3" in outcome.details()


async def test_corrupt_bytes_are_invalid_argument_for_streams_and_unary_calls(address: str) -> None:
    outcome = await _stream(address, [CORRUPT])
    assert isinstance(outcome, grpc.aio.AioRpcError) and outcome.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "not a valid tts.acoustic.v1.SentenceRequest" in outcome.details()
    async with grpc.aio.insecure_channel(address) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await channel.unary_unary("/tts.acoustic.v1.Acoustic/GetModelInfo")(CORRUPT, timeout=10)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_valid_requests_pass_untouched(address: str) -> None:
    outcome = await _stream(address, [acoustic_pb2.SentenceRequest(utterance_id="kept").SerializeToString()])
    assert not isinstance(outcome, grpc.aio.AioRpcError)
    assert mel_pb2.MelSlices.FromString(outcome[0]).slices[0].utterance_id == "kept"
    async with grpc.aio.insecure_channel(address) as channel:
        info = await channel.unary_unary("/tts.acoustic.v1.Acoustic/GetModelInfo")(b"", timeout=10)
    assert acoustic_pb2.ModelInfo.FromString(info).model_version == "v1"


def _raw_call(address: str, path: str, body: bytes, wait_s: float = 10.0) -> dict[str, str] | None:
    """The trailers of one gRPC call sent as raw HTTP/2 with `body` as its whole request stream (None:
    no status within `wait_s`)."""
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=wait_s) as sock:
        connection = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        connection.initiate_connection()
        stream = connection.get_next_available_stream_id()
        headers = [(":method", "POST"), (":path", path), (":scheme", "http"), (":authority", address),
                   ("content-type", "application/grpc"), ("te", "trailers")]  # fmt: skip
        connection.send_headers(stream, headers)
        connection.send_data(stream, body, end_stream=True)
        sock.sendall(connection.data_to_send())
        fields: dict[str, str] = {}
        try:
            while data := sock.recv(65536):
                for event in connection.receive_data(data):
                    if isinstance(event, (h2.events.ResponseReceived, h2.events.TrailersReceived)):
                        fields.update({bytes(k).decode(): bytes(v).decode() for k, v in event.headers})
                    if isinstance(event, h2.events.StreamEnded):
                        return fields
                sock.sendall(connection.data_to_send())
        except TimeoutError:
            return None
    return None


@pytest.mark.parametrize(
    "body",
    [b"", b"\x00" + struct.pack(">I", 5), b"\x00" + struct.pack(">I", 5) + b"abc"],
    ids=["no message", "a prefix only", "a message cut short"],
)
@pytest.mark.parametrize("path", ["/tts.acoustic.v1.Acoustic/GetModelInfo", "/grpc.health.v1.Health/Check"])
async def test_a_request_that_never_arrives_whole_is_answered_not_left_hanging(path: str, body: bytes) -> None:
    from grpc_health.v1 import health, health_pb2_grpc

    server = aio_server(interceptors=[RequestDecodingInterceptor()])
    acoustic_pb2_grpc.add_AcousticServicer_to_server(_Acoustic(), server)
    health_pb2_grpc.add_HealthServicer_to_server(health.aio.HealthServicer(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        trailers = await asyncio.to_thread(_raw_call, f"127.0.0.1:{port}", path, body)
    finally:
        await server.stop(None)
    assert trailers is not None, "the call was left hanging"
    assert trailers.get("grpc-status") == str(grpc.StatusCode.INVALID_ARGUMENT.value[0])
    assert NO_WHOLE_REQUEST.split(";")[0] in trailers.get("grpc-message", "").replace("%20", " ")


class _Doorman(grpc.aio.ServerInterceptor):
    """An inner interceptor that gives each call a handler of its own, as the API-key check does."""

    async def intercept_service(self, continuation, handler_call_details):  # type: ignore[no-untyped-def]
        handler = await continuation(handler_call_details)
        if ("x-let-in", "yes") in (handler_call_details.invocation_metadata or ()):
            return handler

        async def refuse(request, context):  # type: ignore[no-untyped-def]
            await context.abort(grpc.StatusCode.PERMISSION_DENIED, "not let in")

        return grpc.unary_unary_rpc_method_handler(refuse, request_deserializer=handler.request_deserializer)


async def test_a_handler_an_inner_interceptor_gives_one_call_is_never_reused_for_another() -> None:
    server = aio_server(interceptors=[RequestDecodingInterceptor(), _Doorman()])
    acoustic_pb2_grpc.add_AcousticServicer_to_server(_Acoustic(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    outcomes = []
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            info = channel.unary_unary("/tts.acoustic.v1.Acoustic/GetModelInfo")
            for let_in in (True, False, True, False):
                try:
                    await info(b"", metadata=(("x-let-in", "yes"),) if let_in else (), timeout=10)
                    outcomes.append("answered")
                except grpc.aio.AioRpcError as error:
                    outcomes.append(error.code().name)
    finally:
        await server.stop(None)
    assert outcomes == ["answered", "PERMISSION_DENIED", "answered", "PERMISSION_DENIED"]
