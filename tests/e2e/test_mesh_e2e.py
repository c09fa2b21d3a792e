"""The whole mesh as real processes on loopback: audio, cache, streaming input, bad input, cancellation."""

from __future__ import annotations

import queue
import threading
import time
import uuid

import grpc
import numpy as np
import pytest

from libs.pb.tts.v1 import tts_pb2, tts_pb2_grpc
from tests.support.client import synthesize
from tests.support.mesh import Mesh

ACOUSTIC_SENTENCES = "tts_acoustic_sentences_total"
RATE_HZ = 22050


def _unique(text: str) -> str:
    """Text no earlier test has spoken, so the cache starts cold for it."""
    return f"{text} Request {uuid.uuid4().int % 100000}."


def _rpc_error(call) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as caught:
        for _ in call:
            pass
    return caught.value


def test_two_sentences_become_audio_of_plausible_length(mesh: Mesh) -> None:
    spoken = synthesize(mesh.gateway_address, _unique("The quick brown fox jumps over the lazy dog."))
    assert spoken.sample_rate_hz == RATE_HZ
    assert {r.sentence_index for r in spoken.responses} == {0, 1}
    assert 2.0 < spoken.duration_s < 10.0, spoken.duration_s
    samples = spoken.samples
    assert np.sqrt(np.mean(samples**2)) > 0.02, "audio is (near) silence"
    assert np.max(np.abs(samples)) < 1.0
    # Pieces tile the timeline without gaps or overlaps, and each sentence says where it is.
    offsets = [r.audio_offset_s for r in spoken.responses]
    ends = [r.audio_offset_s + r.audio_duration_s for r in spoken.responses]
    assert offsets[0] == 0.0 and all(abs(a - b) < 1e-9 for a, b in zip(ends[:-1], offsets[1:], strict=False))
    firsts = [r for r in spoken.responses if r.HasField("sentence")]
    assert [r.sentence.index for r in firsts] == [0, 1]
    assert firsts[0].sentence.text.startswith("The quick brown fox")
    assert abs(sum(r.sentence.audio_duration_s for r in firsts) - spoken.duration_s) < 0.01
    assert [r.sentence_end for r in spoken.responses].count(True) == 2


def test_repeated_sentence_is_served_from_redis_without_the_acoustic_worker(mesh: Mesh) -> None:
    text = _unique("A sentence worth caching.")
    before_cold = mesh.metric("acoustic", ACOUSTIC_SENTENCES)
    cold = synthesize(mesh.gateway_address, text)
    after_cold = mesh.metric("acoustic", ACOUSTIC_SENTENCES)
    hits_before = mesh.metric("gateway", 'tts_gateway_cache_operations_total{outcome="hit"}')
    heads_before = mesh.metric("gateway", 'tts_gateway_cache_operations_total{outcome="head_hit"}')
    warm = synthesize(mesh.gateway_address, text)
    assert after_cold - before_cold == 2  # both sentences were synthesised once
    assert mesh.metric("acoustic", ACOUSTIC_SENTENCES) == after_cold, "the acoustic worker was called on a hit"
    assert mesh.metric("gateway", 'tts_gateway_cache_operations_total{outcome="hit"}') - hits_before == 2
    # Each hit also brought the sentence's first audio (the cold request stored it), which the client
    # got before the vocoder's first step; the vocoder's own samples take over where it ends.
    assert mesh.metric("gateway", 'tts_gateway_cache_operations_total{outcome="head_hit"}') - heads_before == 2
    # The mel travels as float16 on a miss too, so the vocoder gets the same numbers either way.
    assert np.array_equal(warm.samples, cold.samples), "a cached sentence must sound exactly like a fresh one"
    print(f"\ncold: first audio {cold.first_audio_s:.3f} s, total {cold.total_s:.3f} s; "
          f"warm: first audio {warm.first_audio_s:.3f} s, total {warm.total_s:.3f} s; audio {cold.duration_s:.2f} s")


def test_streaming_synthesize_speaks_a_sentence_before_the_client_half_closes(mesh: Mesh) -> None:
    first_audio = threading.Event()
    sent: queue.Queue[str] = queue.Queue()

    def requests():
        yield tts_pb2.StreamingSynthesizeRequest(config=tts_pb2.StreamingSynthesizeConfig())
        for piece in ("Streaming text arrives ", "piece by piece. ", "And then"):
            sent.put(piece)
            yield tts_pb2.StreamingSynthesizeRequest(text=piece)
        # Hold the stream open until the first sentence has been heard (or give up after 60 s).
        sent.put("heard" if first_audio.wait(timeout=60) else "timeout")
        yield tts_pb2.StreamingSynthesizeRequest(text=" it ends.")

    with grpc.insecure_channel(mesh.gateway_address) as channel:
        stub = tts_pb2_grpc.TextToSpeechStub(channel)
        responses = []
        for response in stub.StreamingSynthesize(requests(), timeout=120):
            if response.audio:
                first_audio.set()
            responses.append(response)
    progress = list(sent.queue)
    assert progress[-1] == "heard", "no audio arrived while the client still held the stream open"
    first_sentence = [r for r in responses if r.sentence_index == 0]
    assert first_sentence[0].sentence.text.startswith("Streaming text arrives piece by piece.")
    assert {r.sentence_index for r in responses} == {0, 1}
    assert [r.sentence.text for r in responses if r.HasField("sentence")][1].startswith("And then it ends.")


@pytest.mark.parametrize(
    "fields, code, message",
    [
        (dict(text=""), grpc.StatusCode.INVALID_ARGUMENT, "empty"),
        (dict(text="   \n\t "), grpc.StatusCode.INVALID_ARGUMENT, "empty"),
        (dict(text="♪♪♪"), grpc.StatusCode.INVALID_ARGUMENT, "no words"),
        (dict(text="word " * 1001), grpc.StatusCode.INVALID_ARGUMENT, "limit is 5000 characters"),
        (dict(text="Hello.", voice="xx_XX-nobody"), grpc.StatusCode.NOT_FOUND, "en_US-joe-medium"),
        (dict(text="Hello.", speed=4.5), grpc.StatusCode.INVALID_ARGUMENT, "0.25 to 4.0"),
        (dict(text="Hello.", speed=0.1), grpc.StatusCode.INVALID_ARGUMENT, "0.25 to 4.0"),
        (dict(text="Hello.", encoding=42), grpc.StatusCode.INVALID_ARGUMENT, "encoding"),
        (dict(text="Hello.", sample_rate_hz=1000), grpc.StatusCode.INVALID_ARGUMENT, "sample_rate_hz"),
    ],
    ids=["empty", "whitespace", "no-words", "too-long", "unknown-voice", "too-fast", "too-slow", "bad-encoding", "bad-rate"],
)
def test_bad_input_gets_a_clear_status(mesh: Mesh, fields: dict, code: grpc.StatusCode, message: str) -> None:
    with grpc.insecure_channel(mesh.gateway_address) as channel:
        call = tts_pb2_grpc.TextToSpeechStub(channel).Synthesize(tts_pb2.SynthesizeRequest(**fields), timeout=30)
        error = _rpc_error(call)
    assert error.code() == code
    assert message in error.details()


def test_invalid_utf8_text_is_invalid_argument_and_the_gateway_keeps_serving(mesh: Mesh) -> None:
    # protobuf refuses to serialise invalid UTF-8 into a string field, so send hand-encoded bytes:
    # field 1 (text), wire type 2, length 6.
    raw_request = bytes([0x0A, 6]) + b"Hi \xff\xfe!"
    with grpc.insecure_channel(mesh.gateway_address) as channel:
        call = channel.unary_stream(
            "/tts.v1.TextToSpeech/Synthesize",
            request_serializer=None,
            response_deserializer=tts_pb2.SynthesizeResponse.FromString,
        )(raw_request, timeout=30)
        error = _rpc_error(call)
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "field `text` is not valid UTF-8: byte 0xff at byte offset 3" in error.details()
    assert synthesize(mesh.gateway_address, "Still here.").duration_s > 0.3


def test_client_cancel_stops_worker_streams_and_frees_them(mesh: Mesh) -> None:
    sentences = 12
    text = " ".join(_unique(f"This is sentence number {n} of a long text.") for n in range(sentences))
    sentences_before = mesh.metric("acoustic", ACOUSTIC_SENTENCES)
    cancelled_before = {
        name: mesh.metric(name, f'tts_{name}_streams_total{{code="CANCELLED"}}') for name in ("acoustic", "vocoder")
    }
    with grpc.insecure_channel(mesh.gateway_address) as channel:
        call = tts_pb2_grpc.TextToSpeechStub(channel).Synthesize(tts_pb2.SynthesizeRequest(text=text), timeout=120)
        first = next(call)
        assert first.audio
        assert mesh.metric("acoustic", "tts_acoustic_inflight_streams") == 1
        call.cancel()
    def ended(name: str) -> bool:
        # A stream leaves the in-flight gauge as its handler ends, and is counted by how it ended once
        # its call is done, a moment later (`StreamTracker`): wait for both.
        in_flight = mesh.metric(name, f"tts_{name}_inflight_streams")
        return in_flight == 0 and mesh.metric(name, f'tts_{name}_streams_total{{code="CANCELLED"}}') > cancelled_before[name]

    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if all(ended(name) for name in ("acoustic", "vocoder")):
            break
        time.sleep(0.1)
    for name in ("acoustic", "vocoder"):
        assert mesh.metric(name, f"tts_{name}_inflight_streams") == 0, f"{name} still holds the cancelled stream"
        ended_as = {key: value for key, value in mesh.metrics(name).items() if key.startswith(f"tts_{name}_streams_total{{")}
        assert mesh.metric(name, f'tts_{name}_streams_total{{code="CANCELLED"}}') == cancelled_before[name] + 1, ended_as
    time.sleep(1.0)
    done = mesh.metric("acoustic", ACOUSTIC_SENTENCES) - sentences_before
    # The gateway runs at most two sentences ahead of the audio, so little beyond the first ones was made.
    assert done <= 4, f"the acoustic worker kept going after the cancel ({done} of {2 * sentences} sentences)"


def test_list_voices_names_the_default_voice(mesh: Mesh) -> None:
    with grpc.insecure_channel(mesh.gateway_address) as channel:
        reply = tts_pb2_grpc.TextToSpeechStub(channel).ListVoices(tts_pb2.ListVoicesRequest(language_code="en"), timeout=10)
    assert [(v.name, v.language_code, v.natural_sample_rate_hz, v.is_default) for v in reply.voices] == [
        ("en_US-joe-medium", "en-US", 22050, True)
    ]


def test_the_gateway_serves_without_loading_torch(mesh: Mesh) -> None:
    # The gateway reads voice folders and speaks the wire, nothing more: torch (seconds of start-up and
    # hundreds of MiB in every gateway) belongs to the workers alone.
    assert synthesize(mesh.gateway_address, _unique("A gateway light on its feet.")).duration_s > 0.5
    mapped = {name: _mapped_libraries(mesh.services[name].process.pid) for name in ("gateway", "acoustic")}
    assert any("libtorch" in library for library in mapped["acoustic"]), "the check reads a process's libraries"
    assert not [library for library in mapped["gateway"] if "libtorch" in library]


def _mapped_libraries(pid: int) -> set[str]:
    """The files a running process has mapped (its loaded shared libraries among them)."""
    with open(f"/proc/{pid}/maps", encoding="utf-8") as maps:
        return {line.split()[-1] for line in maps if "/" in line}
