"""SSML through the real mesh: breaks are real silence of the stated length on the timeline, marks
are reported with their times, prosody rate slows the speech, phoneme/sub/say-as are spoken, the
sentences are cached (a repeat is served from Redis, sample for sample), and anything outside the
subset is INVALID_ARGUMENT naming it."""

from __future__ import annotations

import uuid

import grpc
import numpy as np
import pytest

from libs.pb.tts.v1 import tts_pb2, tts_pb2_grpc
from tests.support.client import synthesize
from tests.support.mesh import Mesh

_CACHE_HITS = 'tts_gateway_cache_operations_total{outcome="hit"}'


def _sentences(spoken) -> list[tts_pb2.SentenceInfo]:  # type: ignore[no-untyped-def]
    return [response.sentence for response in spoken.responses if response.HasField("sentence")]


def test_a_break_is_silence_of_its_length_between_the_sentences(mesh: Mesh) -> None:
    spoken = synthesize(mesh.gateway_address, '<speak>The first part.<break time="700ms"/>The second part.</speak>')
    first, second = _sentences(spoken)
    assert first.pause_after_s == pytest.approx(0.7)
    rate = spoken.sample_rate_hz
    speech_end = round((first.audio_offset_s + first.audio_duration_s) * rate)
    pause = spoken.samples[speech_end + 2 : speech_end + round(0.7 * rate) - 2]
    assert len(pause) > 0.69 * rate and not np.any(pause)  # exactly zero: real silence
    assert second.audio_offset_s == pytest.approx(first.audio_offset_s + first.audio_duration_s + 0.7, abs=2 / rate)
    assert np.any(spoken.samples[: speech_end - round(0.1 * rate)])  # the speech before it is not silent


def test_marks_are_reported_with_their_times(mesh: Mesh) -> None:
    spoken = synthesize(
        mesh.gateway_address,
        '<speak><mark name="start"/>Hello there.<mark name="after"/><break time="300ms"/><mark name="later"/>Bye now.</speak>',
    )
    first, second = _sentences(spoken)
    marks = {mark.name: mark.time_s for info in (first, second) for mark in info.marks}
    assert marks["start"] == pytest.approx(0.0)
    assert marks["after"] == pytest.approx(first.audio_offset_s + first.audio_duration_s, abs=1e-6)
    assert marks["later"] == pytest.approx(marks["after"] + 0.3, abs=1e-6)
    assert second.audio_offset_s >= marks["later"] - 1e-6


def test_prosody_rate_slows_the_speech_and_phoneme_sub_say_as_are_spoken(mesh: Mesh) -> None:
    normal = synthesize(mesh.gateway_address, "Slowly does it, my friend.")
    slow = synthesize(mesh.gateway_address, '<speak><prosody rate="50%">Slowly does it, my friend.</prosody></speak>')
    assert slow.duration_s > 1.6 * normal.duration_s
    (info,) = _sentences(
        synthesize(
            mesh.gateway_address,
            'Say <phoneme alphabet="ipa" ph="təmˈɑːtoʊ">tomato</phoneme> at <sub alias="World Wide Web">WWW</sub> '
            'on <say-as interpret-as="ordinal">3</say-as> <say-as interpret-as="characters">tv</say-as>.',
            ssml=True,
        )
    )
    assert info.text == "Say təmˈɑːtoʊ at World Wide Web on third T V."
    assert "təmˈɑːtoʊ" in info.phonemes


def test_a_rate_past_the_slowest_speed_with_the_requests_speed_is_spoken_at_the_slowest(mesh: Mesh) -> None:
    slowest = synthesize(mesh.gateway_address, "Slowly does it, my friend.", speed=0.25)
    slower_still = synthesize(mesh.gateway_address, '<speak><prosody rate="x-slow">Slowly does it, my friend.</prosody></speak>', speed=0.25)
    assert np.array_equal(slower_still.samples, slowest.samples)


def test_an_ssml_request_is_cached_per_sentence_and_repeats_sample_for_sample(mesh: Mesh) -> None:
    tag = uuid.uuid4().hex[:6]
    document = f'<speak>Cached once, {" ".join(tag)}.<break strength="strong"/>Then again.</speak>'
    first = synthesize(mesh.gateway_address, document)
    hits = mesh.metric("gateway", _CACHE_HITS)
    again = synthesize(mesh.gateway_address, document)
    assert mesh.metric("gateway", _CACHE_HITS) >= hits + 2
    assert np.array_equal(first.samples, again.samples)
    assert _sentences(first)[0].pause_after_s == pytest.approx(0.7)


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ('<speak>Hi <audio src="x.wav"/> there.</speak>', "<audio> is not played"),
        ('<speak><prosody pitch="high">Hi.</prosody></speak>', "'pitch'"),
        ('<speak><voice name="x">Hi.</voice></speak>', "<voice>"),
        ("<speak>Hi <break time='1 hour'/></speak>", "1 hour"),
        ("<speak>Say [[ g ˈoʊ ]].</speak>", "'g'"),
        ("<speak>" + '<prosody rate="slow">' * 20 + "Hi." + "</prosody>" * 20 + "</speak>", "nested rates multiply"),
        ("<speak>Say [[ " + "h ə l ˈoʊ " * 50 + "]].</speak>", "a block is one word"),
        ("Plain text says [[ " + "h ə l ˈoʊ " * 50 + "]] too.", "a block is one word"),
    ],
)
def test_ssml_outside_the_subset_is_invalid_argument_naming_it(mesh: Mesh, text: str, named: str) -> None:
    with grpc.insecure_channel(mesh.gateway_address) as channel:
        stub = tts_pb2_grpc.TextToSpeechStub(channel)
        with pytest.raises(grpc.RpcError) as caught:
            list(stub.Synthesize(tts_pb2.SynthesizeRequest(text=text), timeout=30))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert named in caught.value.details()
