"""A vocoder servicer over real gRPC on loopback, for integration tests of what a worker does with
its streams' steps."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from concurrent.futures import Executor
from dataclasses import dataclass

import grpc

from libs.pb.tts.vocoder.v1 import vocoder_pb2_grpc
from libs.scheduling.scheduler import Scheduler
from libs.serving.admission import Admission, AdmissionSettings
from libs.serving.voice_shelf import VoiceShelf
from libs.telemetry.metrics import VocoderMetrics
from libs.voice.calibration import vocoder_steps
from libs.voice.engine import VocoderEngine
from services.vocoder.servicer import VocoderServicer
from tests.support.servers import aio_server


@dataclass
class VocoderWorker:
    """The running worker: its stub, and the parts a test reads."""

    stub: vocoder_pb2_grpc.VocoderStub
    scheduler: Scheduler
    admission: Admission
    metrics: VocoderMetrics


@contextlib.asynccontextmanager
async def vocoder_worker(engine: VocoderEngine, executor: Executor) -> AsyncIterator[VocoderWorker]:
    """A vocoder servicer on `engine`, its steps on `executor` (shut down on exit), with a scheduler
    calibrated on the engine as a worker's is at start-up."""
    metrics = VocoderMetrics()
    scheduler = Scheduler("vocoder", executor, metrics)
    scheduler.longest_step_units = engine.schedule.max_chunk_frames
    await asyncio.get_running_loop().run_in_executor(None, scheduler.calibrate, lambda: vocoder_steps(engine))
    admission = Admission(AdmissionSettings(), scheduler=scheduler)
    servicer = VocoderServicer(metrics, scheduler, admission)
    servicer.install(VoiceShelf.holding(engine))
    server = aio_server()
    vocoder_pb2_grpc.add_VocoderServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            yield VocoderWorker(vocoder_pb2_grpc.VocoderStub(channel), scheduler, admission, metrics)
    finally:
        await server.stop(0)
        executor.shutdown()
