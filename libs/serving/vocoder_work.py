"""The vocoder worker's work on one stream: mel slices in, each vocoder step run by its listener's
need and answered as soon as it is done, however many slices a message brings.

A request's slack is of the audio of its first slice, which the vocoder makes `lag_frames` later
than the slice's mel; a step whose audio starts earlier in the sentence is due that much sooner.
Every step goes to the scheduler with its deadline and its size. While a step waits in a busy
queue, a `busy` answer every second tells the gateway the worker is busy, not gone.

A step whose listener needs its audio sooner than the worker's longest step takes to make (its
step lead) runs a part at a time, each part answered as it is done (`VocoderStream.in_parts`; the
samples are the whole step's): the listener's next audio then comes after a part's work, not the
whole step's, and between parts the scheduler may take a more urgent step of another stream. That is
a starting listener, which holds only its first piece, or one that queueing left short. A listener
that holds more saves the calls (each part is a call and a message: a few tenths of a millisecond),
except while another stream on the worker is in its start (`START_STEPS`; `Scheduler.steps_in_parts`):
a whole step begun just before that stream's next step arrived would hold the core it needs.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import numpy as np

from libs.pb.tts.vocoder.v1 import vocoder_pb2
from libs.scheduling.runner import with_heartbeats
from libs.scheduling.scheduler import Scheduler
from libs.scheduling.stream import START_STEPS, PlaybackDeadline, StreamPlayback
from libs.telemetry import tracing
from libs.telemetry.metrics import STAGE_CHUNK, VocoderMetrics
from libs.voice.vocode_session import SentenceSession, StreamSlices


class VocoderWork:
    """One vocoder stream's slices and steps."""

    def __init__(
        self,
        engine: Any,
        scheduler: Scheduler,
        metrics: VocoderMetrics,
        open_streams: Callable[[], int],
        speaker_id: int = 0,
        tier: str = "",
    ) -> None:
        """`engine` is the voice's (quality tier); `tier` the stream's (its tts-tier header), which a
        request may change for the sentence it starts (VocodeRequest.tier); `open_streams()` the streams
        the worker has open (its admission's count)."""
        self._voice = engine
        self._stream_tier = tier
        self._engine = engine.for_tier(tier)  # the stream's tier: an unknown one is refused as the stream opens
        self._scheduler = scheduler
        self._metrics = metrics
        self._open_streams = open_streams

        def opener(tier: str) -> Any:
            sentence_engine = self._engine_of(tier)

            def open_stream(origin_frame: int, emit_from_frame: int) -> Any:
                return sentence_engine.open_stream(origin_frame, emit_from_frame, speaker_id=speaker_id)

            return open_stream

        self.slices = StreamSlices(engine.n_mels, engine.hop_length, opener)
        self._playback: StreamPlayback | None = None
        self._frame_s = engine.hop_length / engine.sample_rate_hz
        start_frames = sum(self._engine.schedule.chunk_frames(index) for index in range(START_STEPS)) - self._engine.lag_frames
        self._start_audio_s = start_frames * self._frame_s
        scheduler.stream_starting(self, True)  # a new stream's first request may yet start its listener

    async def answer(self, request: vocoder_pb2.VocodeRequest, arrived_s: float) -> AsyncIterator[vocoder_pb2.VocodeResponse]:
        """The samples `request`'s slices make ready, step by step, as each step is done."""
        if not request.slices:
            return  # nothing to vocode
        received_s = time.perf_counter()
        anchor = request.slices[0]
        engine = self._engine_of(request.tier)
        # The capacity is counted in the quality tier's audio: a fast tier's second costs a fraction of one.
        ratio = getattr(self._voice, "fast_tier_cost", 0.0)
        weight = ratio if engine is not self._voice and ratio > 0 else 1.0
        if self._playback is None:
            first_audio = anchor.sentence_index == 0 and anchor.first_frame == 0 and not request.context_only
            first_frames = engine.schedule.chunk_frames(0) - engine.lag_frames
            self._playback = StreamPlayback.opening(first_audio, max(0, first_frames) * self._frame_s, unlistened=request.unlistened)
            if self._playback.unlistened:
                self._metrics.unlistened_streams_total.inc()
        deadline = self._playback.deadline(arrived_s, request.playback_slack_ms, request.downstream_ms)
        anchor_s = max(0, anchor.first_frame - engine.lag_frames) * self._frame_s
        runner = self._scheduler.runner
        for mel_slice in request.slices:
            session = self.slices.accept(mel_slice, request.context_only, request.tier)
            while session.has_step():
                due_s = self._due(session, anchor.sentence_index, deadline, anchor_s)
                if not session.step_continues:
                    self._scheduler.stream_starting(self, deadline.stream.within_first(self._start_audio_s))
                    short = due_s - time.monotonic() < self._scheduler.step_lead_s()
                    session.in_parts = short or self._scheduler.steps_in_parts(self._open_streams())
                block = None
                async for block in with_heartbeats(
                    runner.run(
                        STAGE_CHUNK,
                        session.next_step_frames,
                        session.step,
                        deadline_s=due_s,
                        first_audio=deadline.first_audio,
                        starting=deadline.starting,
                        rank_s=deadline.stream.asked_s,
                        span=tracing.SPAN_VOCODER_STEP,
                        span_attributes={tracing.ATTR_SENTENCE_INDEX: mel_slice.sentence_index},
                        on_start=lambda started_s: self._metrics.mel_queue_seconds.observe(started_s - received_s),
                    ),
                    runner.progress,
                ):
                    if block is None:
                        yield vocoder_pb2.VocodeResponse(utterance_id=mel_slice.utterance_id, sentence_index=mel_slice.sentence_index, busy=True)
                if block is None:
                    continue
                audio_s = len(block.samples) / self._engine.sample_rate_hz
                deadline.stream.made(audio_s)
                self._scheduler.produced(audio_s * weight)
                self._metrics.samples_total.inc(len(block.samples))
                yield vocoder_pb2.VocodeResponse(
                    utterance_id=mel_slice.utterance_id,
                    sentence_index=mel_slice.sentence_index,
                    first_sample=block.first_sample,
                    samples=np.asarray(block.samples, dtype="<f4").tobytes(),
                    sample_rate_hz=self._engine.sample_rate_hz,
                    is_last=block.is_last,
                    step_continues=block.step_continues,
                )

    def close(self) -> None:
        """The stream has ended."""
        self._scheduler.stream_starting(self, False)

    def _engine_of(self, tier: str) -> Any:
        """The engine of `tier` ("": the stream's); InvalidRequestError for one this voice lacks here."""
        return self._voice.for_tier(tier or self._stream_tier)

    def _due(self, session: SentenceSession, anchor_sentence: int, deadline: PlaybackDeadline, anchor_s: float) -> float:
        """When the listener needs the audio of `session`'s next step."""
        if session.sentence_index != anchor_sentence:
            return deadline.at_s
        return deadline.at_offset_s(session.next_sample / self._engine.sample_rate_hz - anchor_s)
