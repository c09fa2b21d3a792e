"""`python -m services.vocoder`: the vocoder worker (mel slices -> PCM)."""

from __future__ import annotations

import sys

from libs.pb.tts.vocoder.v1 import vocoder_pb2, vocoder_pb2_grpc
from libs.scheduling.budget import read_cpu_budget
from libs.scheduling.scheduler import Scheduler
from libs.serving.server import run_service
from libs.serving.voice_shelf import VoiceShelf, load_shelf
from libs.serving.worker import engine_settings, inference_executor, run_worker, worker_scheduling
from libs.telemetry.metrics import VocoderMetrics
from libs.voice.catalogue import CatalogueVoice
from services.settings import WorkerServiceSettings, load_worker_settings
from services.vocoder.servicer import VocoderServicer

SERVICE_NAME = vocoder_pb2.DESCRIPTOR.services_by_name["Vocoder"].full_name


def load_voices(settings: WorkerServiceSettings, scheduler: Scheduler, metrics: VocoderMetrics) -> VoiceShelf:
    """The worker's voices with the preloaded ones loaded and warmed up, the first of them measured
    for the scheduler's step costs and pacing (runs in the inference thread)."""
    from libs.scheduling.stream import VocoderPacing
    from libs.voice.calibration import MeasuredPrecision, vocoder_cpu_s_per_audio_s, vocoder_steps
    from libs.voice.engine import VocoderEngine

    # observe_batch feeds the batch metrics whenever the engine batches (EngineSettings.batching.max_batch > 1).
    precision = MeasuredPrecision(engine_settings(settings.worker, metrics.observe_batch))

    def load(entry: CatalogueVoice) -> VocoderEngine:
        return precision.vocoder(entry.assets)  # with its other tier, in the same arithmetic

    shelf = load_shelf("vocoder", settings.voices.catalogue(), settings.shelf, load, metrics)
    engine = shelf.held("")  # the worker's default voice: the first it preloads
    metrics.serving_precision(precision.served)
    scheduler.pacing = VocoderPacing(lag_frames=engine.lag_frames, schedule=engine.schedule)
    scheduler.first_step_units = engine.schedule.chunk_frames(0)
    scheduler.longest_step_units = engine.schedule.max_chunk_frames
    scheduler.start_waits = engine.start_waits()
    if settings.worker.max_batch <= 1:  # a batch's steps cost the batcher's thread, not the stream's
        scheduler.calibrate(lambda: vocoder_steps(engine))
    if engine.fast_tier is not None:  # what the gateway weighs a fast-tier listener by: the same steps on each tier, one thread
        engine.fast_tier_cost = vocoder_cpu_s_per_audio_s(engine.fast_tier) / vocoder_cpu_s_per_audio_s(engine)
    return shelf


async def serve(settings: WorkerServiceSettings) -> None:
    """Run the vocoder worker until SIGTERM/SIGINT."""
    metrics = VocoderMetrics()
    budget = read_cpu_budget()
    executor = inference_executor(settings.worker, budget)
    batched = settings.worker.max_batch > 1
    scheduler, admission = worker_scheduling("vocoder", executor, settings.admission, metrics, lambda: batched, budget)
    servicer = VocoderServicer(metrics, scheduler, admission)
    await run_worker(
        settings,
        SERVICE_NAME,
        metrics.registry,
        executor,
        register=lambda server: vocoder_pb2_grpc.add_VocoderServicer_to_server(servicer, server),
        load_engine=lambda: load_voices(settings, scheduler, metrics),
        install_engine=servicer.install,
        on_stop=scheduler.close,
    )


def main() -> int:
    settings = load_worker_settings("vocoder")
    return run_service("vocoder", settings, settings.server.zone, serve)


if __name__ == "__main__":
    sys.exit(main())
