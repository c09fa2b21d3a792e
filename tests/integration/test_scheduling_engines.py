"""The schedule's figures read from the real engines: the vocoder's lag, the acoustic engine's steps, and
a calibration of both on the default voice."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from libs.scheduling.calibration import calibrate
from libs.scheduling.capacity import AudioCost
from libs.scheduling.costs import CostModel
from libs.scheduling.stream import DEFAULT_VOCODER_LAG_FRAMES, VocoderPacing
from libs.serving.acoustic_work import step_units
from libs.voice.calibration import acoustic_steps, sentence_ids, vocoder_steps
from libs.voice.engine import AcousticEngine, SynthesisParams, VocoderEngine


@pytest.fixture(scope="module")
def engines() -> tuple[AcousticEngine, VocoderEngine]:
    torch.set_num_threads(1)
    acoustic, vocoder = AcousticEngine.load_default(), VocoderEngine.load_default()
    acoustic.warm_up()
    vocoder.warm_up()
    return acoustic, vocoder


def test_the_default_pacing_is_the_default_voice_vocoders_own(engines: tuple[AcousticEngine, VocoderEngine]) -> None:
    _, vocoder = engines
    assert vocoder.lag_frames == DEFAULT_VOCODER_LAG_FRAMES
    assert VocoderPacing().schedule == vocoder.schedule


def test_the_acoustic_steps_are_the_chunks_its_mel_comes_in(engines: tuple[AcousticEngine, VocoderEngine]) -> None:
    acoustic, _ = engines
    plan = acoustic.plan(sentence_ids(121), SynthesisParams(), seed=3)
    widths = acoustic.step_frames(plan.frame_count)
    assert sum(widths) == plan.frame_count and widths[0] == acoustic.schedule.chunk_frames(0) + acoustic.lag_frames
    chunks = list(acoustic.mel_chunks(plan))
    assert len(chunks) == len(widths)
    # A sentence resumed mid-way: its first next() runs every step up to the one it resumes in.
    assert len(widths) >= 2
    start = widths[0] + widths[1] // 2
    resumed = list(acoustic.mel_chunks(plan, start))
    units = step_units(widths, acoustic.lag_frames, start)
    assert len(resumed) == len(units) and sum(units) == plan.frame_count
    assert np.array_equal(np.concatenate(resumed, axis=1), np.concatenate(chunks, axis=1)[:, start:])


def test_both_engines_calibrate_on_the_cores_they_may_use(engines: tuple[AcousticEngine, VocoderEngine]) -> None:
    acoustic, vocoder = engines
    acoustic_costs, acoustic_cost = CostModel(("plan", "chunk")), AudioCost()
    calibrate(acoustic_costs, acoustic_cost, lambda: acoustic_steps(acoustic), threads=2)
    assert acoustic_costs.calibrated and acoustic_cost.cpu_s_per_audio_s > 0
    # A longer plan costs more: the fit has a cost per phoneme id.
    assert acoustic_costs.cpu_s("plan", 200) > acoustic_costs.cpu_s("plan", 25)
    vocoder_costs, vocoder_cost = CostModel(("chunk",)), AudioCost()
    calibrate(vocoder_costs, vocoder_cost, lambda: vocoder_steps(vocoder), threads=2)
    assert vocoder_costs.cpu_s("chunk", 128) > vocoder_costs.cpu_s("chunk", 32) > 0
    # A real-time stream costs far less than a core: both together are a fraction of an audio second.
    assert 0 < acoustic_cost.cpu_s_per_audio_s + vocoder_cost.cpu_s_per_audio_s < 1.0
