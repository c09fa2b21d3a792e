"""A vocoder step run a part at a time (`VocoderStream.in_parts`) on the default voice's vocoder: the
same samples bit for bit as the whole step, each part's as soon as it is done; and over real gRPC the
worker runs the steps of a listener short of audio in parts, each answered as it is done, and those
of a listener that holds plenty whole, unless another stream on the worker is in its first seconds."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from libs.pb.tts.vocoder.v1 import vocoder_pb2, vocoder_pb2_grpc
from libs.voice.engine import VocoderEngine
from libs.wire.mel_slices import cut_whole_mel, to_message
from tests.support.vocoder_worker import vocoder_worker

FRAMES = 330
"""Frames of the test sentence: a first step of 32, then 32, 64, 128 and a last step of 74."""


@pytest.fixture(scope="module")
def engine() -> VocoderEngine:
    engine = VocoderEngine.load_default()
    if engine.stream_backend != "onnxruntime" or engine._onnx is None or engine._onnx.slice_frames is None:
        pytest.skip("steps run in slices only in onnxruntime on a CPU")
    return engine


@pytest.fixture(scope="module")
def mel(engine: VocoderEngine) -> np.ndarray:
    return np.random.default_rng(5).normal(-5.0, 1.5, size=(engine.n_mels, FRAMES)).astype(np.float32)


def _stream(engine: VocoderEngine, mel: np.ndarray, in_parts: bool, emit_from: int = 0) -> list[tuple[np.ndarray, bool, int]]:
    """Every step's (samples, step_continues, frames it took by `next_step_frames`), the mel arriving 7 frames at a time."""
    stream = engine.open_stream(0, emit_from)
    stream.in_parts = in_parts
    out = []
    for start in range(0, FRAMES, 7):
        stream.add(mel[:, start : start + 7])
        if start + 7 >= FRAMES:
            stream.end()
        while stream.step_ready():
            frames = stream.next_step_frames
            out.append((stream.step(), stream.step_continues, frames))
    assert stream.done and not stream.step_ready()
    return out


def test_a_step_in_parts_gives_the_whole_steps_samples_bit_for_bit(engine: VocoderEngine, mel: np.ndarray) -> None:
    whole = _stream(engine, mel, in_parts=False)
    parts = _stream(engine, mel, in_parts=True)
    assert [frames for _, _, frames in whole] == [32, 32, 64, 128, FRAMES - 256]
    slice_frames = engine._onnx.slice_frames
    # Every step but the first in slices: the 64-frame step in 64 // slice parts, and so on (a step no
    # wider than a slice in one).
    counts = {width: max(1, width // slice_frames) for width in (32, 64, 128)}
    expected = [32] + [width // counts[width] for width in (32, 64, 128) for _ in range(counts[width])]
    assert [frames for _, _, frames in parts][: len(expected)] == expected
    assert sum(frames for _, _, frames in parts) == FRAMES
    # A part says whether the rest of its step follows; the last part of each step does not.
    ends = [index for index, (_, continues, _) in enumerate(parts) if not continues]
    assert len(ends) == len(whole)
    assert len(parts) > len(whole) + 4
    np.testing.assert_array_equal(np.concatenate([s for s, _, _ in parts]), np.concatenate([s for s, _, _ in whole]))
    # Each step's samples are its parts' samples, joined.
    step_samples = [s for s, _, _ in whole]
    begin = 0
    for index, end in enumerate(ends):
        np.testing.assert_array_equal(np.concatenate([s for s, _, _ in parts[begin : end + 1]]), step_samples[index])
        begin = end + 1


def test_a_resumed_stream_in_parts_repeats_the_samples_from_its_resume_point(engine: VocoderEngine, mel: np.ndarray) -> None:
    whole = np.concatenate([s for s, _, _ in _stream(engine, mel, in_parts=False)])
    resumed = np.concatenate([s for s, _, _ in _stream(engine, mel, in_parts=True, emit_from=150)])
    np.testing.assert_array_equal(resumed, whole[150 * engine.hop_length :])


@contextlib.asynccontextmanager
async def _worker(engine: VocoderEngine) -> AsyncIterator[tuple[vocoder_pb2_grpc.VocoderStub, Callable[[], bool]]]:
    """A vocoder servicer on `engine` with a calibrated scheduler, over real gRPC: its stub, and whether
    its streams' steps run in parts now (`Scheduler.steps_in_parts` of the streams its admission counts)."""
    async with vocoder_worker(engine, ThreadPoolExecutor(1)) as worker:
        assert worker.scheduler.step_lead_s() > 0
        yield worker.stub, lambda: worker.scheduler.steps_in_parts(worker.admission.open_streams)


def _playing_request(engine: VocoderEngine, mel: np.ndarray, slack_ms: float) -> vocoder_pb2.VocodeRequest:
    """One sentence of a playing listener (the stream's second) in one message with `slack_ms`."""
    cuts = cut_whole_mel(mel, engine.hop_length, engine.sample_rate_hz)
    slices = [to_message(cut, utterance_id="u", sentence_index=1, sentence_frame_count=FRAMES) for cut in cuts]
    return vocoder_pb2.VocodeRequest(slices=slices, playback_slack_ms=slack_ms)


async def _replies(stub: vocoder_pb2_grpc.VocoderStub, request: vocoder_pb2.VocodeRequest) -> list[vocoder_pb2.VocodeResponse]:
    call = stub.Vocode(iter([request]), timeout=120)
    return [reply async for reply in call if not reply.busy]


async def _vocode(engine: VocoderEngine, mel: np.ndarray, slack_ms: float) -> list[vocoder_pb2.VocodeResponse]:
    """A playing listener's sentence with `slack_ms`, alone on a worker, over real gRPC."""
    async with _worker(engine) as (stub, _):
        return await _replies(stub, _playing_request(engine, mel, slack_ms))


async def test_the_worker_answers_a_needy_listeners_steps_part_by_part_and_a_provided_ones_whole(
    engine: VocoderEngine, mel: np.ndarray
) -> None:
    needy = await _vocode(engine, mel, slack_ms=-3000.0)  # the listener ran dry three seconds ago: every step is overdue
    provided = await _vocode(engine, mel, slack_ms=60_000.0)  # it holds a minute of audio
    assert not any(reply.step_continues for reply in provided)
    assert len(provided) == 5  # the five steps, whole
    # Every step between the first and the last in its slices: as many more answers as those slices.
    slice_frames = engine._onnx.slice_frames
    assert len(needy) >= len(provided) + sum(max(1, width // slice_frames) - 1 for width in (32, 64, 128)) > len(provided)
    assert [reply.step_continues for reply in needy].count(False) == len(provided)
    assert not needy[-1].step_continues and needy[-1].is_last
    joined = [np.concatenate([np.frombuffer(r.samples, dtype="<f4") for r in replies]) for replies in (needy, provided)]
    np.testing.assert_array_equal(joined[0], joined[1])
    assert len(joined[0]) == FRAMES * engine.hop_length
    # Parts follow each other sample for sample.
    assert [r.first_sample for r in needy[1:]] == [r.first_sample + len(r.samples) // 4 for r in needy[:-1]]


async def test_a_provided_listeners_steps_run_in_parts_while_another_stream_starts_and_whole_after(
    engine: VocoderEngine, mel: np.ndarray
) -> None:
    """A listener that holds a minute of audio gets its steps in parts while a new stream on the same
    worker is in its first seconds (a whole step would hold the core that stream's next step needs),
    and whole again once that stream has gone; the samples are the same either way."""
    async with _worker(engine) as (stub, in_parts):
        first_step = engine.schedule.chunk_frames(0) + engine.lag_frames
        cuts = [cut for cut in cut_whole_mel(mel, engine.hop_length, engine.sample_rate_hz) if cut.first_frame <= first_step]
        opening = vocoder_pb2.VocodeRequest(
            slices=[to_message(cut, utterance_id="new", sentence_index=0, sentence_frame_count=FRAMES) for cut in cuts],
            playback_slack_ms=0.0,
        )
        more = asyncio.Event()

        async def starting() -> AsyncIterator[vocoder_pb2.VocodeRequest]:
            yield opening
            await more.wait()

        starter = stub.Vocode(starting(), timeout=120)
        replies = aiter(starter)
        reply = await anext(replies)
        while reply.busy:
            reply = await anext(replies)
        assert reply.sentence_index == 0 and len(reply.samples) > 0  # its listener heard its first step
        assert not in_parts()  # a stream alone runs its steps as its own listener needs

        beside = await _replies(stub, _playing_request(engine, mel, 60_000.0))
        starter.cancel()
        more.set()
        for _ in range(200):  # the worker sees the cancel
            if not in_parts():
                break
            await asyncio.sleep(0.05)
        assert not in_parts()
        after = await _replies(stub, _playing_request(engine, mel, 60_000.0))

    assert any(reply.step_continues for reply in beside)
    assert [reply.step_continues for reply in beside].count(False) == len(after) == 5
    assert not any(reply.step_continues for reply in after)
    joined = [np.concatenate([np.frombuffer(r.samples, dtype="<f4") for r in replies]) for replies in (beside, after)]
    np.testing.assert_array_equal(joined[0], joined[1])
