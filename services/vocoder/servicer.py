"""The vocoder worker's gRPC servicer: mel slices in, exact PCM out as soon as it can be produced."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from concurrent.futures import Executor
from typing import Any

import grpc
import numpy as np

from libs.pb.tts.vocoder.v1 import vocoder_pb2, vocoder_pb2_grpc
from libs.serving.admission import Admission
from libs.serving.memory import RELEASER
from libs.serving.scheduling import VOCODER_LAG_FRAMES, StreamPlayback, stamped
from libs.serving.server import StreamTracker
from libs.serving.status import abort_for
from libs.telemetry.inference import InferenceRunner
from libs.telemetry.metrics import STAGE_CHUNK, VocoderMetrics
from libs.voice.vocode_session import StreamSlices

CANCEL_GRACE_S = 0.1


class VocoderServicer(vocoder_pb2_grpc.VocoderServicer):
    """Vocodes each sentence of a stream as its own waveform, slice by slice, off the event loop."""

    def __init__(self, metrics: VocoderMetrics, executor: Executor, admission: Admission) -> None:
        self.engine: Any = None  # a VocoderEngine once loaded; None means "still loading"
        self._admission = admission
        self._metrics = metrics
        self._tracker = StreamTracker(metrics.inflight_streams, metrics.streams_total)
        self._inference = InferenceRunner(executor, metrics, lambda: getattr(self.engine, "batcher", None) is not None)

    async def Vocode(
        self, request_iterator: AsyncIterator[vocoder_pb2.VocodeRequest], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[vocoder_pb2.VocodeResponse]:
        engine = await self._ready_engine(context)
        await self._admission.admit(context, engine)  # RESOURCE_EXHAUSTED when out of room
        context.add_done_callback(RELEASER.call_done)  # a long sentence's memory goes back once the stream ends
        async with self._tracker.track(context):
            stream = StreamSlices(engine.n_mels, engine.hop_length, engine.open_stream)
            meter = self._admission.meter
            playback: StreamPlayback | None = None
            frame_s = engine.hop_length / engine.sample_rate_hz
            async for request, arrived_s in stamped(request_iterator):
                received_s = time.perf_counter()
                if not request.slices:
                    continue  # nothing to vocode
                # Each step runs by its listener's need; each answer moves the need on by its audio.
                anchor = request.slices[0]
                if playback is None:
                    first_audio = anchor.sentence_index == 0 and anchor.first_frame == 0 and not request.context_only
                    playback = StreamPlayback.opening(first_audio)
                try:
                    deadline = playback.deadline(arrived_s, request.playback_slack_ms)
                except Exception as error:  # every failure goes through the one status table
                    await abort_for(context, error)
                    return
                # The slack is of the audio of the request's first slice, which comes VOCODER_LAG_FRAMES
                # later than its mel; a step whose audio starts earlier in the sentence is due that much sooner.
                anchor_s = max(0, anchor.first_frame - VOCODER_LAG_FRAMES) * frame_s

                def step_due(session: Any, anchor: Any = anchor, deadline: Any = deadline, anchor_s: float = anchor_s) -> float:
                    if session.sentence_index != anchor.sentence_index:
                        return deadline.at_s
                    return deadline.at_offset_s(session.next_sample / engine.sample_rate_hz - anchor_s)

                for mel_slice in request.slices:
                    try:
                        session = stream.accept(mel_slice, request.context_only)
                    except Exception as error:  # every failure goes through the one status table
                        await abort_for(context, error)
                        return
                    # Each ready step is answered at once, however many slices the message brings.
                    while session.has_step():
                        try:
                            block = await self._inference.run(
                                STAGE_CHUNK,
                                session.step,
                                on_start=lambda started_s, received_s=received_s: self._metrics.mel_queue_seconds.observe(
                                    started_s - received_s
                                ),
                                deadline_s=step_due(session),
                                first_audio=deadline.first_audio,
                            )
                        except (asyncio.CancelledError, grpc.aio.AbortError):
                            raise
                        except Exception as error:
                            await abort_for(context, error)
                            return
                        if block is None:
                            continue
                        audio_s = len(block.samples) / engine.sample_rate_hz
                        deadline.stream.made(audio_s)
                        if meter is not None:
                            meter.produced(audio_s)
                        self._metrics.samples_total.inc(len(block.samples))
                        yield vocoder_pb2.VocodeResponse(
                            utterance_id=mel_slice.utterance_id,
                            sentence_index=mel_slice.sentence_index,
                            first_sample=block.first_sample,
                            samples=np.asarray(block.samples, dtype="<f4").tobytes(),
                            sample_rate_hz=engine.sample_rate_hz,
                            is_last=block.is_last,
                        )
            unfinished = stream.unfinished
            if unfinished is not None:
                # A cancelling gateway's stream also just ends here, a moment before the call is marked
                # cancelled; give that moment, so only a real protocol error is answered as one.
                await asyncio.sleep(CANCEL_GRACE_S)
                await context.abort(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"stream ended inside sentence {unfinished.sentence_index}; end each sentence with a slice marked is_last",
                )

    def install(self, engine: Any) -> None:
        """Serve with `engine` from now on (the model has loaded and warmed up)."""
        if self._admission.meter is not None:
            self._admission.meter.reset()  # loading and warming up is not serving
        self.engine = engine

    async def _ready_engine(self, context: grpc.aio.ServicerContext) -> Any:
        if self.engine is None:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "the vocoder model is still loading; retry shortly")
        return self.engine
