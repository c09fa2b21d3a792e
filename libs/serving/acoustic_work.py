"""The acoustic worker's work on one stream: each sentence request's plan and mel chunks, run by its
listener's need, answered a chunk's slices per message.

Every step goes to the scheduler with its deadline (libs.scheduling.stream) and its size, so the
cost model estimates it and learns from it. A chunk is needed when the audio before the vocoder step
it completes runs out (the request's `vocoder_pacing`); the gateway has already taken the vocoder's
own step and the hops off the request's slack. While a step waits in a busy queue, an empty message
every second tells the gateway the worker is busy, not gone.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from libs.audio.slicing import DEFAULT_SLICE_MS
from libs.pb.tts.acoustic.v1 import acoustic_pb2
from libs.pb.tts.common.v1 import mel_pb2
from libs.scheduling.runner import with_heartbeats
from libs.scheduling.scheduler import Scheduler
from libs.scheduling.stream import PlaybackDeadline, StreamPlayback, VocoderPacing
from libs.telemetry import tracing
from libs.telemetry.metrics import STAGE_CHUNK, STAGE_PLAN, AcousticMetrics
from libs.voice.checks import SentenceOrder, check_sentence_frames, check_sentence_request
from libs.wire.mel_slices import SliceCutter, to_message


class AcousticWork:
    """Sentences of the streams of one acoustic worker."""

    def __init__(self, scheduler: Scheduler, metrics: AcousticMetrics) -> None:
        self._scheduler = scheduler
        self._metrics = metrics
        self._sentences_in_progress = 0

    async def stream(self, engine: Any, requests: AsyncIterator[tuple[acoustic_pb2.SentenceRequest, float]]) -> AsyncIterator[mel_pb2.MelSlices]:
        """The answers to one stream's sentence requests, each stamped with when it arrived, in order."""
        order = SentenceOrder()
        playback: StreamPlayback | None = None
        async for request, received_s in requests:
            if playback is None:
                pacing = VocoderPacing.from_message(request.vocoder_pacing if request.HasField("vocoder_pacing") else None)
                startup_s = pacing.first_audio_frames() * engine.hop_length / engine.sample_rate_hz
                first_audio = request.sentence_index == 0 and request.start_frame == 0
                playback = StreamPlayback.opening(first_audio, startup_s, unlistened=request.unlistened)
                if playback.unlistened:
                    self._metrics.unlistened_streams_total.inc()
            deadline = playback.deadline(received_s, request.playback_slack_ms, request.downstream_ms)
            self._sentences_in_progress += 1
            try:
                async for message in self._sentence(engine, request, order, deadline):
                    yield message
            finally:
                self._sentences_in_progress -= 1

    async def _sentence(
        self, engine: Any, request: acoustic_pb2.SentenceRequest, order: SentenceOrder, deadline: PlaybackDeadline
    ) -> AsyncIterator[mel_pb2.MelSlices]:
        from libs.voice.engine import SynthesisParams  # torch-heavy: imported only inside the worker

        check_sentence_request(
            utterance_id=request.utterance_id,
            sentence_index=request.sentence_index,
            phoneme_ids=request.phoneme_ids,
            voice=request.voice,
            speaker_id=request.speaker_id,
            speed=request.speed,
            noise_scale=request.noise_scale,
            noise_w=request.noise_w,
            start_frame=request.start_frame,
            slice_ms=request.slice_ms,
            dtype=request.dtype,
            expected_model_version=request.expected_model_version,
            worker_voice=engine.voice_name,
            worker_model_version=engine.model_version,
            num_speakers=engine.num_speakers,
            vocabulary_size=engine.acoustic.config.n_vocab,
            spoken_first_id=request.spoken_first_id,
            spoken_end_id=request.spoken_end_id,
        )
        order.check(request.utterance_id, request.sentence_index)
        pacing = VocoderPacing.from_message(request.vocoder_pacing if request.HasField("vocoder_pacing") else None)
        params = SynthesisParams(speaker_id=request.speaker_id, speed=request.speed, noise_scale=request.noise_scale, noise_w=request.noise_w)
        phoneme_ids = list(request.phoneme_ids)
        seed = request.seed or engine.synthesis_seed(phoneme_ids, params)
        runner, costs = self._scheduler.runner, self._scheduler.costs
        # A listener waits for a first sentence's plan; work nobody listens to waits for nothing.
        listener_waits = request.sentence_index == 0 and request.start_frame == 0 and not deadline.stream.unlistened
        plan = None
        async for plan in with_heartbeats(
            runner.run(
                STAGE_PLAN,
                len(phoneme_ids),
                self._plan,
                engine,
                phoneme_ids,
                params,
                seed,
                listener_waits,
                deadline_s=deadline.at_s,
                first_audio=deadline.first_audio,
                starting=deadline.starting,
                rank_s=deadline.stream.asked_s,
                after_s=costs.wall_s(STAGE_CHUNK, self._scheduler.first_step_units),
                span=tracing.SPAN_ACOUSTIC_PLAN,
                span_attributes={tracing.ATTR_SENTENCE_INDEX: request.sentence_index, tracing.ATTR_PHONEME_COUNT: len(phoneme_ids)},
            ),
            runner.progress,
        ):
            if plan is None:
                yield mel_pb2.MelSlices()  # busy, not gone
        assert plan is not None
        frame_s = engine.hop_length / engine.sample_rate_hz
        # The frames of the spoken ids (all of them unless the request names a span), counted from the first.
        part = engine.spoken_part(plan, request.spoken_first_id, request.spoken_end_id or None)
        check_sentence_frames(request.sentence_index, part.frame_count, request.start_frame, frame_s)
        cutter = SliceCutter(
            part.frame_count, engine.hop_length, engine.sample_rate_hz, request.slice_ms or DEFAULT_SLICE_MS, request.start_frame
        )
        first_frame = part.skip_frames + request.start_frame
        chunks = engine.mel_chunks(part.plan, first_frame)
        alignment: list[int] | None = [int(frames) for frames in part.phoneme_frames]
        # One chunk per executor call: a cancelled stream stops after the chunk in progress. Each
        # chunk moves the deadline on by the audio the vocoder can make once it is in.
        frames_made = audio_frames = 0
        frames_to_make = part.frame_count - request.start_frame
        for units in step_units(engine.step_frames(part.plan.frame_count), engine.lag_frames, first_frame):
            chunk = None
            async for chunk in with_heartbeats(
                runner.run(
                    STAGE_CHUNK,
                    units,
                    next,
                    chunks,
                    None,
                    deadline_s=deadline.at_s,
                    first_audio=deadline.first_audio,
                    starting=deadline.starting,
                    rank_s=deadline.stream.asked_s,
                    span=tracing.SPAN_ACOUSTIC_CHUNK,
                    span_attributes={tracing.ATTR_SENTENCE_INDEX: request.sentence_index},
                ),
                runner.progress,
            ):
                if chunk is None:
                    yield mel_pb2.MelSlices()
            if chunk is None:
                break
            chunk = chunk[:, : frames_to_make - frames_made]  # a span's right context is not spoken
            frames_made += chunk.shape[-1]
            unlocked = pacing.frames_out(frames_made, frames_to_make)
            deadline.advance((unlocked - audio_frames) * frame_s)
            audio_frames = unlocked
            self._scheduler.produced(chunk.shape[-1] * frame_s)
            message = mel_pb2.MelSlices()
            for cut in cutter.push(chunk):
                self._metrics.frames_total.inc(cut.frames.shape[1])
                message.slices.append(
                    to_message(
                        cut,
                        utterance_id=request.utterance_id,
                        sentence_index=request.sentence_index,
                        sentence_frame_count=part.frame_count,
                        dtype=request.dtype or mel_pb2.MEL_DTYPE_FLOAT32,
                        phoneme_frames=alignment,
                    )
                )
                alignment = None
            if message.slices:  # the chunk's slices, in one message
                yield message
            if cutter.done:  # a span ends before its plan's last step
                break
        if not cutter.done:
            raise RuntimeError("the engine's mel ended before the sentence's last slice")
        self._metrics.sentences_total.inc()

    def _plan(self, engine: Any, phoneme_ids: list[int], params: Any, seed: int, listener_waits: bool) -> Any:
        """`engine.plan` on an inference thread. A listener waits for a first sentence's first audio
        (`listener_waits`): when nothing else is in progress here as the step starts (not when it was
        queued: in a burst the first request arrives alone) and the budget has two cores or more, the
        text side gets every core. A later sentence has the playback of the earlier ones as slack."""
        wide = listener_waits and self._sentences_in_progress == 1 and self._scheduler.capacity.budget.cores >= 2
        return engine.plan(phoneme_ids, params, seed, wide)


def step_units(widths: list[int], lag_frames: int, start_frame: int) -> list[int]:
    """The size of each `next()` on a sentence's mel chunks that yields mel from `start_frame` on:
    `widths` are the prior frames of every model step (the first one's include the flow's
    `lag_frames`); a resumed sentence's first `next()` runs the steps before `start_frame` too."""
    units, pending, output_end = [], 0, 0
    for index, width in enumerate(widths):
        pending += width
        output_end += width - (lag_frames if index == 0 else 0)
        if index == len(widths) - 1 or output_end > start_frame:
            units.append(pending)
            pending = 0
    return units
