"""Fairness that conserves work, at a real gateway with real workers: one client alone may use the whole
real-time capacity; when the mesh is full, the client over an equal share is the one refused, while
another client still gets in, at both doors, even where the first filled the mesh alone: a stream of
its that has sent no audio yet gives its place, and ends refused with pushback at its own door.

The workers here are pinned to a capacity of 4 listeners (`TTS_REALTIME_CAPACITY`), which gaps
heard do not cut (`TTS_REALTIME_MIN_SHARE`). The gateway trusts
its loopback peer's `x-forwarded-for` (as it trusts the edge in a cluster), so each test client names
the address it stands for. Held streams read nothing, so their listeners hold no audio: each needs a
whole audio second per second. A client stays active for `ACTIVE_S` after it last asked, so each test
starts by letting the clients of the one before fall quiet.
"""

from __future__ import annotations

import contextlib
import json
import queue
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import httpx
import pytest
from websockets.exceptions import ConnectionClosedOK
from websockets.sync.client import connect

from libs.pb.tts.v1 import tts_pb2, tts_pb2_grpc
from libs.serving.clients import FORWARDED_FOR
from libs.wire.headers import PUSHBACK_METADATA_KEY
from tests.support.client import when_room
from tests.support.faults.zone_mesh import scrape, wait_for
from tests.support.mesh import Mesh

CAPACITY = 4
ACTIVE_S = 4.0
SERVICE, FLOODER, NEIGHBOUR = "192.0.2.10", "198.51.100.7", "203.0.113.9"
WORDS = ("amber", "brave", "calm", "dusty", "eager", "faint", "grand", "humble")


def _long_text(tag: int) -> str:
    """A long text of its own (a shared one would come from the cache, needing no worker)."""
    return " ".join(f"This is sentence {n} of the {WORDS[tag]} text a client reads one piece of." for n in range(40))


@pytest.fixture(scope="module")
def mesh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mesh]:
    env = {
        "TTS_REALTIME_CAPACITY": str(CAPACITY),
        # The gateway's rule is what these tests hold to. The workers' own backstop refuses by how late
        # their steps run, which depends on the machine: on a slow one, the held streams' first sentences
        # are still late when the next stream comes.
        "TTS_REALTIME_HEADROOM": "0",
        "TTS_ADMISSION_HEADROOM": "1.0",
        "TTS_TRUSTED_PROXIES": "127.0.0.1/32",
        "TTS_ACTIVE_CLIENT_S": str(ACTIVE_S),
        # The capacity is pinned, not what this machine makes: gaps its listeners hear on a slow machine
        # must not cut it (the learning has tests of its own in tests/unit/test_synthesis_admission.py).
        "TTS_REALTIME_MIN_SHARE": "1.0",
        # A streamed text stopped mid-sentence stays silent until the test ends it: by default what has
        # arrived is spoken after 2 s, and a slow machine may take longer to reach the next step.
        "TTS_SENTENCE_WAIT_S": "600",
        "TTS_STREAM_IDLE_TIMEOUT_S": "600",
        # Refused at once, not after a wait for room: while one waits, the held streams' buffers grow
        # with the audio sent into their transport windows, and make room (the wait has its own tests,
        # tests/e2e/test_realtime_admission_mesh.py).
        "TTS_ROOM_WAIT_MS": "0",
    }
    mesh = Mesh(log_dir=Path(tmp_path_factory.mktemp("share")), env=env).start()
    try:
        yield mesh
    finally:
        mesh.stop()


def _stub(channel: grpc.Channel) -> tts_pb2_grpc.TextToSpeechStub:
    return tts_pb2_grpc.TextToSpeechStub(channel)


def _open(channel: grpc.Channel, client: str, tag: int) -> grpc.Future:
    """A stream of `client` that has started (one message read) and is then held unread."""
    call = _stub(channel).Synthesize(tts_pb2.SynthesizeRequest(text=_long_text(tag)), metadata=((FORWARDED_FOR, client),), timeout=120)
    assert next(call).audio
    return call


def _refusal(channel: grpc.Channel, client: str, tag: int) -> grpc.RpcError | None:
    call = _stub(channel).Synthesize(tts_pb2.SynthesizeRequest(text=_long_text(tag)), metadata=((FORWARDED_FOR, client),), timeout=60)
    try:
        next(call)
    except grpc.RpcError as refused:
        return refused
    call.cancel()
    return None


@pytest.fixture
def channel(mesh: Mesh) -> Iterator[grpc.Channel]:
    time.sleep(ACTIVE_S + 0.2)  # the clients of the test before are no longer active
    with grpc.insecure_channel(mesh.gateway_address, options=[("grpc.use_local_subchannel_pool", 1)]) as channel:
        yield channel


def test_one_client_alone_is_refused_nothing_up_to_the_capacity(mesh: Mesh, channel: grpc.Channel) -> None:
    with contextlib.ExitStack() as held:
        for tag in range(CAPACITY):
            held.callback(_open(channel, SERVICE, tag).cancel)  # a service with many users behind one address
        refused = _refusal(channel, SERVICE, CAPACITY)
        assert refused is not None and refused.code() == grpc.StatusCode.RESOURCE_EXHAUSTED


def test_when_the_mesh_is_full_the_client_over_its_share_is_refused_and_another_is_served(mesh: Mesh, channel: grpc.Channel) -> None:
    with contextlib.ExitStack() as held:
        held.callback(_open(channel, NEIGHBOUR, 0).cancel)
        for tag in (1, 2):
            held.callback(_open(channel, FLOODER, tag).cancel)
        # One place left, two clients: an equal share is 2. The flooder's third would take the place
        # the neighbour's share still has, so it is refused ...
        refused = _refusal(channel, FLOODER, 3)
        assert refused is not None and refused.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "equal share" in refused.details()
        # ... also at the HTTP door, where the same client is counted the same way ...
        body = {"model": "tts-1", "input": _long_text(4), "voice": "alloy"}
        answer = httpx.post(f"{mesh.http_url}/v1/audio/speech", json=body, headers={FORWARDED_FOR: FLOODER}, timeout=60)
        assert answer.status_code == 429 and "equal share" in answer.json()["error"]["message"]
        assert int(answer.headers["retry-after"]) >= 1
        # ... while the neighbour, within its share, takes the last place.
        held.callback(_open(channel, NEIGHBOUR, 5).cancel)
        # Now the mesh is full for everyone.
        refused = _refusal(channel, NEIGHBOUR, 6)
        assert refused is not None and refused.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    # Streams ended are room again, for anyone (once the gateway has heard of the cancels).
    request = tts_pb2.SynthesizeRequest(text="Room again.")
    answers = when_room(lambda: list(_stub(channel).Synthesize(request, metadata=((FORWARDED_FOR, FLOODER),), timeout=60)))
    assert sum(len(answer.audio) for answer in answers) > 0


def test_a_client_between_short_streams_keeps_its_share_against_a_flood(mesh: Mesh, channel: grpc.Channel) -> None:
    # The neighbour's short stream has ended: it holds nothing, but asked a moment ago.
    answers = _stub(channel).Synthesize(tts_pb2.SynthesizeRequest(text="Lights off."), metadata=((FORWARDED_FOR, NEIGHBOUR),), timeout=60)
    assert sum(len(answer.audio) for answer in answers) > 0
    with contextlib.ExitStack() as held:
        for tag in (1, 2):  # the flood takes an equal share of the capacity ...
            held.callback(_open(channel, FLOODER, tag).cancel)
        refused = _refusal(channel, FLOODER, 3)  # ... and no more, though the mesh has room
        assert refused is not None and refused.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "equal share" in refused.details()
        held.callback(_open(channel, NEIGHBOUR, 4).cancel)  # the neighbour's next stream is served
    # Once the neighbour has been quiet for a while the flood may fill the mesh, as a client alone may.
    time.sleep(ACTIVE_S + 0.2)
    with contextlib.ExitStack() as held:
        for tag in range(CAPACITY):
            held.callback(_open(channel, FLOODER, tag).cancel)


class _SilentStream:
    """A StreamingSynthesize stream of `client` whose text stops mid-sentence: admitted, it sends no
    audio until its sentence ends (`finish`)."""

    def __init__(self, channel: grpc.Channel, client: str, tag: int) -> None:
        self._pieces: queue.Queue[str | None] = queue.Queue()
        self._pieces.put(f"The {WORDS[tag]} stream begins a sentence and")
        self.error: grpc.RpcError | None = None
        self.audio = 0
        self._call = _stub(channel).StreamingSynthesize(self._requests(), metadata=((FORWARDED_FOR, client),), timeout=120)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _requests(self) -> Iterator[tts_pb2.StreamingSynthesizeRequest]:
        yield tts_pb2.StreamingSynthesizeRequest(config=tts_pb2.StreamingSynthesizeConfig())
        while (piece := self._pieces.get()) is not None:
            yield tts_pb2.StreamingSynthesizeRequest(text=piece)

    def _read(self) -> None:
        try:
            for response in self._call:
                self.audio += len(response.audio)
        except grpc.RpcError as error:
            self.error = error

    def finish(self) -> None:
        self._pieces.put(" it ends here.")
        self._pieces.put(None)

    def ended(self, timeout_s: float = 60.0) -> bool:
        self._reader.join(timeout_s)
        return not self._reader.is_alive()

    def cancel(self) -> None:
        self._pieces.put(None)
        self._call.cancel()


def _wait_open(mesh: Mesh, streams: int) -> None:
    gateway = mesh.services["gateway"].metrics_port
    wait_for(lambda: scrape(gateway).get("tts_gateway_inflight_streams") == streams, timeout_s=60, what=f"{streams} streams open")


def _neighbour_is_served(channel: grpc.Channel) -> None:
    answers = _stub(channel).Synthesize(tts_pb2.SynthesizeRequest(text="Let me in."), metadata=((FORWARDED_FOR, NEIGHBOUR),), timeout=60)
    assert sum(len(answer.audio) for answer in answers) > 0


def test_a_client_that_filled_the_mesh_alone_gives_a_silent_streams_place_to_another(mesh: Mesh, channel: grpc.Channel) -> None:
    silent = [_SilentStream(channel, FLOODER, tag) for tag in range(CAPACITY)]  # alone, it may fill the mesh
    try:
        _wait_open(mesh, CAPACITY)
        # The neighbour's stream is served: one of the flooder's streams, none of whose audio was sent,
        # gives its place, and ends refused with pushback, as if it had asked a moment later.
        _neighbour_is_served(channel)
        wait_for(lambda: any(stream.error is not None for stream in silent), timeout_s=30, what="a silent stream gave its place")
        refused = [stream for stream in silent if stream.error is not None]
        assert len(refused) == 1 and refused[0].audio == 0
        error = refused[0].error
        assert error is not None and error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and "gave its place" in error.details()
        assert 0 < int(dict(error.trailing_metadata())[PUSHBACK_METADATA_KEY]) <= 10_000
        assert scrape(mesh.services["gateway"].metrics_port).get('tts_gateway_shed_total{reason="preempted"}') == 1
        # The flooder's other streams are whole when their text is.
        for stream in silent:
            if stream.error is None:
                stream.finish()
        for stream in silent:
            assert stream.ended()
            assert stream in refused or (stream.error is None and stream.audio > 0)
    finally:
        for stream in silent:
            stream.cancel()


def test_a_silent_websocket_context_that_gives_its_place_ends_in_an_error_with_pushback(mesh: Mesh, channel: grpc.Channel) -> None:
    silent = [_SilentStream(channel, FLOODER, tag) for tag in range(CAPACITY - 1)]
    socket_url = mesh.http_url.replace("http://", "ws://") + "/v1/audio/speech/stream"
    try:
        _wait_open(mesh, CAPACITY - 1)
        with connect(socket_url, additional_headers={FORWARDED_FOR: FLOODER}) as socket:
            socket.send(json.dumps({"type": "start", "audio": "base64"}))
            assert json.loads(socket.recv(timeout=60))["type"] == "ready"
            socket.send(json.dumps({"type": "text", "context_id": "held", "text": f"The {WORDS[CAPACITY]} context begins and"}))
            _wait_open(mesh, CAPACITY)
            # The flooder filled the mesh alone; its newest silent stream is the socket's context.
            _neighbour_is_served(channel)
            event = json.loads(socket.recv(timeout=60))
            assert event["type"] == "error" and event["context_id"] == "held", event
            assert event["code"] == "RESOURCE_EXHAUSTED" and event["status"] == 429 and "gave its place" in event["message"]
            assert 0 < event["retry_after_ms"] <= 10_000
            # Only that context ended: the socket and the flooder's other streams go on.
            socket.send(json.dumps({"type": "close"}))
            with pytest.raises(ConnectionClosedOK):
                socket.recv(timeout=60)
        assert all(stream.error is None for stream in silent)
    finally:
        for stream in silent:
            stream.cancel()
