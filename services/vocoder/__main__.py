"""`python -m services.vocoder`: the vocoder worker (mel slices -> PCM)."""

from __future__ import annotations

import sys
from collections.abc import Callable

from libs.pb.tts.vocoder.v1 import vocoder_pb2, vocoder_pb2_grpc
from libs.serving.server import run_service
from libs.serving.worker import WorkerSettings, engine_settings, inference_executor, realtime_admission, run_worker
from libs.telemetry.metrics import VocoderMetrics
from services.settings import WorkerServiceSettings, load_worker_settings
from services.vocoder.servicer import VocoderServicer

SERVICE_NAME = vocoder_pb2.DESCRIPTOR.services_by_name["Vocoder"].full_name


def load_engine(settings: WorkerSettings, on_batch: Callable[..., None] | None = None):
    """Load the default voice's vocoder and warm it up (runs in the inference thread)."""
    from libs.voice.engine import VocoderEngine

    # on_batch feeds the batch metrics whenever the engine batches (EngineSettings.batching.max_batch > 1).
    engine = VocoderEngine.load_default(settings=engine_settings(settings, on_batch))
    engine.warm_up()
    return engine


async def serve(settings: WorkerServiceSettings) -> None:
    """Run the vocoder worker until SIGTERM/SIGINT."""
    metrics = VocoderMetrics()
    executor = inference_executor(settings.worker)
    servicer = VocoderServicer(metrics, executor, realtime_admission(settings.admission, executor, metrics))
    await run_worker(
        settings,
        SERVICE_NAME,
        metrics.registry,
        executor,
        register=lambda server: vocoder_pb2_grpc.add_VocoderServicer_to_server(servicer, server),
        load_engine=lambda: load_engine(settings.worker, metrics.observe_batch),
        install_engine=servicer.install,
    )


def main() -> int:
    settings = load_worker_settings("vocoder")
    return run_service("vocoder", settings, settings.server.zone, serve)


if __name__ == "__main__":
    sys.exit(main())
