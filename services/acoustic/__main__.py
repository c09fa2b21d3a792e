"""`python -m services.acoustic`: the acoustic worker (phoneme ids -> mel slices)."""

from __future__ import annotations

import sys
from typing import Callable

from libs.mesh.server import ServiceRuntime, run_service
from libs.mesh.settings import WorkerSettings
from libs.mesh.worker_main import configure_torch, engine_settings, inference_executor, run_worker
from libs.pb.tts.acoustic.v1 import acoustic_pb2, acoustic_pb2_grpc
from libs.telemetry.metrics import AcousticMetrics
from libs.voice.registry import default_registry
from services.acoustic.servicer import AcousticServicer

SERVICE_NAME = acoustic_pb2.DESCRIPTOR.services_by_name["Acoustic"].full_name


def load_engine(settings: WorkerSettings, on_batch: Callable[..., None] | None = None):
    """Load the default voice's acoustic engine and warm it up (runs in the inference thread)."""
    from libs.voice.engine import AcousticEngine

    # on_batch feeds the batch metrics whenever the engine batches (EngineSettings.batching.max_batch > 1).
    engine = AcousticEngine.load_default(settings=engine_settings(settings, on_batch))
    engine.warm_up()
    return engine


async def serve(settings: WorkerSettings) -> None:
    """Run the acoustic worker until SIGTERM/SIGINT."""
    configure_torch(settings)
    metrics = AcousticMetrics()
    executor = inference_executor(settings)
    servicer = AcousticServicer(default_registry().default.name, metrics, executor)
    runtime = ServiceRuntime(settings, [SERVICE_NAME], metrics.registry)
    acoustic_pb2_grpc.add_AcousticServicer_to_server(servicer, runtime.server)

    def install(engine) -> None:
        servicer.engine = engine

    await run_worker(runtime, executor, lambda: load_engine(settings, metrics.observe_batch), install)


def main() -> int:
    return run_service("acoustic", serve)


if __name__ == "__main__":
    sys.exit(main())
