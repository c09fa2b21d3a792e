"""Word timestamps through the real mesh: each word's time comes from the model's frames, lines up
with the audio (the pauses between words are quiet), and holds across sentences, speeds, output
rates and the cache."""

from __future__ import annotations

import itertools
import uuid

import numpy as np
import pytest

from libs.pb.tts.v1 import tts_pb2
from libs.text.words import written_words
from tests.support.client import Spoken, synthesize
from tests.support.mesh import Mesh


def _unique(text: str) -> str:
    return f"{text} Request {uuid.uuid4().int % 100000}."


def _sentences(spoken: Spoken) -> list[tts_pb2.SentenceInfo]:
    return [response.sentence for response in spoken.responses if response.HasField("sentence")]


def _words(spoken: Spoken) -> list[tts_pb2.WordInfo]:
    return [word for sentence in _sentences(spoken) for word in sentence.words]


def test_words_are_the_written_words_timed_by_the_phoneme_frames(mesh: Mesh) -> None:
    text = _unique("The quick brown fox jumps over the lazy dog. Then, at noon, it slept for 23 minutes!")
    spoken = synthesize(mesh.gateway_address, text, include_alignment=True)
    sentences = _sentences(spoken)
    assert len(sentences) == 3
    assert [word.text for word in _words(spoken)] == written_words(text)
    previous_end = 0.0
    for sentence in sentences:
        frame_at = np.concatenate([[0], np.cumsum(sentence.phoneme_frames)]) * sentence.frame_duration_s
        sentence_end = sentence.audio_offset_s + sentence.audio_duration_s
        for word in sentence.words:
            # Each boundary is a phoneme id boundary of the model's own durations, to float precision.
            start_frames = (word.start_s - sentence.audio_offset_s) / sentence.frame_duration_s
            end_frames = (word.end_s - sentence.audio_offset_s) / sentence.frame_duration_s
            assert np.min(np.abs(frame_at / sentence.frame_duration_s - start_frames)) < 1e-6
            assert np.min(np.abs(frame_at / sentence.frame_duration_s - end_frames)) < 1e-6
            assert previous_end - 1e-9 <= word.start_s < word.end_s <= sentence_end + 1e-9
            previous_end = word.end_s
    assert previous_end <= spoken.duration_s + sentences[-1].frame_duration_s


def test_the_pauses_between_words_are_quieter_than_the_words(mesh: Mesh) -> None:
    text = _unique("Red, green, blue, yellow. Stop. Go.")
    spoken = synthesize(mesh.gateway_address, text)
    samples, rate = spoken.samples, spoken.sample_rate_hz
    everything = _words(spoken)
    words = everything[: [word.text for word in everything].index("Request")]  # the suffix's words are not ours

    def rms(start_s: float, end_s: float) -> float:
        part = samples[int(start_s * rate) : int(end_s * rate)]
        return float(np.sqrt(np.mean(part**2))) if len(part) else 0.0

    in_words = [rms(word.start_s, word.end_s) for word in words]
    gaps = [(a.end_s, b.start_s) for a, b in itertools.pairwise(words) if b.start_s - a.end_s > 0.08]
    assert len(gaps) >= 3, gaps  # after each comma and full stop
    in_gaps = [rms(start, end) for start, end in gaps]
    assert min(in_words) > 0.02
    assert max(in_gaps) < 0.25 * float(np.median(in_words)), (in_gaps, in_words)


@pytest.mark.parametrize("speed, rate", [(1.0, 48000), (1.6, 16000), (0.7, 8000)])
def test_word_times_follow_speed_and_hold_at_any_output_rate(mesh: Mesh, speed: float, rate: int) -> None:
    text = _unique("Time flies like an arrow. Fruit flies like a banana.")
    normal = synthesize(mesh.gateway_address, text)
    native = synthesize(mesh.gateway_address, text, speed=speed, include_alignment=True)
    resampled = synthesize(mesh.gateway_address, text, speed=speed, sample_rate_hz=rate)
    assert resampled.sample_rate_hz == rate
    frame_s = _sentences(native)[0].frame_duration_s
    assert [w.text for w in _words(resampled)] == [w.text for w in _words(native)] == [w.text for w in _words(normal)]
    # The output rate moves a word by at most one output sample per sentence before it (each
    # sentence's length rounds to whole samples): times are model frames.
    tolerance_s = len(_sentences(native)) / rate + 1e-6
    for word, base in zip(_words(resampled), _words(native), strict=False):
        assert abs(word.start_s - base.start_s) <= tolerance_s
        assert abs(word.end_s - base.end_s) <= tolerance_s
        assert word.end_s <= resampled.duration_s + frame_s
    # Speed stretches the frames the words are timed by: faster ends earlier, slower later.
    last, normal_last = _words(native)[-1].end_s, _words(normal)[-1].end_s
    if speed > 1:
        assert last < normal_last
    elif speed < 1:
        assert last > normal_last
    else:
        assert last == normal_last


def test_a_cached_sentence_has_the_same_word_times(mesh: Mesh) -> None:
    text = _unique("Captions need the same times on a cache hit.")
    cold = synthesize(mesh.gateway_address, text)
    warm = synthesize(mesh.gateway_address, text)
    assert [(w.text, w.start_s, w.end_s) for w in _words(warm)] == [(w.text, w.start_s, w.end_s) for w in _words(cold)]
