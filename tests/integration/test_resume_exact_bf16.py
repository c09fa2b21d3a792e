"""Resume is bit-exact in the served precision, bf16, not only in fp32; streamed vs whole is within a stated bound.

tests/test_streaming_exact.py proves the streaming claims in fp32. Workers on GPUs, and on CPUs with
native bf16 where bf16 measures cheaper than fp32, serve bf16 ("auto" precision), so the claims the
gateway's resume relies on are checked here in bf16 too:

- an acoustic sentence resumed from a frame gives exactly the frames the uninterrupted stream gave;
- a vocoder stream resumed mid-sentence, primed with the sentence's earlier 40 ms slices as context
  (what the gateway sends a replacement worker), gives exactly the uninterrupted stream's samples.

The resumed runs use a second pair of engines, loaded and warmed up apart from the first, as the
worker a stream fails over to would be. Mel goes to the vocoder as float16 slices, as on the wire.

Streamed (chunked) vs whole-sentence output is not bit-exact in bf16 (in fp32 it is within 1e-4):
the two compute the same positions over different tensor shapes, so their float32 sums round to
bf16 differently at each layer. The bounds below are stated in bf16 steps of the output's largest
octave. Measured on an AVX2 CPU (bf16 in software), default voice, LONG_IDS: acoustic max |diff|
0.043 (mean 0.0026) on log-mel of magnitude up to ~12; vocoder max |diff| 0.0029, rms 2.6e-4 on a
waveform of peak 0.39 and rms 0.054 (46 dB below the signal).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
import pytest
import torch

from libs.pb.tts.common.v1 import mel_pb2
from libs.voice.assets import default_voice_assets
from libs.voice.chunking import ACOUSTIC_SCHEDULE
from libs.voice.engine import AcousticEngine, EngineSettings, SentencePlan, SynthesisParams, VocoderEngine
from libs.voice.precision import cpu_has_native_bf16
from libs.voice.vocode_session import SentenceSession
from libs.wire.mel_slices import cut_whole_mel, frames_of, to_message
from tests.integration.test_streaming_exact import LONG_IDS, SHORT_IDS

pytestmark = [
    pytest.mark.timeout(900),
    pytest.mark.skipif(
        not default_voice_assets().mel_head_path.exists(),
        reason="the default voice's trained weights (assets/voices/en_US-joe-medium) are not built yet",
    ),
]

BF16 = EngineSettings(precision="bf16")
# A sentence of over 1056 frames (~12 s): the acoustic schedule's 32- and 1024-frame steps and a third.
VERY_LONG_IDS = [1] + [0, 20, 0, 59, 0, 24, 0, 27, 0, 3, 0, 35, 0, 27, 0, 30, 0, 24, 0, 17, 0, 8, 0, 3] * 28 + [0, 10, 0, 2]

MEL_OCTAVE_TOP = 16.0
"""Log-mel magnitudes stay below this (the default voice peaks at ~12)."""
ACOUSTIC_CHUNKED_MAX_DIFF = 2 * MEL_OCTAVE_TOP / 256
"""Chunked vs whole bf16 mel, largest difference: two bf16 steps in [8, 16) (0.125; measured 0.043)."""
ACOUSTIC_CHUNKED_MEAN_DIFF = 0.01
"""Chunked vs whole bf16 mel, mean absolute difference (measured 0.0026)."""
WAVE_OCTAVE_TOP = 0.5
"""The waveform's peaks stay below this (the default voice peaks at ~0.4)."""
VOCODER_STREAMED_MAX_DIFF = 4 * WAVE_OCTAVE_TOP / 256
"""Streamed vs whole bf16 samples, largest difference: four bf16 steps in [0.25, 0.5) (0.0078; measured 0.0029)."""
VOCODER_STREAMED_NOISE_RATIO = 0.02
"""Streamed vs whole bf16 samples: rms of the difference over rms of the signal (-34 dB; measured 0.005, -46 dB)."""


@dataclass
class Engines:
    """An acoustic and a vocoder engine in bf16, loaded and warmed up as a worker does."""

    acoustic: AcousticEngine
    vocoder: VocoderEngine


def _load_bf16_engines() -> Engines:
    torch.set_num_threads(1)  # as the workers run (--threads 1)
    acoustic = AcousticEngine.load_default(settings=BF16)
    vocoder = VocoderEngine.load_default(settings=BF16)
    acoustic.warm_up()
    vocoder.warm_up()
    return Engines(acoustic, vocoder)


@pytest.fixture(scope="module")
def served() -> Engines:
    """The engines that run the uninterrupted streams."""
    return _load_bf16_engines()


@pytest.fixture(scope="module")
def replacement() -> Engines:
    """Engines loaded apart from `served`: the worker a broken stream resumes on."""
    return _load_bf16_engines()


@pytest.fixture(scope="module")
def long_mel(served: Engines) -> np.ndarray:
    """The served acoustic stream's mel of LONG_IDS (209 frames: three vocoder steps)."""
    return np.concatenate(list(served.acoustic.mel_chunks(_plan(served.acoustic, LONG_IDS))), axis=1)


def _plan(engine: AcousticEngine, ids: list[int]) -> SentencePlan:
    params = SynthesisParams()
    return engine.plan(ids, params, engine.synthesis_seed(ids, params))


def _wire_slices(mel: np.ndarray, vocoder: VocoderEngine) -> list[tuple[int, np.ndarray, bool]]:
    """(first_frame, frames, is_last) of the sentence's 40 ms slices, through float16 as the gateway sends them."""
    cuts = cut_whole_mel(mel, vocoder.hop_length, vocoder.sample_rate_hz)
    messages = [
        to_message(cut, utterance_id="u", sentence_index=0, sentence_frame_count=mel.shape[1], dtype=mel_pb2.MEL_DTYPE_FLOAT16)
        for cut in cuts
    ]
    return [(message.first_frame, frames_of(message), message.is_last) for message in messages]


def _vocode_session(
    vocoder: VocoderEngine, slices: list[tuple[int, np.ndarray, bool]], resume_slice: int = 0
) -> tuple[int, np.ndarray]:
    """(first sample, samples) a worker returns for the sentence when the slices before `resume_slice`
    come as context only, stepping after every slice as the vocoder servicer does."""
    session = SentenceSession(0, slices[0][0], vocoder.hop_length, vocoder.open_stream)
    blocks = []
    for index, (first_frame, frames, is_last) in enumerate(slices):
        context_only = index < resume_slice
        session.check_slice(first_frame, context_only)
        session.accept(first_frame, frames, context_only, is_last)
        while session.has_step():
            block = session.step()
            if block is not None:
                blocks.append(block)
    assert session.finished and blocks[-1].is_last
    for before, after in itertools.pairwise(blocks):
        assert after.first_sample == before.first_sample + len(before.samples), "blocks must tile the sentence"
    return blocks[0].first_sample, np.concatenate([block.samples for block in blocks])


def _first_difference(resumed: np.ndarray, reference: np.ndarray) -> str:
    """Where and by how much a resumed output differs from the reference (time is the last axis)."""
    if resumed.shape != reference.shape:
        return f"shape {resumed.shape} vs {reference.shape}"
    differs = np.flatnonzero((resumed != reference).reshape(-1, resumed.shape[-1]).any(axis=0))
    return f"{len(differs)} of {resumed.shape[-1]} positions differ, first at {differs[0]}, max |diff| {np.abs(resumed - reference).max():.3g}"


def test_bf16_acoustic_sentence_resumed_on_another_engine_gives_the_uninterrupted_frames_bit_for_bit(
    served: Engines, replacement: Engines
) -> None:
    plan = _plan(served.acoustic, VERY_LONG_IDS)
    total = plan.frame_count
    bounds = ACOUSTIC_SCHEDULE.bounds(total)
    assert len(bounds) >= 3, f"the sentence ({total} frames) should span three acoustic steps"
    uninterrupted = np.concatenate(list(served.acoustic.mel_chunks(plan)), axis=1)
    assert uninterrupted.shape == (served.acoustic.n_mels, total)
    # The replacement worker plans the sentence again from its seed (the text side runs in float32).
    replanned = _plan(replacement.acoustic, VERY_LONG_IDS)
    assert torch.equal(replanned.z_p, plan.z_p) and replanned.phoneme_frames == plan.phoneme_frames
    # Inside the first step, at the first frame and in the middle of each later step, and the very last frame.
    starts = sorted({1, total - 1} | {start for start, _ in bounds[1:]} | {(start + end) // 2 for start, end in bounds[1:]})
    mismatches = {}
    for start in starts:
        resumed = np.concatenate(list(replacement.acoustic.mel_chunks(replanned, start_frame=start)), axis=1)
        if not np.array_equal(resumed, uninterrupted[:, start:]):
            mismatches[start] = _first_difference(resumed, uninterrupted[:, start:])
    assert mismatches == {}, f"bf16 acoustic resume is not bit-exact (sentence of {total} frames): {mismatches}"


def test_bf16_vocoder_stream_resumed_on_another_engine_after_context_slices_gives_the_uninterrupted_samples_bit_for_bit(
    served: Engines, replacement: Engines, long_mel: np.ndarray
) -> None:
    mel = long_mel
    slices = _wire_slices(mel, served.vocoder)
    hop = served.vocoder.hop_length
    first, uninterrupted = _vocode_session(served.vocoder, slices)
    assert first == 0 and len(uninterrupted) == mel.shape[1] * hop
    # Inside the first vocoder step, from the first slice of the second and third steps, inside the
    # third, and the last slice.
    assert [served.vocoder.schedule.chunk_frames(i) for i in range(3)] == [32, 32, 64], "resume points assume this schedule"
    resume_slices = sorted(
        {1, len(slices) - 1} | {next(i for i, (frame, _, _) in enumerate(slices) if frame >= at) for at in (32, 64, 96)}
    )
    mismatches = {}
    for resume_slice in resume_slices:
        resume_frame = slices[resume_slice][0]
        first_sample, resumed = _vocode_session(replacement.vocoder, slices, resume_slice)
        assert first_sample == resume_frame * hop, "a resumed stream starts at its first emitted frame"
        if not np.array_equal(resumed, uninterrupted[first_sample:]):
            mismatches[f"slice {resume_slice} (frame {resume_frame})"] = _first_difference(resumed, uninterrupted[first_sample:])
    assert mismatches == {}, f"bf16 vocoder resume is not bit-exact: {mismatches}"


@pytest.mark.parametrize("ids", [SHORT_IDS, LONG_IDS], ids=["short", "long"])
def test_bf16_chunked_acoustic_mel_stays_within_two_bf16_steps_of_the_whole_sentence(served: Engines, ids: list[int]) -> None:
    plan = _plan(served.acoustic, ids)
    chunked = np.concatenate(list(served.acoustic.mel_chunks(plan)), axis=1)
    whole = served.acoustic.mel_whole(plan)
    assert np.abs(whole).max() < MEL_OCTAVE_TOP
    diff = np.abs(chunked - whole)
    print(f"\nbf16 acoustic chunked vs whole ({plan.frame_count} frames): max {diff.max():.4g}, mean {diff.mean():.3g}, "
          f"exact frames {np.mean((diff == 0).all(axis=0)):.1%}; native bf16: {cpu_has_native_bf16()}")  # fmt: skip
    assert diff.max() <= ACOUSTIC_CHUNKED_MAX_DIFF
    assert diff.mean() <= ACOUSTIC_CHUNKED_MEAN_DIFF


def test_bf16_streamed_vocoder_stays_within_four_bf16_steps_of_whole_sentence_vocoding(
    served: Engines, long_mel: np.ndarray
) -> None:
    mel = long_mel
    slices = _wire_slices(mel, served.vocoder)
    _, streamed = _vocode_session(served.vocoder, slices)
    whole = served.vocoder.vocode(np.concatenate([frames for _, frames, _ in slices], axis=1))
    assert streamed.shape == whole.shape
    assert np.abs(whole).max() < WAVE_OCTAVE_TOP
    diff = streamed - whole
    noise_ratio = np.sqrt(np.mean(diff**2)) / np.sqrt(np.mean(whole**2))
    print(f"\nbf16 vocoder streamed vs whole ({mel.shape[1]} frames): max {np.abs(diff).max():.4g}, "
          f"noise {20 * np.log10(noise_ratio):.1f} dB below the signal, exact samples {np.mean(diff == 0):.1%}; "
          f"native bf16: {cpu_has_native_bf16()}")  # fmt: skip
    assert np.abs(diff).max() <= VOCODER_STREAMED_MAX_DIFF
    assert noise_ratio <= VOCODER_STREAMED_NOISE_RATIO
