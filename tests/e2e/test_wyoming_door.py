"""The Wyoming door, driven by the `wyoming` package's own client over a real socket, on a gateway
with `--wyoming-port`: describe lists every voice with streaming, synthesize gives gRPC's audio,
streamed text is spoken sentence by sentence as it arrives (audio before the stream is stopped), and
the per-client limit and the bounds on events hold; with `--wyoming-zeroconf` a browser of
`_wyoming._tcp` finds the door, reaches it at what was announced, and sees it withdrawn when it stops."""

from __future__ import annotations

import asyncio
import io
import json
import socket
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import grpc
import pytest
from wyoming.audio import AudioChunk, AudioStart
from wyoming.client import AsyncTcpClient
from wyoming.error import Error
from wyoming.event import Event, write_event
from wyoming.info import Describe, Info
from wyoming.tts import Synthesize, SynthesizeChunk, SynthesizeStart, SynthesizeStop, SynthesizeStopped, SynthesizeVoice

from libs.devmesh.launcher import stop_processes
from libs.pb.tts.v1 import tts_pb2, tts_pb2_grpc
from libs.serving.wyoming import read_event
from libs.voice.registry import default_registry
from tests.support.gateway_process import extra_gateway
from tests.support.mesh import Mesh
from tests.support.ports import free_port

TEXT = "Turn on the kitchen lights. The lights are on."
STREAMED = ["The front door ", "is locked. ", "Good ", "night."]


@pytest.fixture(scope="module")
def wyoming_gateway(mesh: Mesh, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, Path]]:
    """A gateway with the door: its Wyoming port and its log."""
    port = free_port()
    log = Path(tmp_path_factory.mktemp("wyoming")) / "gateway.log"
    with extra_gateway(mesh, log, ["--wyoming-port", str(port), "--max-streams-per-client", "2", "--http-port", "0"]):
        yield port, log


@pytest.fixture(scope="module")
def wyoming_port(wyoming_gateway: tuple[int, Path]) -> int:
    return wyoming_gateway[0]


async def _until(client: AsyncTcpClient, kind: str) -> list[Event]:
    events = []
    while True:
        event = await asyncio.wait_for(client.read_event(), 60)
        assert event is not None, "the door closed the connection"
        assert not Error.is_type(event.type), event.data
        events.append(event)
        if event.type == kind:
            return events


def _wire(event: Event) -> bytes:
    """An event as a client puts it on the wire."""
    buffer = io.BytesIO()
    write_event(event, buffer)
    return buffer.getvalue()


def _grpc_pcm(mesh: Mesh, text: str) -> bytes:
    with grpc.insecure_channel(mesh.gateway_address) as channel:
        return b"".join(r.audio for r in tts_pb2_grpc.TextToSpeechStub(channel).Synthesize(tts_pb2.SynthesizeRequest(text=text), timeout=120))


def test_describe_lists_every_voice_with_languages_and_streaming(wyoming_port: int) -> None:
    async def run() -> Info:
        async with AsyncTcpClient("127.0.0.1", wyoming_port) as client:
            await client.write_event(Describe().event())
            return Info.from_event((await _until(client, "info"))[-1])

    info = asyncio.run(run())
    program = info.tts[0]
    assert program.supports_synthesize_streaming
    assert [voice.name for voice in program.voices] == [voice.name for voice in default_registry().voices()]
    assert all(voice.languages for voice in program.voices)


def test_synthesize_gives_the_grpc_audio_as_one_audio_start_chunks_and_stop(mesh: Mesh, wyoming_port: int) -> None:
    async def run() -> list[Event]:
        async with AsyncTcpClient("127.0.0.1", wyoming_port) as client:
            await client.write_event(Synthesize(text=TEXT, voice=SynthesizeVoice(name="en_US-joe-medium")).event())
            return await _until(client, "audio-stop")

    events = asyncio.run(run())
    assert AudioStart.is_type(events[0].type) and AudioStart.from_event(events[0]).rate == 22050
    assert [e.type for e in events].count("audio-start") == 1
    audio = b"".join(AudioChunk.from_event(e).audio for e in events if AudioChunk.is_type(e.type))
    assert audio == _grpc_pcm(mesh, TEXT)


def test_streamed_text_is_spoken_sentence_by_sentence_before_the_stream_stops(mesh: Mesh, wyoming_port: int) -> None:
    async def run() -> tuple[list[Event], list[Event]]:
        async with AsyncTcpClient("127.0.0.1", wyoming_port) as client:
            await client.write_event(SynthesizeStart(voice=SynthesizeVoice(language="en_US")).event())
            for piece in STREAMED[:3]:
                await client.write_event(SynthesizeChunk(text=piece).event())
            first = await _until(client, "audio-stop")  # the first sentence, while the text is still open
            await client.write_event(SynthesizeChunk(text=STREAMED[3]).event())
            await client.write_event(Synthesize(text="".join(STREAMED)).event())  # the repeat for older clients: ignored
            await client.write_event(SynthesizeStop().event())
            return first, await _until(client, "synthesize-stopped")

    first, rest = asyncio.run(run())
    events = first + rest
    assert [e.type for e in events if e.type in ("audio-start", "audio-stop")] == ["audio-start", "audio-stop"] * 2
    assert SynthesizeStopped.is_type(events[-1].type)

    def requests() -> Iterator[tts_pb2.StreamingSynthesizeRequest]:
        yield tts_pb2.StreamingSynthesizeRequest(config=tts_pb2.StreamingSynthesizeConfig())
        yield tts_pb2.StreamingSynthesizeRequest(text="".join(STREAMED))

    with grpc.insecure_channel(mesh.gateway_address) as channel:
        reference = b"".join(r.audio for r in tts_pb2_grpc.TextToSpeechStub(channel).StreamingSynthesize(requests(), timeout=120))
    assert b"".join(AudioChunk.from_event(e).audio for e in events if AudioChunk.is_type(e.type)) == reference


def test_a_client_that_hangs_up_mid_stream_is_no_internal_error_and_the_door_serves_on(wyoming_gateway: tuple[int, Path]) -> None:
    port, log = wyoming_gateway

    async def hang_up() -> None:
        async with AsyncTcpClient("127.0.0.1", port) as client:
            await client.write_event(SynthesizeStart(voice=SynthesizeVoice(language="en_US")).event())
            await client.write_event(SynthesizeChunk(text=" ".join([TEXT] * 4)).event())
            await client.write_event(SynthesizeStop().event())
            await _until(client, "audio-chunk")  # then gone, with the rest unread: the door's next write fails

    asyncio.run(hang_up())

    async def next_client() -> list[Event]:
        async with AsyncTcpClient("127.0.0.1", port) as client:
            await client.write_event(Synthesize(text=TEXT).event())
            return await _until(client, "audio-stop")

    assert any(AudioChunk.is_type(event.type) for event in asyncio.run(next_client()))
    assert "internal error" not in log.read_text(encoding="utf-8")


def test_a_client_past_its_connection_limit_and_an_oversized_event_get_errors_with_grpc_codes(wyoming_port: int) -> None:
    async def run() -> tuple[Event | None, Event | None]:
        async with AsyncTcpClient("127.0.0.1", wyoming_port) as one, AsyncTcpClient("127.0.0.1", wyoming_port) as two:
            await one.write_event(Describe().event())
            await two.write_event(Describe().event())
            await _until(one, "info")
            await _until(two, "info")
            async with AsyncTcpClient("127.0.0.1", wyoming_port) as three:
                refused = await asyncio.wait_for(three.read_event(), 30)
        reader, writer = await asyncio.open_connection("127.0.0.1", wyoming_port)
        writer.write(json.dumps({"type": "synthesize", "payload_length": 1 << 30}).encode() + b"\n")  # claims a gigabyte
        await writer.drain()
        answer = await asyncio.wait_for(read_event(reader), 30)
        closed = await asyncio.wait_for(reader.read(), 30) == b""  # and the door hangs up
        writer.close()
        return refused, answer if closed else None

    refused, oversized = asyncio.run(run())
    assert refused is not None and Error.from_event(refused).code == "RESOURCE_EXHAUSTED"
    assert oversized is not None and Error.from_event(oversized).code == "INVALID_ARGUMENT"


def test_a_refused_client_reads_its_error_even_while_it_is_still_sending(wyoming_port: int) -> None:
    # Closing a connection with input unread resets it, and a reset throws away what the client had not
    # read yet: the door reads on after its last word, so the error arrives. (Past the connection limit the
    # door refuses before the client's bytes arrive, so that half checks only that the refusal arrives.)
    async def refused_while_sending(first_bytes: bytes) -> Event | None:
        reader, writer = await asyncio.open_connection("127.0.0.1", wyoming_port)
        writer.write(first_bytes)
        sending = asyncio.ensure_future(writer.drain())
        await asyncio.sleep(1.0)  # busy sending: it reads only after the door has answered and hung up
        try:
            return await asyncio.wait_for(read_event(reader), 30)
        finally:
            sending.cancel()
            writer.close()

    async def run() -> tuple[Event | None, Event | None]:
        endless_header = b'{"type": "synthesize", "data": {"text": "' + b"a" * (4 << 20)
        too_long = await refused_while_sending(endless_header)
        async with AsyncTcpClient("127.0.0.1", wyoming_port) as one, AsyncTcpClient("127.0.0.1", wyoming_port) as two:
            for client in (one, two):
                await client.write_event(Describe().event())
                await _until(client, "info")
            events = [Describe().event(), *(Synthesize(text=f"Sentence {n}.").event() for n in range(2000))]
            past_the_limit = await refused_while_sending(b"".join(_wire(event) for event in events))
        return too_long, past_the_limit

    too_long, past_the_limit = asyncio.run(run())
    assert too_long is not None and Error.from_event(too_long).code == "INVALID_ARGUMENT"
    assert "header line is over" in Error.from_event(too_long).text
    assert past_the_limit is not None and Error.from_event(past_the_limit).code == "RESOURCE_EXHAUSTED"


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({}, "`text` is required"),
        ({"text": 5}, "`text` must be a string"),
        ({"text": "Hi.", "voice": "alloy"}, "`voice` must be an object"),
        ({"text": "Hi.", "voice": {"name": 5}}, "`voice.name` must be a string"),
        ({"text": "Hi.", "voice": {"name": "en_US-joe-medium", "speaker": ["x"]}}, "`voice.speaker` must be a string"),
        ({"text": "Hi.", "voice": {"name": "en_US-joe-medium", "speaker": "\u00b2"}}, "has no speaker"),
        ({"text": "Hi.", "text_format": 1}, "`text_format` must be a string"),
    ],
)
def test_a_synthesize_with_malformed_data_is_an_error_naming_the_field_and_the_connection_goes_on(
    wyoming_port: int, data: dict, field: str
) -> None:
    async def run() -> tuple[Event | None, list[Event]]:
        async with AsyncTcpClient("127.0.0.1", wyoming_port) as client:
            await client.write_event(Event(type="synthesize", data=data))
            answer = await asyncio.wait_for(client.read_event(), 30)
            await client.write_event(Synthesize(text="Still here.", voice=None).event())
            return answer, await _until(client, "audio-stop")

    answer, after = asyncio.run(run())
    assert answer is not None and Error.is_type(answer.type), answer
    assert Error.from_event(answer).code == "INVALID_ARGUMENT" and field in Error.from_event(answer).text
    assert any(AudioChunk.is_type(event.type) for event in after)


async def _mdns_works() -> bool:
    """Whether an mDNS announcement made on this host is heard on it (multicast may be off in a sandbox)."""
    from zeroconf.asyncio import AsyncServiceInfo, AsyncZeroconf

    announcer, listener = AsyncZeroconf(), AsyncZeroconf()
    name = f"probe-{free_port()}._tts-probe._tcp.local."
    try:
        await announcer.async_register_service(
            AsyncServiceInfo("_tts-probe._tcp.local.", name, addresses=[socket.inet_aton("127.0.0.1")], port=9)
        )
        return await AsyncServiceInfo("_tts-probe._tcp.local.", name).async_request(listener.zeroconf, 3000)
    finally:
        await announcer.async_close()
        await listener.async_close()


def test_the_door_is_announced_over_mdns_while_it_serves_and_withdrawn_when_it_stops(
    mesh: Mesh, tmp_path: Path
) -> None:
    from zeroconf import ServiceStateChange
    from zeroconf.asyncio import AsyncServiceBrowser, AsyncServiceInfo, AsyncZeroconf

    if not asyncio.run(_mdns_works()):
        pytest.skip("mDNS announcements are not heard on this host")
    port = free_port()
    args = ["--wyoming-port", str(port), "--wyoming-host", "127.0.0.1", "--wyoming-zeroconf", "true", "--http-port", "0"]

    async def browse(until_stopped: Callable[[], Awaitable[None]]) -> tuple[list[tuple[str, ServiceStateChange]], Info | None]:
        home = AsyncZeroconf()  # what Home Assistant runs: a browser of _wyoming._tcp
        changes: list[tuple[str, ServiceStateChange]] = []
        browser = AsyncServiceBrowser(
            home.zeroconf, "_wyoming._tcp.local.", handlers=[lambda name, state_change, **_: changes.append((name, state_change))]
        )
        try:
            info = None
            for _ in range(100):
                ours = [name for name, change in changes if change is ServiceStateChange.Added]
                for name in ours:
                    service = AsyncServiceInfo("_wyoming._tcp.local.", name)
                    if await service.async_request(home.zeroconf, 3000) and service.port == port:
                        async with AsyncTcpClient(service.parsed_addresses()[0], service.port) as client:
                            await client.write_event(Describe().event())
                            info = Info.from_event((await _until(client, "info"))[-1])
                        break
                if info is not None:
                    break
                await asyncio.sleep(0.1)
            await until_stopped()
            for _ in range(100):
                if any(change is ServiceStateChange.Removed for _, change in changes):
                    break
                await asyncio.sleep(0.1)
            return changes, info
        finally:
            await browser.async_cancel()
            await home.async_close()

    with extra_gateway(mesh, tmp_path / "gateway.log", args) as gateway:

        async def stop() -> None:
            await asyncio.to_thread(stop_processes, [gateway.process])

        changes, info = asyncio.run(browse(stop))
    assert info is not None, f"the door was not found over mDNS on port {port}: {changes}"
    assert [voice.name for voice in info.tts[0].voices] == [voice.name for voice in default_registry().voices()]
    announced = {name for name, change in changes if change is ServiceStateChange.Added}
    assert any(name in announced for name, change in changes if change is ServiceStateChange.Removed), changes
