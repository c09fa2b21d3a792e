"""`python -m services.acoustic`: the acoustic worker (phoneme ids -> mel slices)."""

from __future__ import annotations

import sys
from collections.abc import Callable

from libs.pb.tts.acoustic.v1 import acoustic_pb2, acoustic_pb2_grpc
from libs.serving.server import run_service
from libs.serving.worker import WorkerSettings, engine_settings, inference_executor, realtime_admission, run_worker
from libs.telemetry.metrics import AcousticMetrics
from libs.voice.registry import default_registry
from services.acoustic.servicer import AcousticServicer
from services.settings import WorkerServiceSettings, load_worker_settings

SERVICE_NAME = acoustic_pb2.DESCRIPTOR.services_by_name["Acoustic"].full_name


def load_engine(settings: WorkerSettings, on_batch: Callable[..., None] | None = None):
    """Load the default voice's acoustic engine and warm it up (runs in the inference thread)."""
    from libs.voice.engine import AcousticEngine

    # on_batch feeds the batch metrics whenever the engine batches (EngineSettings.batching.max_batch > 1).
    engine = AcousticEngine.load_default(settings=engine_settings(settings, on_batch))
    engine.warm_up()
    return engine


async def serve(settings: WorkerServiceSettings) -> None:
    """Run the acoustic worker until SIGTERM/SIGINT."""
    metrics = AcousticMetrics()
    executor = inference_executor(settings.worker)
    servicer = AcousticServicer(default_registry().default.name, metrics, executor, realtime_admission(settings.admission, executor, metrics))
    await run_worker(
        settings,
        SERVICE_NAME,
        metrics.registry,
        executor,
        register=lambda server: acoustic_pb2_grpc.add_AcousticServicer_to_server(servicer, server),
        load_engine=lambda: load_engine(settings.worker, metrics.observe_batch),
        install_engine=servicer.install,
    )


def main() -> int:
    settings = load_worker_settings("acoustic")
    return run_service("acoustic", settings, settings.server.zone, serve)


if __name__ == "__main__":
    sys.exit(main())
