"""The acoustic worker's gRPC servicer: sentence requests in, 40 ms mel slices out (a chunk's slices per message)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from concurrent.futures import Executor
from typing import Any

import grpc

from libs.audio.slicing import DEFAULT_SLICE_MS
from libs.pb.tts.acoustic.v1 import acoustic_pb2, acoustic_pb2_grpc
from libs.pb.tts.common.v1 import mel_pb2
from libs.serving.admission import Admission
from libs.serving.memory import RELEASER
from libs.serving.scheduling import PlaybackDeadline, StreamPlayback, stamped, vocoder_frames_out
from libs.serving.server import StreamTracker
from libs.serving.status import abort_for
from libs.telemetry import tracing
from libs.telemetry.inference import InferenceRunner
from libs.telemetry.metrics import STAGE_CHUNK, STAGE_PLAN, AcousticMetrics
from libs.voice.checks import SentenceOrder, check_sentence_frames, check_sentence_request
from libs.wire.mel_slices import SliceCutter, to_message

_log = logging.getLogger(__name__)


class AcousticServicer(acoustic_pb2_grpc.AcousticServicer):
    """Runs the acoustic engine for each sentence of a stream, in order, off the event loop."""

    def __init__(self, voice_name: str, metrics: AcousticMetrics, executor: Executor, admission: Admission) -> None:
        self.engine: Any = None  # an AcousticEngine once loaded; None means "still loading"
        self._admission = admission
        self._voice_name = voice_name
        self._metrics = metrics
        self._tracker = StreamTracker(metrics.inflight_streams, metrics.streams_total)
        self._sentences_in_progress = 0
        self._inference = InferenceRunner(executor, metrics, lambda: getattr(self.engine, "batcher", None) is not None)

    async def GetModelInfo(
        self, request: acoustic_pb2.GetModelInfoRequest, context: grpc.aio.ServicerContext
    ) -> acoustic_pb2.ModelInfo:
        engine = await self._ready_engine(context)
        return acoustic_pb2.ModelInfo(
            model_version=engine.model_version,
            voice=self._voice_name,
            sample_rate_hz=engine.sample_rate_hz,
            hop_length=engine.hop_length,
            n_mels=engine.n_mels,
            num_speakers=engine.num_speakers,
        )

    async def SynthesizeMel(
        self, request_iterator: AsyncIterator[acoustic_pb2.SentenceRequest], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[mel_pb2.MelSlices]:
        engine = await self._ready_engine(context)
        await self._admission.admit(context, engine)  # RESOURCE_EXHAUSTED when out of room
        context.add_done_callback(RELEASER.call_done)  # a long sentence's memory goes back once the stream ends
        async with self._tracker.track(context):
            order = SentenceOrder()
            playback: StreamPlayback | None = None
            async for request, received_s in stamped(request_iterator):
                self._sentences_in_progress += 1
                if playback is None:
                    playback = StreamPlayback.opening(request.sentence_index == 0 and request.start_frame == 0)
                try:
                    deadline = playback.deadline(received_s, request.playback_slack_ms)
                    async for message in self._sentence(engine, request, order, deadline):
                        yield message
                except (asyncio.CancelledError, grpc.aio.AbortError):
                    raise
                except Exception as error:  # every failure goes through the one status table
                    await abort_for(context, error)
                finally:
                    self._sentences_in_progress -= 1

    async def _sentence(
        self, engine: Any, request: acoustic_pb2.SentenceRequest, order: SentenceOrder, deadline: PlaybackDeadline
    ) -> AsyncIterator[mel_pb2.MelSlices]:
        """The sentence's mel, a chunk per message; each step runs by `deadline`, which every chunk
        moves on by the audio it makes."""
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
            worker_voice=self._voice_name,
            worker_model_version=engine.model_version,
            num_speakers=engine.num_speakers,
            vocabulary_size=engine.acoustic.config.n_vocab,
        )
        order.check(request.utterance_id, request.sentence_index)
        dtype = request.dtype or mel_pb2.MEL_DTYPE_FLOAT32
        params = SynthesisParams(
            speaker_id=request.speaker_id,
            speed=request.speed,
            noise_scale=request.noise_scale,
            noise_w=request.noise_w,
        )
        phoneme_ids = list(request.phoneme_ids)
        seed = request.seed or engine.synthesis_seed(phoneme_ids, params)
        plan = await self._inference.run(
            STAGE_PLAN,
            self._plan,
            engine,
            phoneme_ids,
            params,
            seed,
            request.sentence_index == 0 and request.start_frame == 0,
            span=tracing.SPAN_ACOUSTIC_PLAN,
            span_attributes={tracing.ATTR_SENTENCE_INDEX: request.sentence_index, tracing.ATTR_PHONEME_COUNT: len(phoneme_ids)},
            deadline_s=deadline.at_s,
            first_audio=deadline.first_audio,
        )
        check_sentence_frames(
            request.sentence_index, plan.frame_count, request.start_frame, engine.hop_length / engine.sample_rate_hz
        )
        cutter = SliceCutter(
            plan.frame_count, engine.hop_length, engine.sample_rate_hz, request.slice_ms or DEFAULT_SLICE_MS, request.start_frame
        )
        chunks = engine.mel_chunks(plan, request.start_frame)
        alignment: list[int] | None = [int(frames) for frames in plan.phoneme_frames]
        frame_s = engine.hop_length / engine.sample_rate_hz
        meter = self._admission.meter
        # One chunk per executor call: a cancelled stream stops after the chunk in progress. Each
        # chunk moves the deadline on by the audio the vocoder can make once it is in.
        frames_made = audio_frames = 0
        frames_to_make = plan.frame_count - request.start_frame
        while (
            chunk := await self._inference.run(
                STAGE_CHUNK, next, chunks, None, deadline_s=deadline.at_s, first_audio=deadline.first_audio
            )
        ) is not None:
            frames_made += chunk.shape[-1]
            unlocked = vocoder_frames_out(frames_made, frames_to_make)
            deadline.advance((unlocked - audio_frames) * frame_s)
            audio_frames = unlocked
            if meter is not None:
                meter.produced(chunk.shape[-1] * frame_s)
            message = mel_pb2.MelSlices()
            for cut in cutter.push(chunk):
                self._metrics.frames_total.inc(cut.frames.shape[1])
                message.slices.append(
                    to_message(
                        cut,
                        utterance_id=request.utterance_id,
                        sentence_index=request.sentence_index,
                        sentence_frame_count=plan.frame_count,
                        dtype=dtype,
                        phoneme_frames=alignment,
                    )
                )
                alignment = None
            if message.slices:  # the chunk's slices, in one message
                yield message
        if not cutter.done:
            raise RuntimeError("the engine's mel ended before the sentence's last slice")
        self._metrics.sentences_total.inc()

    def _plan(self, engine: Any, phoneme_ids: list[int], params: Any, seed: int, first_sentence: bool) -> Any:
        """`engine.plan` on an inference thread. A client waits for a first sentence's first audio:
        when nothing else is in progress here as the step starts (not when it was queued: in a burst
        the first request arrives alone), the text side gets both cores. A later sentence has the
        playback of the earlier ones as slack."""
        return engine.plan(phoneme_ids, params, seed, first_sentence and self._sentences_in_progress == 1)

    def install(self, engine: Any) -> None:
        """Serve with `engine` from now on (the model has loaded and warmed up)."""
        if self._admission.meter is not None:
            self._admission.meter.reset()  # loading and warming up is not serving
        self.engine = engine

    async def _ready_engine(self, context: grpc.aio.ServicerContext) -> Any:
        if self.engine is None:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "the acoustic model is still loading; retry shortly")
        return self.engine
