"""`python -m services.acoustic`: the acoustic worker (phoneme ids -> mel slices)."""

from __future__ import annotations

import sys

from libs.pb.tts.acoustic.v1 import acoustic_pb2, acoustic_pb2_grpc
from libs.scheduling.budget import read_cpu_budget
from libs.scheduling.scheduler import Scheduler
from libs.serving.server import run_service
from libs.serving.voice_shelf import VoiceShelf, load_shelf
from libs.serving.worker import engine_settings, inference_executor, run_worker, worker_scheduling
from libs.telemetry.metrics import AcousticMetrics
from libs.voice.catalogue import CatalogueVoice
from services.acoustic.servicer import AcousticServicer
from services.settings import WorkerServiceSettings, load_worker_settings

SERVICE_NAME = acoustic_pb2.DESCRIPTOR.services_by_name["Acoustic"].full_name


def load_voices(settings: WorkerServiceSettings, scheduler: Scheduler, metrics: AcousticMetrics) -> VoiceShelf:
    """The worker's voices with the preloaded ones loaded and warmed up, the first of them measured
    for the scheduler's step costs (runs in the inference thread)."""
    from libs.voice.calibration import MeasuredPrecision, acoustic_steps
    from libs.voice.engine import AcousticEngine

    # observe_batch feeds the batch metrics whenever the engine batches (EngineSettings.batching.max_batch > 1).
    precision = MeasuredPrecision(engine_settings(settings.worker, metrics.observe_batch))

    def load(entry: CatalogueVoice) -> AcousticEngine:
        return precision.acoustic(entry.assets)

    shelf = load_shelf("acoustic", settings.voices.catalogue(), settings.shelf, load, metrics)
    engine = shelf.held("")  # the worker's default voice: the first it preloads
    metrics.serving_precision(precision.served)
    scheduler.first_step_units = engine.schedule.chunk_frames(0) + engine.lag_frames
    scheduler.longest_step_units = engine.schedule.max_chunk_frames
    if settings.worker.max_batch <= 1:  # a batch's steps cost the batcher's thread, not the stream's
        scheduler.calibrate(lambda: acoustic_steps(engine))
    return shelf


async def serve(settings: WorkerServiceSettings) -> None:
    """Run the acoustic worker until SIGTERM/SIGINT."""
    metrics = AcousticMetrics()
    budget = read_cpu_budget()
    executor = inference_executor(settings.worker, budget, upstream=True)
    batched = settings.worker.max_batch > 1
    scheduler, admission = worker_scheduling("acoustic", executor, settings.admission, metrics, lambda: batched, budget)
    servicer = AcousticServicer(metrics, scheduler, admission)
    await run_worker(
        settings,
        SERVICE_NAME,
        metrics.registry,
        executor,
        register=lambda server: acoustic_pb2_grpc.add_AcousticServicer_to_server(servicer, server),
        load_engine=lambda: load_voices(settings, scheduler, metrics),
        install_engine=servicer.install,
        on_stop=scheduler.close,
    )


def main() -> int:
    settings = load_worker_settings("acoustic")
    return run_service("acoustic", settings, settings.server.zone, serve)


if __name__ == "__main__":
    sys.exit(main())
