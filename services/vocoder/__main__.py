"""`python -m services.vocoder`: the vocoder worker (mel slices -> PCM)."""

from __future__ import annotations

import sys
from typing import Callable

from libs.mesh.server import ServiceRuntime, run_service
from libs.mesh.settings import WorkerSettings
from libs.mesh.worker_main import configure_torch, engine_settings, inference_executor, run_worker
from libs.pb.tts.vocoder.v1 import vocoder_pb2, vocoder_pb2_grpc
from libs.telemetry.metrics import VocoderMetrics
from services.vocoder.servicer import VocoderServicer

SERVICE_NAME = vocoder_pb2.DESCRIPTOR.services_by_name["Vocoder"].full_name


def load_engine(settings: WorkerSettings, on_batch: Callable[..., None] | None = None):
    """Load the default voice's vocoder and warm it up (runs in the inference thread)."""
    from libs.voice.engine import VocoderEngine

    # on_batch feeds the batch metrics whenever the engine batches (EngineSettings.batching.max_batch > 1).
    engine = VocoderEngine.load_default(settings=engine_settings(settings, on_batch))
    engine.warm_up()
    return engine


async def serve(settings: WorkerSettings) -> None:
    """Run the vocoder worker until SIGTERM/SIGINT."""
    configure_torch(settings)
    metrics = VocoderMetrics()
    executor = inference_executor(settings)
    servicer = VocoderServicer(metrics, executor)
    runtime = ServiceRuntime(settings, [SERVICE_NAME], metrics.registry)
    vocoder_pb2_grpc.add_VocoderServicer_to_server(servicer, runtime.server)

    def install(engine) -> None:
        servicer.engine = engine

    await run_worker(runtime, executor, lambda: load_engine(settings, metrics.observe_batch), install)


def main() -> int:
    return run_service("vocoder", serve)


if __name__ == "__main__":
    sys.exit(main())
