"""Chunked synthesis equals whole-sentence synthesis, on the real default voice (both tiers of its vocoder)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from libs.voice.assets import default_voice_assets
from libs.voice.chunking import ACOUSTIC_SCHEDULE, ChunkSchedule, context_window
from libs.voice.engine import AcousticEngine, EngineSettings, SynthesisParams, VocoderEngine
from libs.voice.tiers import FAST, QUALITY

TOLERANCE = 1e-4
# "^ _ h _ ə _ l _ oʊ _ $"-like short id run, and a longer one built from the same ids.
SHORT_IDS = [1, 0, 20, 0, 59, 0, 24, 0, 27, 0, 100, 0, 2]
LONG_IDS = [1] + [0, 20, 0, 59, 0, 24, 0, 27, 0, 3, 0, 35, 0, 27, 0, 30, 0, 24, 0, 17, 0, 8, 0, 3] * 4 + [0, 10, 0, 2]


@pytest.fixture(scope="module")
def acoustic() -> AcousticEngine:
    torch.set_num_threads(1)
    return AcousticEngine.load_default(settings=EngineSettings(precision="fp32"))


@pytest.fixture(scope="module", params=[QUALITY, FAST])
def vocoder(request: pytest.FixtureRequest) -> VocoderEngine:
    """Each tier of the default voice: the fast one streams and resumes exactly as the quality one does."""
    settings = EngineSettings(precision="fp32")
    if request.param == QUALITY:
        return VocoderEngine.load_default(settings=settings)
    fast = VocoderEngine.load_fast(default_voice_assets(), settings=settings)
    assert fast is not None, "the default voice ships its fast tier"
    return fast


def _plan(engine: AcousticEngine, ids: list[int], speed: float = 1.0):
    params = SynthesisParams(speed=speed)
    return engine.plan(ids, params, engine.synthesis_seed(ids, params))


def test_context_window_clips_at_true_edges_only() -> None:
    window = context_window(10, 20, 100, 8)
    assert (window.input_start, window.input_end, window.trim_left, window.kept) == (2, 28, 8, 10)
    edge = context_window(0, 5, 7, 8)
    assert (edge.input_start, edge.input_end, edge.trim_left) == (0, 7, 0)


@pytest.mark.parametrize("schedule", [ChunkSchedule(1, 1.0, 1), ChunkSchedule(3, 1.0, 3), ChunkSchedule(8, 4.0, 256), ACOUSTIC_SCHEDULE])
def test_chunked_acoustic_mel_equals_whole_sentence(acoustic: AcousticEngine, schedule: ChunkSchedule) -> None:
    default_schedule, acoustic.schedule = acoustic.schedule, schedule
    try:
        for ids in (SHORT_IDS, LONG_IDS):
            plan = _plan(acoustic, ids)
            whole = acoustic.mel_whole(plan)
            chunks = list(acoustic.mel_chunks(plan))
            assert sum(c.shape[1] for c in chunks) == plan.frame_count
            assert np.abs(np.concatenate(chunks, axis=1) - whole).max() <= TOLERANCE
    finally:
        acoustic.schedule = default_schedule


def test_acoustic_resume_from_a_frame_gives_the_rest_of_the_same_mel(acoustic: AcousticEngine) -> None:
    plan = _plan(acoustic, LONG_IDS)
    whole = acoustic.mel_whole(plan)
    start = plan.frame_count // 3
    rest = np.concatenate(list(acoustic.mel_chunks(plan, start_frame=start)), axis=1)
    assert np.abs(rest - whole[:, start:]).max() <= TOLERANCE


@pytest.mark.parametrize("span", [(0, 40), (30, len(LONG_IDS)), (20, 70), (0, len(LONG_IDS))])
def test_a_spoken_part_is_the_whole_sentences_mel_over_its_ids(acoustic: AcousticEngine, span: tuple[int, int]) -> None:
    plan = _plan(acoustic, LONG_IDS)
    whole = acoustic.mel_whole(plan)
    part = acoustic.spoken_part(plan, *span)
    start = sum(plan.phoneme_frames[: span[0]])
    assert part.frame_count == sum(plan.phoneme_frames[span[0] : span[1]]) and part.phoneme_frames == plan.phoneme_frames[span[0] : span[1]]
    for resumed in (0, part.frame_count // 2):
        mel = np.concatenate(list(acoustic.mel_chunks(part.plan, part.skip_frames + resumed)), axis=1)[:, : part.frame_count - resumed]
        assert mel.shape[1] == part.frame_count - resumed
        assert np.abs(mel - whole[:, start + resumed : start + part.frame_count]).max() <= TOLERANCE
    for bad in ((5, 5), (-1, 3), (0, len(LONG_IDS) + 1)):
        with pytest.raises(ValueError):
            acoustic.spoken_part(plan, *bad)


@pytest.mark.parametrize("push_frames", [1, 3, 4, 17])
@pytest.mark.parametrize("ids", [SHORT_IDS, LONG_IDS], ids=["short", "long"])
def test_streamed_vocoder_equals_whole_sentence_vocoding(
    acoustic: AcousticEngine, vocoder: VocoderEngine, push_frames: int, ids: list[int]
) -> None:
    mel = acoustic.mel_whole(_plan(acoustic, ids))
    reference = vocoder.vocode(mel)
    stream = vocoder.open_stream()
    pieces = [stream.push(mel[:, i : i + push_frames]) for i in range(0, mel.shape[1], push_frames)]
    pieces.append(stream.finish())
    streamed = np.concatenate(pieces)
    assert streamed.shape == reference.shape == (mel.shape[1] * vocoder.hop_length,)
    assert np.abs(streamed - reference).max() <= TOLERANCE


def test_utterance_shorter_than_the_receptive_field_streams_exactly(vocoder: VocoderEngine) -> None:
    frames = vocoder.context_frames // 2
    mel = np.random.default_rng(0).normal(-4.0, 1.5, size=(vocoder.n_mels, frames)).astype(np.float32)
    stream = vocoder.open_stream()
    pieces = [stream.push(mel[:, i : i + 1]) for i in range(frames)] + [stream.finish()]
    assert np.abs(np.concatenate(pieces) - vocoder.vocode(mel)).max() <= TOLERANCE


def test_vocoder_stream_resumed_mid_sentence_continues_without_seam(acoustic: AcousticEngine, vocoder: VocoderEngine) -> None:
    mel = acoustic.mel_whole(_plan(acoustic, LONG_IDS))
    reference = vocoder.vocode(mel)
    resume_at = mel.shape[1] // 2
    origin = resume_at - vocoder.context_frames
    stream = vocoder.open_stream(origin_frame=origin, emit_from_frame=resume_at)
    pieces = [stream.push(mel[:, origin : resume_at + 5]), stream.push(mel[:, resume_at + 5 :]), stream.finish()]
    resumed = np.concatenate(pieces)
    hop = vocoder.hop_length
    assert np.abs(resumed - reference[resume_at * hop :]).max() <= TOLERANCE


def test_vocoder_stream_primed_from_its_chunk_resumes_bit_identically(acoustic: AcousticEngine, vocoder: VocoderEngine) -> None:
    mel = acoustic.mel_whole(_plan(acoustic, LONG_IDS))
    stream = vocoder.open_stream()
    uninterrupted = np.concatenate([stream.push(mel[:, i : i + 4]) for i in range(0, mel.shape[1], 4)] + [stream.finish()])
    resume_at = mel.shape[1] // 2 + 1
    origin = vocoder.resume_origin_frame(resume_at)
    assert origin < resume_at - vocoder.context_frames, "the resume point should fall inside a chunk"
    resumed_stream = vocoder.open_stream(origin_frame=origin, emit_from_frame=resume_at)
    resumed = np.concatenate([resumed_stream.push(mel[:, origin:]), resumed_stream.finish()])
    assert np.array_equal(resumed, uninterrupted[resume_at * vocoder.hop_length :])


def test_resume_without_enough_context_is_refused(vocoder: VocoderEngine) -> None:
    with pytest.raises(ValueError, match="context"):
        vocoder.open_stream(origin_frame=10, emit_from_frame=11)


def test_stream_that_ends_right_after_a_step_flushes_its_last_samples(vocoder: VocoderEngine) -> None:
    frames = vocoder.schedule.chunk_frames(0)
    mel = np.random.default_rng(1).normal(-4.0, 1.5, size=(vocoder.n_mels, frames)).astype(np.float32)
    stream = vocoder.open_stream()
    first = stream.push(mel)
    assert 0 < len(first) < frames * vocoder.hop_length, "the step's samples minus the lag come at once"
    rest = stream.finish()
    assert np.abs(np.concatenate([first, rest]) - vocoder.vocode(mel)).max() <= TOLERANCE
