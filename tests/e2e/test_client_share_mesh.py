"""One client holds at most its share of what the workers take at once, at a real gateway with real
workers: the rest is left to everyone else, at both doors.

The workers here take 4 streams each (`TTS_MAX_STREAMS`) and say so when they admit one; with a
share of one half, a client may hold 2. The gateway trusts its loopback peer's `x-forwarded-for`
(as it trusts the edge in a cluster), so each test client names the address it stands for.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import grpc
import httpx
import pytest

from libs.pb.tts.v1 import tts_pb2, tts_pb2_grpc
from libs.serving.clients import FORWARDED_FOR
from tests.support.mesh import Mesh

WORKER_STREAMS = 4
SHARE = 0.5
CLIENT_LIMIT = 2  # floor(WORKER_STREAMS * SHARE)
FLOODER, NEIGHBOUR = "198.51.100.7", "203.0.113.9"
LONG_TEXT = " ".join(f"This is sentence {n} of a text the client reads one piece of." for n in range(40))


@pytest.fixture(scope="module")
def mesh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mesh]:
    env = {
        "TTS_MAX_STREAMS": str(WORKER_STREAMS),
        "TTS_REALTIME_HEADROOM": "0",  # the stream limit alone, not a measured capacity that moves
        "TTS_TRUSTED_PROXIES": "127.0.0.1/32",
    }
    mesh = Mesh(log_dir=Path(tmp_path_factory.mktemp("share")), env=env, max_client_share=SHARE).start()
    try:
        yield mesh
    finally:
        mesh.stop()


def _stub(channel: grpc.Channel) -> tts_pb2_grpc.TextToSpeechStub:
    return tts_pb2_grpc.TextToSpeechStub(channel)


def _open(channel: grpc.Channel, client: str) -> grpc.Future:
    """A stream of `client` that has started (one message read) and is then held unread."""
    call = _stub(channel).Synthesize(
        tts_pb2.SynthesizeRequest(text=LONG_TEXT), metadata=((FORWARDED_FOR, client),), timeout=120
    )
    assert next(call).audio
    return call


def _spoken(channel: grpc.Channel, client: str, text: str) -> int:
    answers = _stub(channel).Synthesize(tts_pb2.SynthesizeRequest(text=text), metadata=((FORWARDED_FOR, client),), timeout=60)
    return sum(len(answer.audio) for answer in answers)


@pytest.fixture
def channel(mesh: Mesh) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(mesh.gateway_address) as channel:
        # The workers say how many streams they take when they admit one: one call teaches the gateway.
        assert _spoken(channel, NEIGHBOUR, "Hello there.") > 0
        yield channel


def test_a_client_holds_its_share_and_another_client_is_still_served(mesh: Mesh, channel: grpc.Channel) -> None:
    with contextlib.ExitStack() as held:
        for _ in range(CLIENT_LIMIT):
            held.callback(_open(channel, FLOODER).cancel)
        with pytest.raises(grpc.RpcError) as caught:
            next(_stub(channel).Synthesize(tts_pb2.SynthesizeRequest(text="One more?"), metadata=((FORWARDED_FOR, FLOODER),)))
        assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert f"already has {CLIENT_LIMIT} streams open here" in caught.value.details()
        # The other half of the workers is the neighbour's, at the gRPC and at the HTTP door.
        assert _spoken(channel, NEIGHBOUR, "The neighbour is served.") > 0
        body = {"model": "tts-1", "input": "Over HTTP as well.", "voice": "alloy"}
        answer = httpx.post(f"{mesh.http_url}/v1/audio/speech", json=body, headers={FORWARDED_FOR: NEIGHBOUR}, timeout=60)
        assert answer.status_code == 200 and len(answer.content) > 0
        # The flooder's share is counted across doors: its HTTP request is refused as its stream was.
        refused = httpx.post(f"{mesh.http_url}/v1/audio/speech", json=body, headers={FORWARDED_FOR: FLOODER}, timeout=60)
        assert refused.status_code == 429
        assert "streams open here" in refused.json()["error"]["message"]
    # Streams ended are room again.
    assert _spoken(channel, FLOODER, "Room again.") > 0
