"""`make bench-quality`'s pitch table reads a voice's intonation, a buzz at the frame rate, and noise apart."""

from __future__ import annotations

import numpy as np

from bench.tier_pitch import FRAME_RATE_HZ, HOP, SAMPLE_RATE, summarise, voiced_pitch
from tests.support.signals import gliding_voice


def test_a_gliding_voice_has_a_spread_and_stays_off_the_frame_rate() -> None:
    pitch = summarise([voiced_pitch(0.5 * gliding_voice(100.0, 160.0, int(1.5 * SAMPLE_RATE)))])
    assert pitch.voiced_share > 0.8
    assert 110.0 < pitch.median_hz < 150.0
    assert pitch.spread_semitones > 1.5
    assert pitch.near_frame_rate < 0.1


def test_the_same_waveform_in_every_frame_is_one_note_at_the_frame_rate() -> None:
    rng = np.random.default_rng(3)
    frame = np.convolve(rng.standard_normal(HOP), np.hanning(16), mode="same")
    stamped = 0.2 * np.tile(frame / np.abs(frame).max(), 120)
    pitch = summarise([voiced_pitch(stamped)])
    assert pitch.voiced_share > 0.8
    assert abs(pitch.median_hz - FRAME_RATE_HZ) < 2.0
    assert pitch.spread_semitones < 0.1
    assert pitch.near_frame_rate > 0.9


def test_noise_is_mostly_unvoiced_and_no_audio_summarises_to_nothing_voiced() -> None:
    noise = 0.1 * np.random.default_rng(5).standard_normal(SAMPLE_RATE)
    assert summarise([voiced_pitch(noise)]).voiced_share < 0.3
    empty = summarise([(np.array([]), 10)])
    assert empty.voiced_share == 0.0 and np.isnan(empty.median_hz)
