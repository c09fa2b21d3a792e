"""The acoustic worker's gRPC servicer: sentence requests in, 40 ms mel slices out (a chunk's slices per message)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import grpc

from libs.pb.tts.acoustic.v1 import acoustic_pb2, acoustic_pb2_grpc
from libs.pb.tts.common.v1 import mel_pb2
from libs.scheduling.scheduler import Scheduler
from libs.scheduling.stream import stamped
from libs.serving.acoustic_work import AcousticWork
from libs.serving.admission import Admission
from libs.serving.server import StreamTracker
from libs.serving.status import abort_for
from libs.serving.voice_shelf import VoiceServicer
from libs.telemetry.metrics import AcousticMetrics
from libs.voice.registry import UnknownVoiceError
from libs.wire.errors import DownstreamError


class AcousticServicer(VoiceServicer, acoustic_pb2_grpc.AcousticServicer):
    """Admits each stream and answers its sentences with `AcousticWork`; every failure goes through
    the one status table."""

    kind = "acoustic"

    def __init__(self, metrics: AcousticMetrics, scheduler: Scheduler, admission: Admission) -> None:
        self._admission = admission
        self._scheduler = scheduler
        self._tracker = StreamTracker(metrics.inflight_streams, metrics.streams_total)
        self._work = AcousticWork(scheduler, metrics)

    async def GetModelInfo(
        self, request: acoustic_pb2.GetModelInfoRequest, context: grpc.aio.ServicerContext
    ) -> acoustic_pb2.ModelInfo:
        shelf = await self._ready_shelf(context)
        try:
            engine = await shelf.engine_for(request.voice)
        except (UnknownVoiceError, DownstreamError) as error:
            await abort_for(context, error)
            raise
        return acoustic_pb2.ModelInfo(
            model_version=engine.model_version,
            voice=engine.voice_name,
            sample_rate_hz=engine.sample_rate_hz,
            hop_length=engine.hop_length,
            n_mels=engine.n_mels,
            num_speakers=engine.num_speakers,
        )

    async def SynthesizeMel(
        self, request_iterator: AsyncIterator[acoustic_pb2.SentenceRequest], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[mel_pb2.MelSlices]:
        async with self._model_stream(context) as (engine, ending):
            try:
                async for message in self._work.stream(engine, stamped(ending.requests(request_iterator))):
                    yield message
            except (asyncio.CancelledError, grpc.aio.AbortError):
                raise
            except Exception as error:
                await abort_for(context, error)
