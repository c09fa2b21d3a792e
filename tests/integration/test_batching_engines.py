"""Dynamic batching in the synthesis engines: a stream batched with others equals the same stream alone.

The engines here wrap the real imported Piper voice (text encoder, durations, flow, decoder body)
with a randomly initialised mel head and mel adapter: exactness under batching is a property of
padding and masking, not of trained weights.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch

from libs.models.mel_bridge import MelAdapter, MelHead
from libs.models.piper_import import PiperVoiceModels
from libs.models.streaming import NO_END, StepInput
from libs.voice.batching import BatchingConfig, BatchStats
from libs.voice.chunking import ChunkSchedule
from libs.voice.engine import AcousticEngine, EngineSettings, MelVocoder, SynthesisParams, VocoderEngine

TOLERANCE = 1e-4
STREAMS = 8
# A long window makes concurrent jobs meet in one batch however the test threads are scheduled.
BATCHED = BatchingConfig(max_batch=STREAMS, max_wait_ms=60)
MEL_FRAMES = (23, 41, 64, 97, 130, 15, 75, 52)
PUSH_FRAMES = (1, 3, 4, 17, 2, 5, 4, 8)
BASE_IDS = [0, 20, 0, 59, 0, 24, 0, 27, 0, 3, 0, 35, 0, 27, 0, 30, 0, 24, 0, 17, 0, 8, 0, 3]


@pytest.fixture(scope="module")
def bridge() -> tuple[MelHead, MelAdapter]:
    torch.manual_seed(1234)
    return MelHead().eval(), MelAdapter().eval()


def _vocoder(voice: PiperVoiceModels, bridge: tuple[MelHead, MelAdapter], settings: EngineSettings) -> VocoderEngine:
    return VocoderEngine(
        MelVocoder(bridge[1], voice.decoder),
        model_version="test",
        sample_rate_hz=voice.config.sample_rate_hz,
        hop_length=voice.config.hop_length,
        n_mels=80,
        settings=settings,
    )


def _acoustic(voice: PiperVoiceModels, bridge: tuple[MelHead, MelAdapter], settings: EngineSettings) -> AcousticEngine:
    return AcousticEngine(
        voice.acoustic,
        bridge[0],
        voice_name="test",
        model_version="test",
        sample_rate_hz=voice.config.sample_rate_hz,
        hop_length=voice.config.hop_length,
        schedule=ChunkSchedule(8, 2.0, 64),
        settings=settings,
    )


def _mels() -> list[np.ndarray]:
    rng = np.random.default_rng(7)
    return [rng.normal(-4.0, 1.5, size=(80, frames)).astype(np.float32) for frames in MEL_FRAMES]


def _stream(engine: VocoderEngine, mel: np.ndarray, push_frames: int, stop_after_pushes: int | None = None) -> np.ndarray:
    stream = engine.open_stream()
    pieces = []
    for count, start in enumerate(range(0, mel.shape[1], push_frames)):
        if stop_after_pushes is not None and count == stop_after_pushes:
            return np.concatenate(pieces)  # the caller went away: no more pushes, no finish
        pieces.append(stream.push(mel[:, start : start + push_frames]))
    pieces.append(stream.finish())
    return np.concatenate(pieces)


def _run_together(functions: list) -> list:
    """Run the functions on their own threads, all released at once; return their results."""
    results: list = [None] * len(functions)
    errors: list[BaseException] = []
    start = threading.Barrier(len(functions))

    def run(index: int) -> None:
        try:
            start.wait()
            results[index] = functions[index]()
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(functions))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not errors, errors
    return results


def test_vocoder_stream_batched_with_seven_others_equals_it_alone(voice, bridge) -> None:
    mels = _mels()
    alone = _vocoder(voice, bridge, EngineSettings(precision="fp32"))
    references = [_stream(alone, mel, push) for mel, push in zip(mels, PUSH_FRAMES, strict=False)]
    stats: list[BatchStats] = []
    batched = _vocoder(voice, bridge, EngineSettings(precision="fp32", batching=BATCHED, on_batch=stats.append))
    try:
        together = _run_together([lambda m=mel, p=push: _stream(batched, m, p) for mel, push in zip(mels, PUSH_FRAMES, strict=False)])
    finally:
        batched.close()
    for mel, reference, output in zip(mels, references, together, strict=False):
        assert output.shape == reference.shape == (mel.shape[1] * alone.hop_length,)
        assert np.abs(output - reference).max() <= TOLERANCE
        assert np.abs(output - alone.vocode(mel)).max() <= TOLERANCE
    assert max(s.batch_size for s in stats) > 1, "no two streams ever shared a batch: the test proved nothing"


def test_padded_vocoder_batch_with_a_cancelled_job_serves_the_rest_exactly(voice, bridge) -> None:
    rng = np.random.default_rng(3)
    # First steps of streams with step sizes close enough to share one padded batch.
    steps = [
        StepInput(torch.from_numpy(rng.normal(-4.0, 1.5, size=(80, frames)).astype(np.float32)), 0, 0, NO_END, None)
        for frames in range(60, 76, 2)
    ]
    alone = _vocoder(voice, bridge, EngineSettings(precision="fp32"))
    stats: list[BatchStats] = []
    batched = _vocoder(voice, bridge, EngineSettings(precision="fp32", batching=BatchingConfig(max_batch=8, max_wait_ms=500), on_batch=stats.append))
    try:
        assert batched.batcher is not None
        futures = [batched.batcher.submit(step) for step in steps]
        assert futures[3].cancel()
        results = [future.result(60) for index, future in enumerate(futures) if index != 3]
    finally:
        batched.close()
    expected = [alone.vocode_step(step) for index, step in enumerate(steps) if index != 3]
    for result, reference in zip(results, expected, strict=False):
        assert result.first_position == reference.first_position
        assert result.values.shape == reference.values.shape
        assert np.abs(result.values.numpy() - reference.values.numpy()).max() <= TOLERANCE
        for tail, reference_tail in zip(result.state, reference.state, strict=True):
            assert np.abs(tail.numpy() - reference_tail.numpy()).max() <= TOLERANCE
    assert [s.batch_size for s in stats] == [7]


def test_abandoned_vocoder_stream_does_not_disturb_the_streams_it_was_batched_with(voice, bridge) -> None:
    mels = _mels()
    alone = _vocoder(voice, bridge, EngineSettings(precision="fp32"))
    batched = _vocoder(voice, bridge, EngineSettings(precision="fp32", batching=BATCHED))
    try:
        stops = [1] + [None] * (STREAMS - 1)
        together = _run_together(
            [lambda m=mel, p=push, s=stop: _stream(batched, m, p, s) for mel, push, stop in zip(mels, PUSH_FRAMES, stops, strict=False)]
        )
    finally:
        batched.close()
    for mel, output in list(zip(mels, together, strict=False))[1:]:
        assert np.abs(output - alone.vocode(mel)).max() <= TOLERANCE


def test_max_batch_one_calls_the_model_directly_and_bit_exactly(voice, bridge) -> None:
    mel = _mels()[3]
    direct = _vocoder(voice, bridge, EngineSettings(precision="fp32"))
    batched = _vocoder(voice, bridge, EngineSettings(precision="fp32", batching=BATCHED))
    try:
        assert direct.batcher is None and direct.queue_depth == 0
        # A stream alone in a batching engine runs unpadded, unmasked: the very same numbers.
        assert np.array_equal(_stream(direct, mel, 4), _stream(batched, mel, 4))
    finally:
        batched.close()


def _sentences() -> list[list[int]]:
    return [[1] + BASE_IDS[: 4 + 3 * i] * (1 + i % 3) + [0, 10, 0, 2] for i in range(STREAMS)]


def _chunked_mel(engine: AcousticEngine, ids: list[int], stop_after_chunks: int | None = None) -> np.ndarray:
    params = SynthesisParams()
    plan = engine.plan(ids, params, engine.synthesis_seed(ids, params))
    chunks = []
    for count, chunk in enumerate(engine.mel_chunks(plan)):
        if stop_after_chunks is not None and count == stop_after_chunks:
            break  # the caller went away mid-sentence
        chunks.append(chunk)
    return np.concatenate(chunks, axis=1)


def test_acoustic_sentence_batched_with_seven_others_equals_it_alone(voice, bridge) -> None:
    sentences = _sentences()
    alone = _acoustic(voice, bridge, EngineSettings(precision="fp32"))
    references = []
    for ids in sentences:
        params = SynthesisParams()
        references.append(alone.mel_whole(alone.plan(ids, params, alone.synthesis_seed(ids, params))))
    assert len({reference.shape[1] for reference in references}) > 4, "sentences of mixed lengths"
    stats: list[BatchStats] = []
    batched = _acoustic(voice, bridge, EngineSettings(precision="fp32", batching=BATCHED, on_batch=stats.append))
    try:
        stops = [2] + [None] * (STREAMS - 1)
        together = _run_together([lambda ids=ids, s=stop: _chunked_mel(batched, ids, s) for ids, stop in zip(sentences, stops, strict=False)])
    finally:
        batched.close()
    for reference, output in list(zip(references, together, strict=False))[1:]:
        assert output.shape == reference.shape
        assert np.abs(output - reference).max() <= TOLERANCE
    assert max(s.batch_size for s in stats) > 1, "no two sentences ever shared a batch: the test proved nothing"


def test_bf16_vocoder_is_close_to_fp32_but_not_the_same(voice, bridge) -> None:
    mel = _mels()[4]
    fp32 = _vocoder(voice, bridge, EngineSettings(precision="fp32")).vocode(mel)
    bf16 = _vocoder(voice, bridge, EngineSettings(precision="bf16")).vocode(mel)
    difference = np.abs(bf16 - fp32).max()
    assert 0 < difference < 0.05
    assert bf16.dtype == np.float32 and bf16.shape == fp32.shape


def test_unknown_precision_is_refused() -> None:
    with pytest.raises(ValueError, match="precision"):
        EngineSettings(precision="fp8")


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_cuda_without_a_gpu_is_refused_with_a_clear_error(voice, bridge) -> None:
    with pytest.raises(ValueError, match="no CUDA GPU"):
        _vocoder(voice, bridge, EngineSettings(precision="fp32", device="cuda"))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_vocoder_matches_cpu(voice, bridge) -> None:
    mel = _mels()[2]
    cpu = _vocoder(voice, bridge, EngineSettings(precision="fp32")).vocode(mel)
    gpu = _vocoder(voice, bridge, EngineSettings(precision="fp32", device="cuda")).vocode(mel)
    assert np.abs(gpu - cpu).max() <= 1e-3
