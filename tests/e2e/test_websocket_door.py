"""The WebSocket door (`/v1/audio/speech/stream`) on the real gateway: text streamed word by word is
spoken as StreamingSynthesize speaks it, each sentence's words before its audio; flush speaks what
is held at once; cancel stops one context and answers with exactly the words whose audio ended
before the played time while the socket's other context plays on; a context resumes sample-exact
from a token; telephone frames are 20 ms of mu-law; bad starts and oversized messages are refused
with the same codes as gRPC."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from itertools import pairwise
from typing import Any

import grpc
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from libs.pb.tts.v1 import tts_pb2, tts_pb2_grpc
from tests.support.mesh import Mesh

PATH = "/v1/audio/speech/stream"
WORDS = ["Every", "word", "arrives", "on", "its", "own,", "as", "a", "model", "writes", "it.", "The", "socket", "speaks", "each", "sentence", "once", "it", "is", "whole."]


def ws_url(mesh: Mesh) -> str:
    return mesh.http_url.replace("http://", "ws://") + PATH


def events(socket: ClientConnection, until: str, context_id: str | None = None, timeout_s: float = 60) -> Iterator[dict[str, Any]]:
    """The socket's events (binary audio attached to its `audio` event as `data`) up to and including `until`."""
    deadline = time.monotonic() + timeout_s
    while True:
        message = socket.recv(timeout=max(0.1, deadline - time.monotonic()))
        assert isinstance(message, str), "a binary frame must follow its audio event"
        event = json.loads(message)
        if event["type"] == "audio" and "bytes" in event:
            data = socket.recv(timeout=max(0.1, deadline - time.monotonic())) if event["bytes"] else b""
            assert isinstance(data, bytes) and len(data) == event["bytes"]
            event["data"] = data
        elif event["type"] == "audio":
            event["data"] = base64.b64decode(event["audio"])
        yield event
        if event["type"] == until and (context_id is None or event.get("context_id") == context_id):
            return
        assert event["type"] != "error", event


def _sentences(received: list[dict[str, Any]], context_id: str | None = None) -> list[dict[str, Any]]:
    """The sentences the audio events carried (on each sentence's first), of one context or all."""
    return [
        e["sentence"] for e in received
        if e["type"] == "audio" and "sentence" in e and (context_id is None or e["context_id"] == context_id)
    ]  # fmt: skip


def start(socket: ClientConnection, **fields: Any) -> dict[str, Any]:
    socket.send(json.dumps({"type": "start", **fields}))
    ready = json.loads(socket.recv(timeout=30))
    assert ready["type"] == "ready", ready
    return ready


def _streaming_grpc(mesh: Mesh, pieces: list[str], **config: Any) -> list[tts_pb2.SynthesizeResponse]:
    def requests() -> Iterator[tts_pb2.StreamingSynthesizeRequest]:
        yield tts_pb2.StreamingSynthesizeRequest(config=tts_pb2.StreamingSynthesizeConfig(**config))
        for piece in pieces:
            yield tts_pb2.StreamingSynthesizeRequest(text=piece)

    with grpc.insecure_channel(mesh.gateway_address) as channel:
        return list(tts_pb2_grpc.TextToSpeechStub(channel).StreamingSynthesize(requests(), timeout=120))


def test_words_streamed_one_by_one_are_spoken_as_streaming_synthesize_speaks_them(mesh: Mesh) -> None:
    pieces = [word + " " for word in WORDS]
    with connect(ws_url(mesh)) as socket:
        ready = start(socket, response_format="pcm", sample_rate_hz=22050)
        assert ready["sample_rate_hz"] == 22050
        for piece in pieces:
            socket.send(json.dumps({"type": "text", "text": piece}))
        socket.send(json.dumps({"type": "close", "context_id": "0"}))
        received = list(events(socket, "done"))
    audio = b"".join(event["data"] for event in received if event["type"] == "audio")
    reference = _streaming_grpc(mesh, pieces, encoding=tts_pb2.LINEAR_PCM, sample_rate_hz=22050)
    assert audio == b"".join(response.audio for response in reference)
    sentences = _sentences(received)
    grpc_words = [(w.text, round(w.start_s * 1000, 3)) for r in reference if r.HasField("sentence") for w in r.sentence.words]
    assert [(w["word"], w["start_ms"]) for s in sentences for w in s["words"]] == grpc_words
    for sentence in sentences:  # each sentence's words ride on its first audio, before its bytes
        first_audio = next(e for e in received if e["type"] == "audio" and e["sentence_index"] == sentence["index"])
        assert first_audio.get("sentence") == sentence
    assert received[-1]["audio_ms"] == pytest.approx(len(audio) / 2 / 22050 * 1000, abs=0.01)


def test_flush_speaks_the_held_text_at_once_and_flushed_follows_its_last_audio(mesh: Mesh) -> None:
    with connect(ws_url(mesh)) as socket:
        start(socket)
        sent = time.monotonic()
        socket.send(json.dumps({"type": "text", "text": "No sentence end here yet", "flush": True}))
        held = list(events(socket, "flushed"))
        flushed_after_s = time.monotonic() - sent
        socket.send(json.dumps({"type": "text", "text": "and then the rest."}))
        socket.send(json.dumps({"type": "close"}))
        rest = list(events(socket, "done"))
    assert [s["text"] for s in _sentences(held)] == ["No sentence end here yet"]
    assert any(e["type"] == "audio" and e["sentence_end"] for e in held)  # the whole sentence came before `flushed`
    assert flushed_after_s < 2.0  # not held for --sentence-wait-s
    assert [s["text"] for s in _sentences(rest)] == ["and then the rest."]
    assert [s["index"] for s in _sentences(rest)] == [1]


def test_cancel_answers_with_the_words_heard_and_the_other_context_plays_on(mesh: Mesh) -> None:
    other_text = "The other context plays on untouched."
    long_text = "This context is interrupted while it speaks. It has a great deal more to say after that, which nobody hears."
    with connect(ws_url(mesh)) as socket:
        start(socket, audio="base64")
        socket.send(json.dumps({"type": "text", "context_id": "other", "text": other_text}))
        socket.send(json.dumps({"type": "close", "context_id": "other"}))
        socket.send(json.dumps({"type": "text", "context_id": "agent", "text": long_text, "flush": True}))
        received: list[dict[str, Any]] = []
        played_ms = None
        cancel_sent = 0.0
        for event in events(socket, "cancelled", "agent"):
            received.append(event)
            if played_ms is None and event["type"] == "audio" and event["context_id"] == "agent" and event["offset_ms"] > 1000:
                words = [w for s in _sentences(received, "agent") for w in s["words"]]
                played_ms = (words[3]["start_ms"] + words[3]["end_ms"]) / 2  # the listener stopped mid-word
                socket.send(json.dumps({"type": "cancel", "context_id": "agent", "played_ms": played_ms}))
                cancel_sent = time.monotonic()
        cancelled = received[-1]
        answered_s = time.monotonic() - cancel_sent
        after = list(events(socket, "done", "other")) if not any(e["type"] == "done" for e in received) else []
    words = [w for s in _sentences(received, "agent") for w in s["words"]]
    heard = [w for w in words if w["end_ms"] <= played_ms]
    assert cancelled["heard_words"] == heard and len(heard) == 3
    assert cancelled["heard_text"] == "This context is"
    assert answered_s < 1.0
    assert not any(e["type"] == "audio" and e["context_id"] == "agent" for e in after)  # nothing after `cancelled`
    other_audio = b"".join(e["data"] for e in received + after if e["type"] == "audio" and e["context_id"] == "other")
    reference = _streaming_grpc(mesh, [other_text], encoding=tts_pb2.LINEAR_PCM, sample_rate_hz=24000)
    assert other_audio == b"".join(response.audio for response in reference)


def test_a_context_resumes_from_its_token_sample_for_sample(mesh: Mesh) -> None:
    text = "A context can be resumed. The client sends its text again with the token it has."
    with connect(ws_url(mesh)) as socket:
        start(socket, audio="base64", response_format="pcm")
        socket.send(json.dumps({"type": "text", "context_id": "a", "text": text}))
        socket.send(json.dumps({"type": "close", "context_id": "a"}))
        whole = [e for e in events(socket, "done") if e["type"] == "audio"]
    cut = len(whole) // 2
    with connect(ws_url(mesh)) as socket:
        start(socket, audio="base64", response_format="pcm")
        socket.send(json.dumps({"type": "text", "context_id": "a", "text": text, "resume_token": whole[cut - 1]["resume_token"]}))
        socket.send(json.dumps({"type": "close", "context_id": "a"}))
        rest = [e for e in events(socket, "done") if e["type"] == "audio"]
    assert b"".join(e["data"] for e in whole[:cut] + rest) == b"".join(e["data"] for e in whole)
    assert rest[0]["offset_ms"] == whole[cut]["offset_ms"]


def test_telephone_audio_leaves_as_20_ms_mulaw_frames_in_real_time(mesh: Mesh) -> None:
    with connect(ws_url(mesh)) as socket:
        ready = start(socket, response_format="mulaw", frame_ms=20)
        assert ready["sample_rate_hz"] == 8000
        socket.send(json.dumps({"type": "text", "text": "Hello, caller."}))
        socket.send(json.dumps({"type": "close"}))
        arrivals: list[tuple[float, dict[str, Any]]] = [(time.monotonic(), e) for e in events(socket, "done")]
    frames = [(at, e) for at, e in arrivals if e["type"] == "audio"]
    assert {len(e["data"]) for _, e in frames} == {160}
    assert [e["offset_ms"] for _, e in frames] == pytest.approx([20.0 * index for index in range(len(frames))])
    gaps = [later[0] - earlier[0] for earlier, later in pairwise(frames)]
    # Never faster than real time: no burst. Frame k leaves no sooner than k frames after the first, and
    # is read here no sooner than it leaves, but it may be read later: this process waits for the CPU
    # like any other (the first frame was once read with the second, 54 ms late, while the workers made
    # the rest). The pace is therefore counted from whichever of the first three frames was read least
    # late, each arrival less its place on the timeline.
    first = min(range(3), key=lambda index: frames[index][0] - 0.02 * index)
    assert frames[-1][0] - frames[first][0] >= 0.02 * (len(frames) - 1 - first) - 0.05
    assert sorted(gaps)[len(gaps) // 2] == pytest.approx(0.02, abs=0.005)  # a frame every 20 ms (a late one waits no more)


@pytest.mark.parametrize(
    ("first", "code", "param"),
    [
        ({"type": "start", "speed": "fast"}, "INVALID_ARGUMENT", "speed"),
        ({"type": "start", "voice": "nobody"}, "NOT_FOUND", "voice"),
        ({"type": "start", "frame_ms": 20, "response_format": "mp3"}, "INVALID_ARGUMENT", "frame_ms"),
        ({"type": "text", "text": "no start"}, "INVALID_ARGUMENT", "type"),
    ],
)
def test_a_bad_start_is_refused_with_the_grpc_code_and_the_field(mesh: Mesh, first: dict[str, Any], code: str, param: str) -> None:
    with connect(ws_url(mesh)) as socket:
        socket.send(json.dumps(first))
        error = json.loads(socket.recv(timeout=30))
        with pytest.raises(ConnectionClosed) as closed:
            socket.recv(timeout=30)
    assert (error["type"], error["code"], error.get("param")) == ("error", code, param)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1008


def test_a_message_over_the_limit_closes_the_socket_as_too_big(mesh: Mesh) -> None:
    with connect(ws_url(mesh), max_size=None) as socket:
        start(socket)
        socket.send(json.dumps({"type": "text", "text": "a" * (1024 * 1024)}))
        with pytest.raises(ConnectionClosed) as closed:
            socket.recv(timeout=30)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1009


def test_flush_close_and_cancel_of_a_context_never_opened_are_each_answered(mesh: Mesh) -> None:
    with connect(ws_url(mesh)) as socket:
        start(socket, audio="base64")
        answers = []
        for kind in ("flush", "close", "cancel"):
            socket.send(json.dumps({"type": kind, "context_id": "nope"}))
            answers.append(json.loads(socket.recv(timeout=10)))
        socket.send(json.dumps({"type": "text", "context_id": "a", "text": "Still here.", "flush": True}))
        socket.send(json.dumps({"type": "close", "context_id": "a"}))
        spoken = list(events(socket, "done", "a"))
    assert [(answer["type"], answer["context_id"]) for answer in answers] == [("flushed", "nope"), ("done", "nope"), ("cancelled", "nope")]
    assert any(event["type"] == "audio" for event in spoken)


def test_closing_every_context_closes_the_socket_once_they_are_spoken(mesh: Mesh) -> None:
    with connect(ws_url(mesh)) as socket:
        start(socket, audio="base64")
        socket.send(json.dumps({"type": "text", "context_id": "a", "text": "First one."}))
        socket.send(json.dumps({"type": "close"}))  # every context, then the socket
        received = list(events(socket, "done", "a"))
        started = time.monotonic()
        with pytest.raises(ConnectionClosed) as closed:
            socket.recv(timeout=30)
    assert received[-1]["type"] == "done"
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1000
    assert time.monotonic() - started < 5.0  # at once, not after the idle timeout


def test_an_ssml_document_is_a_contexts_whole_text_with_its_marks(mesh: Mesh) -> None:
    document = '<speak>Ring the bell. <mark name="after-bell"/><break time="300ms"/>Then wait.</speak>'
    with connect(ws_url(mesh)) as socket:
        start(socket, audio="base64", response_format="pcm", sample_rate_hz=22050)
        socket.send(json.dumps({"type": "text", "context_id": "doc", "text": document}))
        received = list(events(socket, "done", "doc"))
    marks = [e for e in received if e["type"] == "mark"]
    assert [m["name"] for m in marks] == ["after-bell"]
    with grpc.insecure_channel(mesh.gateway_address) as channel:
        request = tts_pb2.SynthesizeRequest(text=document, sample_rate_hz=22050)
        reference = list(tts_pb2_grpc.TextToSpeechStub(channel).Synthesize(request, timeout=120))
    assert b"".join(e["data"] for e in received if e["type"] == "audio") == b"".join(r.audio for r in reference)
    grpc_marks = [(m.name, round(m.time_s * 1000, 3)) for r in reference if r.HasField("sentence") for m in r.sentence.marks]
    assert [(m["name"], m["time_ms"]) for m in marks] == grpc_marks
