"""The acoustic worker's gRPC servicer: sentence requests in, 40 ms mel slices out (a chunk's slices per message)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import grpc

from libs.pb.tts.acoustic.v1 import acoustic_pb2, acoustic_pb2_grpc
from libs.pb.tts.common.v1 import load_pb2, mel_pb2
from libs.scheduling.scheduler import Scheduler
from libs.scheduling.stream import stamped
from libs.serving.acoustic_work import AcousticWork
from libs.serving.admission import Admission
from libs.serving.memory import RELEASER
from libs.serving.server import StreamTracker
from libs.serving.status import abort_for
from libs.telemetry.metrics import AcousticMetrics


class AcousticServicer(acoustic_pb2_grpc.AcousticServicer):
    """Admits each stream and answers its sentences with `AcousticWork`; every failure goes through
    the one status table."""

    def __init__(self, voice_name: str, metrics: AcousticMetrics, scheduler: Scheduler, admission: Admission) -> None:
        self.engine: Any = None  # an AcousticEngine once loaded; None means "still loading"
        self._admission = admission
        self._voice_name = voice_name
        self._scheduler = scheduler
        self._tracker = StreamTracker(metrics.inflight_streams, metrics.streams_total)
        self._work = AcousticWork(voice_name, scheduler, metrics)

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

    async def GetLoad(self, request: load_pb2.GetLoadRequest, context: grpc.aio.ServicerContext) -> load_pb2.WorkerLoad:
        await self._ready_engine(context)
        return self._scheduler.load(self._admission.by_gateway, self._admission.settings.realtime_capacity)

    async def SynthesizeMel(
        self, request_iterator: AsyncIterator[acoustic_pb2.SentenceRequest], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[mel_pb2.MelSlices]:
        engine = await self._ready_engine(context)
        await self._admission.admit(context, engine)  # RESOURCE_EXHAUSTED when out of room
        context.add_done_callback(RELEASER.call_done)  # a long sentence's memory goes back once the stream ends
        async with self._tracker.track(context):
            try:
                async for message in self._work.stream(engine, stamped(request_iterator)):
                    yield message
            except (asyncio.CancelledError, grpc.aio.AbortError):
                raise
            except Exception as error:
                await abort_for(context, error)

    def install(self, engine: Any) -> None:
        """Serve with `engine` from now on (the model has loaded, warmed up and been calibrated)."""
        self.engine = engine

    async def _ready_engine(self, context: grpc.aio.ServicerContext) -> Any:
        if self.engine is None:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "the acoustic model is still loading; retry shortly")
        return self.engine
