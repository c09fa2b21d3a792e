"""Admission by real-time capacity in real processes: with workers that can serve two listeners in real
time, the gateway sheds a third while the two hold no audio, with RESOURCE_EXHAUSTED and a retry hint,
the streams already admitted play on, and the workers and the gateway export capacity, demand and load."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from libs.pb.tts.v1 import tts_pb2, tts_pb2_grpc
from tests.support.client import synthesize
from tests.support.mesh import Mesh

CAPACITY = 2
WORDS = ("amber", "brave", "calm", "dusty")


def _long_request(stream: int) -> tts_pb2.SynthesizeRequest:
    """A long text of its own for each stream (a shared one would be served from the cache, with no acoustic stream)."""
    text = " ".join(f"Sentence {n} of the {WORDS[stream]} text, read one piece and then held open." for n in range(40))
    return tts_pb2.SynthesizeRequest(text=text, encoding=tts_pb2.FLOAT_PCM)


@pytest.fixture(scope="module")
def small_mesh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mesh]:
    # Pinned capacity: what the workers would compute depends on the machine; the admission rule does not.
    env = {"TTS_REALTIME_CAPACITY": str(CAPACITY), "TTS_REALTIME_HEADROOM": "1.0", "TTS_ADMISSION_HEADROOM": "1.0"}
    mesh = Mesh(log_dir=Path(tmp_path_factory.mktemp("realtime")), env=env).start()
    try:
        yield mesh
    finally:
        mesh.stop()


def _held_stream(channel: grpc.Channel, stream: int) -> grpc.Future:
    """A stream that has started (one message read) and is then left unread: its worker streams stay open."""
    call = tts_pb2_grpc.TextToSpeechStub(channel).Synthesize(_long_request(stream), timeout=300)
    assert next(call).audio
    return call


def test_a_stream_past_the_real_time_capacity_is_shed_with_a_retry_hint_and_admitted_ones_play_on(small_mesh: Mesh) -> None:
    gateway = small_mesh.gateway_address
    with contextlib.ExitStack() as stack:
        channels = [
            stack.enter_context(grpc.insecure_channel(gateway, options=[("grpc.use_local_subchannel_pool", 1)])) for _ in range(3)
        ]
        held = [_held_stream(channel, stream) for stream, channel in enumerate(channels[:CAPACITY])]
        for worker in ("acoustic", "vocoder"):
            assert small_mesh.metric(worker, f"tts_{worker}_realtime_capacity") == CAPACITY
            assert small_mesh.metric(worker, f"tts_{worker}_realtime_demand") == CAPACITY
            assert small_mesh.metric(worker, f"tts_{worker}_realtime_load") == 1.0
        assert small_mesh.metric("gateway", "tts_gateway_realtime_capacity") == CAPACITY
        assert small_mesh.metric("gateway", "tts_gateway_realtime_share") == 1.0  # no listener has run dry
        assert small_mesh.metric("gateway", "tts_gateway_realtime_listeners") == CAPACITY
        # The held listeners read nothing: their buffers run out, and a third would need a third audio
        # second per second of a mesh that makes two.
        refused = tts_pb2_grpc.TextToSpeechStub(channels[-1]).Synthesize(_long_request(CAPACITY), timeout=60)
        with pytest.raises(grpc.RpcError) as caught:
            next(refused)
        assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "retry when one ends" in caught.value.details()
        pushback = dict(caught.value.trailing_metadata() or ())
        assert int(pushback["grpc-retry-pushback-ms"]) >= 200
        assert small_mesh.metric("gateway", 'tts_gateway_shed_total{reason="realtime"}') >= 1
        # The admitted streams were not touched: each reads on.
        for call in held:
            assert next(call).audio
        held[0].cancel()
        # A stream ended is real-time capacity free again.
        assert synthesize(gateway, "One more, now that there is room.").duration_s > 0.5
        for call in held[1:]:
            call.cancel()
