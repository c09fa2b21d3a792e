"""`python -m services.acoustic`: the acoustic worker (phoneme ids -> mel slices)."""

from __future__ import annotations

import asyncio
import sys

from libs.mesh.server import ServiceRuntime, configure_logging
from libs.mesh.settings import WorkerSettings, load_settings
from libs.mesh.worker_main import configure_torch, inference_executor, run_worker
from libs.pb.tts.acoustic.v1 import acoustic_pb2, acoustic_pb2_grpc
from libs.telemetry.metrics import AcousticMetrics
from libs.voice.registry import default_registry
from services.acoustic.servicer import AcousticServicer

SERVICE_NAME = acoustic_pb2.DESCRIPTOR.services_by_name["Acoustic"].full_name


def load_engine(settings: WorkerSettings):
    """Load the default voice's acoustic engine and warm it up (runs in the inference thread)."""
    from libs.voice.engine import AcousticEngine

    engine = AcousticEngine.load_default(device=settings.device)
    engine.warm_up()
    return engine


async def serve(settings: WorkerSettings) -> None:
    """Run the acoustic worker until SIGTERM/SIGINT."""
    configure_torch(settings)
    metrics = AcousticMetrics()
    executor = inference_executor()
    servicer = AcousticServicer(default_registry().default.name, metrics, executor)
    runtime = ServiceRuntime(settings, [SERVICE_NAME], metrics.registry)
    acoustic_pb2_grpc.add_AcousticServicer_to_server(servicer, runtime.server)

    def install(engine) -> None:
        servicer.engine = engine

    await run_worker(runtime, executor, lambda: load_engine(settings), install)


def main() -> int:
    configure_logging()
    settings = load_settings("acoustic")
    assert isinstance(settings, WorkerSettings)
    asyncio.run(serve(settings))
    return 0


if __name__ == "__main__":
    sys.exit(main())
