"""Work nobody listens to as it is made (prewarming, a long-form job) runs on what the listeners leave:
over real gRPC, a vocoder worker with both lanes runs every step of an unlistened stream on its
background thread (below the listeners' priority), where the same stream as an overdue listener runs
on its urgent thread."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator

import numpy as np
import pytest

from libs.pb.tts.vocoder.v1 import vocoder_pb2
from libs.scheduling.executor import DeadlineExecutor
from libs.scheduling.stream import UNLISTENED_DUE_S, StreamPlayback
from libs.voice.engine import VocoderEngine
from libs.wire.mel_slices import cut_whole_mel, to_message
from tests.support.vocoder_worker import vocoder_worker

FRAMES = 600
"""The sentence: some six vocoder steps."""
OVERDUE_MS = -60_000.0
"""The stream's slack: a listener that ran dry a minute ago, whose every step is due at once."""


@pytest.fixture(scope="module")
def engine() -> VocoderEngine:
    return VocoderEngine.load_default()


def _sentence(engine: VocoderEngine, unlistened: bool) -> vocoder_pb2.VocodeRequest:
    """One sentence of a stream that opened on a playing listener (its second), in one message."""
    mel = np.random.default_rng(3).normal(-5.0, 1.5, size=(engine.n_mels, FRAMES)).astype(np.float32)
    cuts = cut_whole_mel(mel, engine.hop_length, engine.sample_rate_hz)
    slices = [to_message(cut, utterance_id="u", sentence_index=1, sentence_frame_count=FRAMES) for cut in cuts]
    return vocoder_pb2.VocodeRequest(slices=slices, playback_slack_ms=OVERDUE_MS, unlistened=unlistened)


async def _lanes_run_on(engine: VocoderEngine, request: vocoder_pb2.VocodeRequest) -> tuple[list[bool], float, bytes]:
    """For each step of `request`'s stream on a worker with a background and an urgent thread: whether
    it ran at the process's own priority (the urgent thread); the worker's count of unlistened
    streams; the samples."""
    ran_at_normal_priority: list[bool] = []
    executor = DeadlineExecutor(1, name="test-vocoder", urgent_threads=1)
    async with vocoder_worker(engine, executor) as worker:
        executor.on_run = lambda normal, _wall_s, _cpu_s: ran_at_normal_priority.append(normal)

        async def requests() -> AsyncIterator[vocoder_pb2.VocodeRequest]:
            yield request

        replies = [reply async for reply in worker.stub.Vocode(requests(), timeout=120)]
        counted = worker.metrics.registry.get_sample_value("tts_vocoder_unlistened_streams_total")
    assert replies[-1].is_last
    return ran_at_normal_priority, counted, b"".join(r.samples for r in replies)


async def test_an_unlistened_streams_steps_run_below_the_listeners_and_make_the_same_samples(engine: VocoderEngine) -> None:
    unlistened, counted, samples = await _lanes_run_on(engine, _sentence(engine, unlistened=True))
    overdue, not_counted, listened_samples = await _lanes_run_on(engine, _sentence(engine, unlistened=False))
    assert len(unlistened) >= 4 and not any(unlistened)  # all on the background thread, whatever its slack said
    assert len(overdue) >= 4 and all(overdue)  # the control: the same stream, listened to, is urgent
    assert (counted, not_counted) == (1, 0)
    assert samples == listened_samples


def test_an_unlistened_streams_steps_are_due_after_any_listeners_and_never_start_it() -> None:
    playback = StreamPlayback.opening(True, startup_audio_s=0.14, unlistened=True)
    deadline = playback.deadline(received_s=100.0, playback_slack_ms=-500.0)  # its slack is not read
    assert deadline.at_s == 100.0 + UNLISTENED_DUE_S
    assert not playback.first_audio and not playback.starting and not deadline.starting
    assert not playback.within_first(math.inf)
    listener = StreamPlayback.opening(True, startup_audio_s=0.14)
    assert listener.first_audio and listener.deadline(100.0, -500.0).at_s == 99.5
