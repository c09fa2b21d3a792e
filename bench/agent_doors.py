"""The doors for agents, homes and phones, measured for `make bench-doors` (bench/doors.py):

- first audio over our WebSocket, ElevenLabs' socket and Wyoming against gRPC's, cache warm, interleaved;
- a paragraph streamed word by word at 5 words/s (a language model's pace) to a listener who starts
  playing at its first audio: the longest it waits for audio it should be hearing;
- cancel on a playing context: time from the cancel to its answer, audio after it, whether the words
  heard are exactly those whose audio ended by the played time, and whether the socket's other
  context played on to the same audio as alone;
- LiveKit Agents' ElevenLabs plugin through the gateway: its audio and its word timings against ours;
- a stream cut mid-utterance and resumed from its token, joined against the uninterrupted one.
"""

from __future__ import annotations

import asyncio
import base64
import json
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import grpc
from websockets.sync.client import ClientConnection, connect

from libs.pb.tts.v1 import tts_pb2, tts_pb2_grpc

WORDS_PER_SECOND = 5.0
Probe = Callable[[str], float]


def socket_probe(http_url: str, audio: str = "binary") -> Probe:
    """First audio of a new context on one open WebSocket, from its text to its first audio (an agent
    keeps its socket open between turns, as a gRPC client keeps its channel); `audio` is how it
    travels (binary frames after their events, or base64 inside them)."""
    url = http_url.replace("http://", "ws://") + "/v1/audio/speech/stream"
    socket = connect(url)
    socket.send(json.dumps({"type": "start", "response_format": "pcm", "sample_rate_hz": 22050, "audio": audio}))
    json.loads(socket.recv(timeout=30))
    turns = iter(range(1_000_000))

    def probe(text: str) -> float:
        context_id = f"turn-{next(turns)}"
        started = time.perf_counter()
        socket.send(json.dumps({"type": "text", "context_id": context_id, "text": text}))
        socket.send(json.dumps({"type": "close", "context_id": context_id}))
        first = None
        while True:
            message = socket.recv(timeout=120)
            if isinstance(message, bytes):
                if first is None and message:
                    first = time.perf_counter() - started
                continue
            event = json.loads(message)
            assert event["type"] != "error", event
            if first is None and event["type"] == "audio" and event.get("audio"):
                first = time.perf_counter() - started
            if event["type"] == "done":
                break
        assert first is not None
        return first

    return probe


def elevenlabs_probe(http_url: str) -> Probe:
    """The same over ElevenLabs' multi-context socket (as LiveKit's plugin keeps one open)."""
    url = http_url.replace("http://", "ws://") + "/v1/text-to-speech/any/multi-stream-input?output_format=pcm_22050"
    socket = connect(url)
    turns = iter(range(1_000_000))

    def probe(text: str) -> float:
        context_id = f"turn-{next(turns)}"
        started = time.perf_counter()
        socket.send(json.dumps({"text": " ", "context_id": context_id}))
        socket.send(json.dumps({"text": text + " ", "context_id": context_id, "flush": True}))
        socket.send(json.dumps({"context_id": context_id, "close_context": True}))
        first = None
        while not (message := json.loads(socket.recv(timeout=120))).get("isFinal"):
            assert "error" not in message, message
            if first is None and message.get("audio"):
                first = time.perf_counter() - started
        assert first is not None
        return first

    return probe


def wyoming_probe(port: int) -> Probe:
    from wyoming.client import AsyncTcpClient
    from wyoming.tts import Synthesize

    async def one(text: str) -> float:
        started = time.perf_counter()
        first = None
        async with AsyncTcpClient("127.0.0.1", port) as client:
            await client.write_event(Synthesize(text=text).event())
            while True:
                event = await client.read_event()
                assert event is not None and event.type != "error", event
                if event.type == "audio-chunk" and first is None:
                    first = time.perf_counter() - started
                if event.type == "audio-stop":
                    break
        assert first is not None
        return first

    return lambda text: asyncio.run(one(text))


@dataclass(frozen=True)
class StreamedListener:
    """A paragraph fed word by word to a listener who plays from its first audio."""

    words: int
    first_audio_s: float
    longest_wait_s: float
    """The longest the listener waited for audio it should have been hearing (0: never starved)."""
    audio_s: float


def streamed_at_llm_pace(http_url: str, text: str, words_per_second: float = WORDS_PER_SECOND) -> StreamedListener:
    url = http_url.replace("http://", "ws://") + "/v1/audio/speech/stream"
    words = text.split()
    arrivals: list[tuple[float, float, float]] = []  # (arrived, offset, duration)
    with connect(url) as socket:
        socket.send(json.dumps({"type": "start", "response_format": "pcm", "audio": "base64"}))
        json.loads(socket.recv(timeout=30))
        started = time.perf_counter()
        import threading

        def feed() -> None:
            for index, word in enumerate(words):
                time.sleep(max(0.0, started + index / words_per_second - time.perf_counter()))
                socket.send(json.dumps({"type": "text", "text": word + " "}))
            socket.send(json.dumps({"type": "close"}))

        feeder = threading.Thread(target=feed)
        feeder.start()
        for event in _events(socket, "done"):
            if event["type"] == "audio" and event["duration_ms"]:
                arrivals.append((time.perf_counter(), event["offset_ms"] / 1000, event["duration_ms"] / 1000))
        feeder.join()
    first = arrivals[0][0]
    longest = max(max(0.0, arrived - (first + offset)) for arrived, offset, _ in arrivals)
    end = arrivals[-1][1] + arrivals[-1][2]
    return StreamedListener(len(words), first - started, longest, end)


@dataclass(frozen=True)
class CancelOutcome:
    answered_ms: float
    audio_after: int
    heard_exact: bool
    heard_words: int
    other_untouched: bool


def cancel_on_a_playing_context(mesh_address: str, http_url: str) -> CancelOutcome:
    url = http_url.replace("http://", "ws://") + "/v1/audio/speech/stream"
    other_text = "The other context plays on as if nothing happened."
    long_text = "An agent speaks at length, and the person it talks to interrupts it in the middle. " * 3
    with connect(url) as socket:
        socket.send(json.dumps({"type": "start", "audio": "base64", "response_format": "pcm"}))
        json.loads(socket.recv(timeout=30))
        socket.send(json.dumps({"type": "text", "context_id": "other", "text": other_text}))
        socket.send(json.dumps({"type": "close", "context_id": "other"}))
        socket.send(json.dumps({"type": "text", "context_id": "agent", "text": long_text, "flush": True}))
        received: list[dict[str, Any]] = []
        sent_at = 0.0
        played_ms = 0.0
        answered_ms = 0.0
        for event in _events(socket, "cancelled", "agent"):
            received.append(event)
            if not sent_at and event["type"] == "audio" and event["context_id"] == "agent" and event["offset_ms"] > 1500:
                played_ms = event["offset_ms"] - 300.0  # the listener is 300 ms behind what it received
                socket.send(json.dumps({"type": "cancel", "context_id": "agent", "played_ms": played_ms}))
                sent_at = time.perf_counter()
        answered_ms = (time.perf_counter() - sent_at) * 1000
        cancelled = received[-1]
        after: list[dict[str, Any]] = []
        if not any(e["type"] == "done" and e["context_id"] == "other" for e in received):
            after = list(_events(socket, "done", "other"))
    words = [w for e in received if e["type"] == "audio" and e["context_id"] == "agent" for w in e.get("sentence", {}).get("words", [])]
    heard = [w for w in words if w["end_ms"] <= played_ms]
    other = b"".join(base64.b64decode(e["audio"]) for e in received + after if e["type"] == "audio" and e["context_id"] == "other")
    with grpc.insecure_channel(mesh_address) as channel:
        requests = iter([tts_pb2.StreamingSynthesizeRequest(config=tts_pb2.StreamingSynthesizeConfig(sample_rate_hz=24000)),
                         tts_pb2.StreamingSynthesizeRequest(text=other_text)])  # fmt: skip
        alone = b"".join(r.audio for r in tts_pb2_grpc.TextToSpeechStub(channel).StreamingSynthesize(requests, timeout=120))
    return CancelOutcome(
        answered_ms=answered_ms,
        audio_after=sum(1 for e in after if e["type"] == "audio" and e["context_id"] == "agent"),
        heard_exact=cancelled["heard_words"] == heard,
        heard_words=len(heard),
        other_untouched=other == alone,
    )


def livekit_plugin(mesh_address: str, http_url: str, text: str) -> tuple[bool, bool, float]:
    """(audio equals gRPC's, word timings equal ours to 1.5 ms, first audio s) of LiveKit's ElevenLabs plugin."""
    import aiohttp
    from livekit.agents.types import USERDATA_TIMED_TRANSCRIPT
    from livekit.plugins import elevenlabs

    async def run() -> tuple[bytes, list[Any], float]:
        async with aiohttp.ClientSession() as session:
            tts = elevenlabs.TTS(api_key="unused", base_url=f"{http_url}/v1", encoding="pcm_22050", http_session=session)
            stream = tts.stream()
            started = time.perf_counter()
            first = 0.0
            for word in text.split():
                stream.push_text(word + " ")
            stream.flush()
            stream.end_input()
            audio, timed = bytearray(), []
            async for event in stream:
                first = first or time.perf_counter() - started
                audio += bytes(event.frame.data.cast("B"))
                timed += event.frame.userdata.get(USERDATA_TIMED_TRANSCRIPT, [])
            await stream.aclose()
            await tts.aclose()
            return bytes(audio), timed, first

    audio, timed, first = asyncio.run(run())
    with grpc.insecure_channel(mesh_address) as channel:
        responses = list(tts_pb2_grpc.TextToSpeechStub(channel).Synthesize(tts_pb2.SynthesizeRequest(text=text), timeout=120))
    reference = b"".join(r.audio for r in responses)
    words = [w for r in responses if r.HasField("sentence") for w in r.sentence.words]
    same_audio = audio[: len(reference)] == reference and not any(audio[len(reference) :])
    same_words = [str(t).strip().strip(".,") for t in timed] == [w.text for w in words] and all(
        abs(t.start_time - w.start_s) <= 0.0015 for t, w in zip(timed, words, strict=False)
    )
    return same_audio, same_words, first


def resumed_equals_uninterrupted(mesh_address: str, text: str) -> tuple[int, int]:
    """(resume points tried, joined streams equal to the uninterrupted one), over every response of a gRPC stream."""
    with grpc.insecure_channel(mesh_address) as channel:
        stub = tts_pb2_grpc.TextToSpeechStub(channel)
        whole = list(stub.Synthesize(tts_pb2.SynthesizeRequest(text=text), timeout=120))
        audio = b"".join(r.audio for r in whole)
        equal = 0
        cuts = range(1, len(whole), max(1, len(whole) // 8))
        for cut in cuts:
            request = tts_pb2.SynthesizeRequest(text=text, resume_token=whole[cut - 1].resume_point.token)
            rest = b"".join(r.audio for r in stub.Synthesize(request, timeout=120))
            equal += b"".join(r.audio for r in whole[:cut]) + rest == audio
    return len(cuts), equal


def _events(socket: ClientConnection, until: str, context_id: str | None = None) -> Iterator[dict[str, Any]]:
    while True:
        event = json.loads(socket.recv(timeout=120))
        assert event["type"] != "error", event
        yield event
        if event["type"] == until and (context_id is None or event.get("context_id") == context_id):
            return


def median_ms(values: list[float]) -> float:
    return statistics.median(values) * 1000
