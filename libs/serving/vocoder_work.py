"""The vocoder worker's work on one stream: mel slices in, each vocoder step run by its listener's
need and answered as soon as it is done, however many slices a message brings.

A request's slack is of the audio of its first slice, which the vocoder makes `lag_frames` later
than the slice's mel; a step whose audio starts earlier in the sentence is due that much sooner.
Every step goes to the scheduler with its deadline and its size. While a step waits in a busy
queue, a `busy` answer every second tells the gateway the worker is busy, not gone.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import numpy as np

from libs.pb.tts.vocoder.v1 import vocoder_pb2
from libs.scheduling.runner import with_heartbeats
from libs.scheduling.scheduler import Scheduler
from libs.scheduling.stream import PlaybackDeadline, StreamPlayback
from libs.telemetry.metrics import STAGE_CHUNK, VocoderMetrics
from libs.voice.vocode_session import SentenceSession, StreamSlices


class VocoderWork:
    """One vocoder stream's slices and steps."""

    def __init__(self, engine: Any, scheduler: Scheduler, metrics: VocoderMetrics, speaker_id: int = 0) -> None:
        self._engine = engine
        self._scheduler = scheduler
        self._metrics = metrics

        def open_stream(origin_frame: int, emit_from_frame: int) -> Any:
            return engine.open_stream(origin_frame, emit_from_frame, speaker_id=speaker_id)

        self.slices = StreamSlices(engine.n_mels, engine.hop_length, open_stream)
        self._playback: StreamPlayback | None = None
        self._frame_s = engine.hop_length / engine.sample_rate_hz

    async def answer(self, request: vocoder_pb2.VocodeRequest, arrived_s: float) -> AsyncIterator[vocoder_pb2.VocodeResponse]:
        """The samples `request`'s slices make ready, step by step, as each step is done."""
        if not request.slices:
            return  # nothing to vocode
        received_s = time.perf_counter()
        anchor = request.slices[0]
        if self._playback is None:
            first_audio = anchor.sentence_index == 0 and anchor.first_frame == 0 and not request.context_only
            first_frames = self._engine.schedule.chunk_frames(0) - self._engine.lag_frames
            self._playback = StreamPlayback.opening(first_audio, max(0, first_frames) * self._frame_s)
        deadline = self._playback.deadline(arrived_s, request.playback_slack_ms, request.downstream_ms)
        anchor_s = max(0, anchor.first_frame - self._engine.lag_frames) * self._frame_s
        runner = self._scheduler.runner
        for mel_slice in request.slices:
            session = self.slices.accept(mel_slice, request.context_only)
            while session.has_step():
                block = None
                async for block in with_heartbeats(
                    runner.run(
                        STAGE_CHUNK,
                        session.next_step_frames,
                        session.step,
                        deadline_s=self._due(session, anchor.sentence_index, deadline, anchor_s),
                        first_audio=deadline.first_audio,
                        starting=deadline.starting,
                        rank_s=deadline.stream.asked_s,
                        on_start=lambda started_s: self._metrics.mel_queue_seconds.observe(started_s - received_s),
                    ),
                    runner.steps_done,
                ):
                    if block is None:
                        yield vocoder_pb2.VocodeResponse(utterance_id=mel_slice.utterance_id, sentence_index=mel_slice.sentence_index, busy=True)
                if block is None:
                    continue
                audio_s = len(block.samples) / self._engine.sample_rate_hz
                deadline.stream.made(audio_s)
                self._scheduler.produced(audio_s)
                self._metrics.samples_total.inc(len(block.samples))
                yield vocoder_pb2.VocodeResponse(
                    utterance_id=mel_slice.utterance_id,
                    sentence_index=mel_slice.sentence_index,
                    first_sample=block.first_sample,
                    samples=np.asarray(block.samples, dtype="<f4").tobytes(),
                    sample_rate_hz=self._engine.sample_rate_hz,
                    is_last=block.is_last,
                )

    def _due(self, session: SentenceSession, anchor_sentence: int, deadline: PlaybackDeadline, anchor_s: float) -> float:
        """When the listener needs the audio of `session`'s next step."""
        if session.sentence_index != anchor_sentence:
            return deadline.at_s
        return deadline.at_offset_s(session.next_sample / self._engine.sample_rate_hz - anchor_s)
