"""How many streams a client may hold at a real gateway: per client address, refused at once with
RESOURCE_EXHAUSTED; per connection, HTTP/2's limit, so the extra stream waits in the client.

The streams held open are clients that read one message and stop: backpressure keeps them open and
idle, as a hostile client would."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import grpc
import pytest

from libs.pb.tts.v1 import tts_pb2, tts_pb2_grpc
from tests.support.client import synthesize, when_room
from tests.support.gateway_process import extra_gateway
from tests.support.mesh import Mesh

PER_CLIENT = 3
PER_CONNECTION = 2
LONG_TEXT = " ".join(f"This is sentence {n} of a text the client never finishes reading." for n in range(60))
LONG_REQUEST = tts_pb2.SynthesizeRequest(text=LONG_TEXT, encoding=tts_pb2.FLOAT_PCM, sample_rate_hz=48000)


@pytest.fixture(scope="module")
def gateway(mesh: Mesh, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    log_path = tmp_path_factory.mktemp("limits") / "gateway.log"
    args = ["--max-streams-per-client", str(PER_CLIENT), "--max-concurrent-streams", str(PER_CONNECTION)]
    with extra_gateway(mesh, log_path, args) as process:
        yield process.address


def _connection(address: str) -> grpc.Channel:
    """A channel with a connection of its own (channels in one process share connections by default)."""
    return grpc.insecure_channel(address, options=[("grpc.use_local_subchannel_pool", 1)])


def _held_stream(channel: grpc.Channel) -> grpc.Future:
    """A stream that has started (one message read) and is then left unread."""
    call = tts_pb2_grpc.TextToSpeechStub(channel).Synthesize(LONG_REQUEST, timeout=300)
    assert next(call).audio
    return call


def test_one_client_address_holds_at_most_its_share_of_streams(gateway: str) -> None:
    with contextlib.ExitStack() as stack:
        channels = [stack.enter_context(_connection(gateway)) for _ in range(PER_CLIENT + 1)]
        held = [_held_stream(channel) for channel in channels[:PER_CLIENT]]
        refused = tts_pb2_grpc.TextToSpeechStub(channels[-1]).Synthesize(LONG_REQUEST, timeout=60)
        with pytest.raises(grpc.RpcError) as caught:
            next(refused)
        assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert f"already has {PER_CLIENT} streams open here" in caught.value.details()
        held[0].cancel()
        # A stream ended is a stream the client may start again, once the gateway has heard of the
        # cancel (it travels as an RST_STREAM; a request right after it may still find three open).
        assert when_room(lambda: synthesize(gateway, "One more, now that there is room.")).duration_s > 0.5
        for call in held[1:]:
            call.cancel()


def test_a_connection_carries_at_most_its_streams_at_once_and_more_wait(gateway: str) -> None:
    with _connection(gateway) as channel:
        held = [_held_stream(channel) for _ in range(PER_CONNECTION)]
        waiting = tts_pb2_grpc.TextToSpeechStub(channel).Synthesize(tts_pb2.SynthesizeRequest(text="Let me in."), timeout=5)
        with pytest.raises(grpc.RpcError) as caught:
            list(waiting)
        # It never started: the gateway saw no third stream on this connection.
        assert caught.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        held[0].cancel()
        admitted = tts_pb2_grpc.TextToSpeechStub(channel).Synthesize(tts_pb2.SynthesizeRequest(text="Let me in."), timeout=60)
        assert sum(len(response.audio) for response in admitted) > 0
        held[1].cancel()
