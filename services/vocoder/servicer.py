"""The vocoder worker's gRPC servicer: mel slices in, exact PCM out as soon as it can be produced."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import grpc

from libs.pb.tts.vocoder.v1 import vocoder_pb2, vocoder_pb2_grpc
from libs.scheduling.scheduler import Scheduler
from libs.scheduling.stream import stamped
from libs.serving.admission import Admission
from libs.serving.server import StreamTracker
from libs.serving.status import abort_for
from libs.serving.vocoder_work import VocoderWork
from libs.serving.voice_shelf import VoiceServicer, stream_speaker, stream_tier
from libs.telemetry.metrics import VocoderMetrics


class VocoderServicer(VoiceServicer, vocoder_pb2_grpc.VocoderServicer):
    """Admits each stream and vocodes it with `VocoderWork`; every failure goes through the one status table."""

    kind = "vocoder"

    def __init__(self, metrics: VocoderMetrics, scheduler: Scheduler, admission: Admission) -> None:
        self._admission = admission
        self._metrics = metrics
        self._scheduler = scheduler
        self._tracker = StreamTracker(metrics.inflight_streams, metrics.streams_total)

    async def GetLoad(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        load = await super().GetLoad(request, context)
        default = self.shelf.peek("") if self.shelf is not None else None
        load.fast_tier_cost = default.fast_tier_cost if default is not None else 0.0  # what its default voice's fast tier costs
        return load

    async def Vocode(
        self, request_iterator: AsyncIterator[vocoder_pb2.VocodeRequest], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[vocoder_pb2.VocodeResponse]:
        async with self._model_stream(context) as (engine, ending):
            work: VocoderWork | None = None
            try:
                work = VocoderWork(
                    engine, self._scheduler, self._metrics, lambda: self._admission.open_streams, stream_speaker(context, engine), stream_tier(context)
                )
                async for request, arrived_s in stamped(ending.requests(request_iterator)):
                    async for response in work.answer(request, arrived_s):
                        yield response
            except (asyncio.CancelledError, grpc.aio.AbortError):
                raise
            except Exception as error:
                await abort_for(context, error)
                return
            finally:
                if work is not None:
                    work.close()
            unfinished = work.slices.unfinished
            if unfinished is not None and not await ending.caller_gone():
                await context.abort(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"stream ended inside sentence {unfinished.sentence_index}; end each sentence with a slice marked is_last",
                )
