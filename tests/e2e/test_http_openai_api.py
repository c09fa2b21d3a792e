"""The gateway's HTTP door, driven by the real `openai` package pointed at it: every response format
streamed to a file decodes to the speech the gRPC door gives for the same text; server-sent events
carry the same audio; errors come back as OpenAI-shaped JSON with the matching HTTP status."""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path

import grpc
import httpx
import numpy as np
import openai
import pytest

from libs.pb.tts.v1 import tts_pb2, tts_pb2_grpc
from tests.support.mesh import Mesh
from tests.unit.test_encoding_codecs import aligned_correlation, decode

TEXT = "The same speech through another door."
FORMATS = {
    "mp3": (tts_pb2.MP3, 22050),
    "opus": (tts_pb2.OGG_OPUS, 48000),
    "aac": (tts_pb2.AAC, 22050),
    "flac": (tts_pb2.FLAC, 22050),
    "wav": (tts_pb2.WAV, 22050),
    "pcm": (tts_pb2.LINEAR_PCM, 24000),
}


@pytest.fixture(scope="module")
def client(mesh: Mesh) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{mesh.http_url}/v1", api_key="not-needed-without-keys", max_retries=0)


def _grpc_pcm(mesh: Mesh, sample_rate_hz: int) -> np.ndarray:
    with grpc.insecure_channel(mesh.gateway_address) as channel:
        request = tts_pb2.SynthesizeRequest(text=TEXT, encoding=tts_pb2.LINEAR_PCM, sample_rate_hz=sample_rate_hz)
        pcm = b"".join(r.audio for r in tts_pb2_grpc.TextToSpeechStub(channel).Synthesize(request, timeout=120))
    return np.frombuffer(pcm, dtype="<i2").astype(np.float32) / 32767.0


@pytest.mark.parametrize("response_format", sorted(FORMATS))
def test_every_response_format_streams_to_a_file_that_decodes_to_the_grpc_speech(
    mesh: Mesh, client: openai.OpenAI, tmp_path: Path, response_format: str
) -> None:
    out = tmp_path / f"speech.{response_format}"
    with client.audio.speech.with_streaming_response.create(
        model="tts-1", voice="alloy", input=TEXT, response_format=response_format  # type: ignore[arg-type]
    ) as response:
        assert response.http_response.status_code == 200
        response.stream_to_file(out)
    encoding, rate_hz = FORMATS[response_format]
    decoded = decode(encoding, out.read_bytes(), rate_hz)
    reference = _grpc_pcm(mesh, rate_hz)
    frame = {tts_pb2.MP3: 2304, tts_pb2.AAC: 2048, tts_pb2.OGG_OPUS: 960}.get(encoding, 0)
    assert abs(len(decoded) - len(reference)) <= frame
    assert aligned_correlation(reference, decoded, max_lag=frame) >= (0.95 if frame else 0.9999)


def _sse_events(mesh: Mesh, body: dict[str, object]) -> list[dict[str, object]]:
    events = []
    with httpx.stream("POST", f"{mesh.http_url}/v1/audio/speech", json=body, timeout=120) as response:
        assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
        for line in response.iter_lines():
            if line.startswith("data: "):
                events.append(json.loads(line[len("data: ") :]))
    return events


def test_server_sent_events_carry_each_sentences_words_before_its_audio_then_done(mesh: Mesh) -> None:
    body = {"model": "tts-mesh", "voice": "en_US-joe-medium", "input": TEXT, "response_format": "pcm", "stream_format": "sse"}
    events = _sse_events(mesh, body)
    assert {event["type"] for event in events[:-1]} == {"speech.audio.sentence", "speech.audio.delta"}
    assert events[0]["type"] == "speech.audio.sentence"  # the words come before the audio they time
    assert events[-1]["type"] == "speech.audio.done"
    deltas = [event for event in events if event["type"] == "speech.audio.delta"]
    pcm = b"".join(base64.b64decode(event["audio"]) for event in deltas)
    np.testing.assert_array_equal(np.frombuffer(pcm, dtype="<i2").astype(np.float32) / 32767.0, _grpc_pcm(mesh, 24000))
    assert events[-1]["usage"]["audio_seconds"] == pytest.approx(len(pcm) / 2 / 24000, abs=1e-3)
    with grpc.insecure_channel(mesh.gateway_address) as channel:
        request = tts_pb2.SynthesizeRequest(text=TEXT, sample_rate_hz=24000)
        responses = list(tts_pb2_grpc.TextToSpeechStub(channel).Synthesize(request, timeout=120))
    grpc_words = [(w.text, round(w.start_s, 4), round(w.end_s, 4)) for r in responses if r.HasField("sentence") for w in r.sentence.words]
    sse_words = [(w["word"], w["start"], w["end"]) for e in events if e["type"] == "speech.audio.sentence" for w in e["words"]]  # type: ignore[union-attr]
    assert sse_words == grpc_words


def test_server_sent_events_resume_from_a_token_sample_for_sample(mesh: Mesh) -> None:
    body = {"input": TEXT + " And one more sentence after it.", "response_format": "pcm", "stream_format": "sse"}
    deltas = [event for event in _sse_events(mesh, body) if event["type"] == "speech.audio.delta"]
    whole = b"".join(base64.b64decode(event["audio"]) for event in deltas)  # type: ignore[arg-type]
    cut = len(deltas) // 2
    rest = _sse_events(mesh, {**body, "resume_token": deltas[cut - 1]["resume_token"]})
    resumed = b"".join(base64.b64decode(event["audio"]) for event in rest if event["type"] == "speech.audio.delta")  # type: ignore[arg-type]
    had = b"".join(base64.b64decode(event["audio"]) for event in deltas[:cut])  # type: ignore[arg-type]
    assert resumed and had + resumed == whole


@pytest.mark.parametrize(
    ("body", "status", "param"),
    [
        ({"model": "tts-1", "voice": "alloy", "input": ""}, 400, "input"),
        ({"model": "tts-1", "voice": "alloy", "input": "x" * 5001}, 400, "input"),
        ({"model": "tts-1", "voice": "nobody", "input": "Hi."}, 404, "voice"),
        ({"model": "tts-1", "voice": "alloy", "input": "Hi.", "speed": 9}, 400, "speed"),
        ({"model": "whisper-1", "voice": "alloy", "input": "Hi."}, 404, "model"),
        ({"model": "tts-1", "voice": "alloy", "input": "Hi.", "response_format": "ogg"}, 400, "response_format"),
        ({"model": "tts-1", "voice": "alloy"}, 400, "input"),
        ({"model": "tts-1", "voice": "alloy", "input": "Hi.", "sample_rate": 16000}, 400, "sample_rate"),
    ],
)
def test_bad_requests_get_openai_shaped_errors(mesh: Mesh, body: dict, status: int, param: str | None) -> None:
    response = httpx.post(f"{mesh.http_url}/v1/audio/speech", json=body, timeout=30)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["message"] and error["type"] and error["param"] == param


def test_the_openai_client_raises_its_own_errors(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError):
        client.audio.speech.create(model="tts-1", voice="nobody", input="Hi.")
    with pytest.raises(openai.BadRequestError):
        client.audio.speech.create(model="tts-1", voice="alloy", input=" ")


def test_models_and_voices_are_listed(client: openai.OpenAI, mesh: Mesh) -> None:
    assert {model.id for model in client.models.list()} >= {"tts-mesh", "tts-1"}
    voices = httpx.get(f"{mesh.http_url}/v1/audio/voices", timeout=30).json()
    assert [voice["id"] for voice in voices["data"] if voice["default"]] == ["en_US-joe-medium"]


def test_a_body_over_the_limit_is_refused_before_it_is_read(mesh: Mesh) -> None:
    response = httpx.post(f"{mesh.http_url}/v1/audio/speech", content=io.BytesIO(b"{" + b" " * 200_000 + b"}").read(), timeout=30)
    assert response.status_code == 413


def test_captioned_speech_gives_the_audio_and_the_word_times_of_grpc(mesh: Mesh) -> None:
    body = {"model": "tts-1", "voice": "alloy", "input": "Captions, timed by word. Twice over.", "response_format": "wav"}
    answer = httpx.post(f"{mesh.http_url}/v1/audio/speech/captioned", json=body, timeout=120)
    assert answer.status_code == 200, answer.text
    captioned = answer.json()
    assert captioned["content_type"] == "audio/wav"
    assert base64.b64decode(captioned["audio"])[:4] == b"RIFF"
    with grpc.insecure_channel(mesh.gateway_address) as channel:
        request = tts_pb2.SynthesizeRequest(text=body["input"], encoding=tts_pb2.WAV)
        responses = list(tts_pb2_grpc.TextToSpeechStub(channel).Synthesize(request, timeout=120))
    grpc_words = [(w.text, round(w.start_s, 4), round(w.end_s, 4)) for r in responses if r.HasField("sentence") for w in r.sentence.words]
    assert [(w["word"], w["start"], w["end"]) for w in captioned["words"]] == grpc_words
    assert [s["text"] for s in captioned["sentences"]] == ["Captions, timed by word.", "Twice over."]

    vtt = httpx.post(f"{mesh.http_url}/v1/audio/speech/captioned", json={**body, "caption_format": "vtt"}, timeout=120)
    assert vtt.status_code == 200 and vtt.headers["content-type"].startswith("text/vtt")
    lines = vtt.text.splitlines()
    assert lines[0] == "WEBVTT"
    cues = [line for line in lines if "-->" in line]
    assert len(cues) == 2 and cues[0].startswith("00:00:00.000 --> ")
    assert "<00:00:" in lines[lines.index(cues[0]) + 1] and "Captions" in lines[lines.index(cues[0]) + 1]

    bad = httpx.post(f"{mesh.http_url}/v1/audio/speech/captioned", json={**body, "caption_format": "srt"}, timeout=30)
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "caption_format"
