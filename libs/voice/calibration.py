"""Model steps that stand for real work, for measuring what each stage costs on this machine at
start-up (libs.scheduling.calibration): sentences of several lengths through the acoustic engine's
plan and chunks, and a sentence's mel through the vocoder's steps. The numbers computed are thrown
away; only the time they take is kept.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Final

import numpy as np

from libs.voice.inputs import SynthesisParams

STAGE_PLAN: Final = "plan"
STAGE_CHUNK: Final = "chunk"

# The phoneme ids of an ordinary English sentence as the default voice reads it (BOS, a pad after
# each id, EOS): sentences of any length are cut from it, so their durations are a real sentence's.
SPEECH_IDS: Final = (
    1, 0, 41, 0, 59, 0, 3, 0, 23, 0, 35, 0, 120, 0, 74, 0, 23, 0, 3, 0, 15, 0, 88, 0, 120, 0, 14, 0, 100, 0, 26, 0, 3,
    0, 19, 0, 120, 0, 51, 0, 122, 0, 23, 0, 31, 0, 3, 0, 17, 0, 108, 0, 120, 0, 102, 0, 25, 0, 28, 0, 31, 0, 3, 0, 121,
    0, 27, 0, 100, 0, 34, 0, 60, 0, 3, 0, 41, 0, 59, 0, 3, 0, 24, 0, 120, 0, 18, 0, 74, 0, 38, 0, 21, 0, 3, 0, 17, 0,
    120, 0, 51, 0, 122, 0, 66, 0, 8, 0, 3, 0, 39, 0, 26, 0, 17, 0, 3, 0, 41, 0, 120, 0, 61, 0, 26, 0, 3, 0, 74, 0, 32,
    0, 3, 0, 88, 0, 120, 0, 102, 0, 26, 0, 38, 0, 3, 0, 19, 0, 120, 0, 51, 0, 122, 0, 88, 0, 3, 0, 50, 0, 35, 0, 120, 0,
    18, 0, 74, 0, 3, 0, 121, 0, 74, 0, 26, 0, 32, 0, 100, 0, 3, 0, 41, 0, 59, 0, 3, 0, 23, 0, 35, 0, 120, 0, 14, 0, 74,
    0, 59, 0, 32, 0, 3, 0, 66, 0, 88, 0, 120, 0, 21, 0, 122, 0, 26, 0, 3, 0, 19, 0, 120, 0, 54, 0, 122, 0, 88, 0, 74, 0,
    31, 0, 32, 0, 3, 0, 35, 0, 121, 0, 61, 0, 88, 0, 3, 0, 26, 0, 120, 0, 27, 0, 100, 0, 15, 0, 51, 0, 122, 0, 17, 0,
    21, 0, 3, 0, 23, 0, 39, 0, 26, 0, 3, 0, 19, 0, 120, 0, 14, 0, 74, 0, 26, 0, 17, 0, 3, 0, 74, 0, 92, 0, 3, 0, 50, 0,
    66, 0, 120, 0, 61, 0, 26, 0, 10, 0, 2,
)  # fmt: skip
SENTENCE_IDS: Final = (25, 61, 121, 201)
"""Lengths of the calibration sentences (phoneme ids): a short phrase to a long sentence."""
VOCODER_MEL_FRAMES: Final = 300
"""Frames of the calibration sentence the vocoder steps through (its schedule's steps and a last one)."""


@dataclass(frozen=True)
class CalibrationStep:
    """One model step to time."""

    stage: str
    """The cost model's stage."""
    units: int
    """Its size: phoneme ids of a plan, frames of a chunk."""
    run: Callable[[], float]
    """Runs it; returns the audio seconds it made (a plan makes none itself)."""


def sentence_ids(length: int) -> list[int]:
    """A sentence of `length` phoneme ids cut from SPEECH_IDS (BOS, ids, EOS)."""
    body = list(SPEECH_IDS[1:-1])
    return [SPEECH_IDS[0], *body[: max(1, length - 2)], SPEECH_IDS[-1]]


def acoustic_steps(engine: Any) -> Iterator[CalibrationStep]:
    """The plan and chunk steps of sentences of SENTENCE_IDS lengths (`engine`: an AcousticEngine). A
    sentence's chunks are known once its plan has run: take the steps one at a time, running each
    before asking for the next."""
    frame_s = engine.hop_length / engine.sample_rate_hz
    params = SynthesisParams()
    for length in SENTENCE_IDS:
        ids = sentence_ids(length)
        planned: list[Any] = []

        def plan(ids: list[int] = ids, planned: list[Any] = planned) -> float:
            planned.append(engine.plan(ids, params, 0))
            return 0.0

        yield CalibrationStep(STAGE_PLAN, len(ids), plan)
        chunks = engine.mel_chunks(planned[0])
        for units in engine.step_frames(planned[0].frame_count):
            yield CalibrationStep(STAGE_CHUNK, units, lambda chunks=chunks: next(chunks).shape[1] * frame_s)


def vocoder_steps(engine: Any, seed: int = 0) -> Iterator[CalibrationStep]:
    """The steps of one sentence's mel through `engine` (a VocoderEngine); the mel is noise of the
    range real mel has (the vocoder's work does not depend on the values)."""
    mel = np.random.default_rng(seed).normal(-5.0, 2.0, (engine.n_mels, VOCODER_MEL_FRAMES)).astype(np.float32)
    stream = engine.open_stream()
    stream.add(mel)
    stream.end()
    while stream.step_ready():
        yield CalibrationStep(STAGE_CHUNK, stream.next_step_frames, lambda: len(stream.step()) / engine.sample_rate_hz)


def vocoder_cpu_s_per_audio_s(engine: Any, repeats: int = 1) -> float:
    """Process CPU seconds per audio second of a sentence's steps through `engine` (a warmed-up
    VocoderEngine) on one thread, the least of `repeats` runs: measured at start-up, while the worker
    serves nothing. (The scheduler's calibration runs the same steps on every core at once, which
    reads about 10% dearer: a ratio of two tiers takes both from here.)"""
    best = float("inf")
    for _ in range(repeats):
        started, audio_s = time.process_time(), 0.0
        for step in vocoder_steps(engine):
            audio_s += step.run()
        best = min(best, (time.process_time() - started) / max(audio_s, 1e-9))
    return best
