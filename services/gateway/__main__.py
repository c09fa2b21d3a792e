"""`python -m services.gateway`: the public TextToSpeech service."""

from __future__ import annotations

import asyncio
import logging
import sys
from concurrent.futures import ThreadPoolExecutor

from libs.mesh.server import ServiceRuntime, freeze_startup_heap, run_service
from libs.mesh.settings import GatewaySettings
from libs.telemetry.metrics import GatewayMetrics
from libs.telemetry.traced_cache import TracedMelCache
from libs.voice.registry import default_registry
from services.gateway.servicer import SERVICE_NAME, TextToSpeechServicer, add_to_server
from services.gateway.workers import KINDS, WorkerPool

_log = logging.getLogger(__name__)


async def _track_readiness(runtime: ServiceRuntime, pool: WorkerPool) -> None:
    """SERVING while at least one acoustic and one vocoder worker serve; NOT_SERVING otherwise."""
    serving: bool | None = None
    while True:
        await pool.changed.wait()
        if pool.ready != serving:
            serving = pool.ready
            await runtime.set_serving(serving)
            _log.info("gateway %s", "SERVING" if serving else "NOT_SERVING: waiting for workers")


async def serve(settings: GatewaySettings) -> None:
    """Run the gateway until SIGTERM/SIGINT."""
    metrics = GatewayMetrics()
    registry = default_registry()
    cache = TracedMelCache.from_url(
        settings.redis_url,
        ttl_s=settings.cache_ttl_s,
        timeout_ms=settings.cache_timeout_ms,
        on_outcome=metrics.cache_outcome,
        head_ms=settings.audio_head_ms,
    )
    # The pool's routing counters (retries, resumes, ejections, ...) go on the same /metrics registry.
    pool = WorkerPool(settings.acoustic, settings.vocoder, settings.zone, registry=metrics.registry)
    metrics.track_endpoints(lambda: [status for kind in KINDS for status in pool.table(kind).statuses()])
    # One thread: phonemising a request takes milliseconds, and espeak-ng runs as one global instance.
    text_executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="text")
    servicer = TextToSpeechServicer(
        registry=registry,
        pool=pool,
        cache=cache,
        metrics=metrics,
        text_executor=text_executor,
        max_text_chars=settings.max_text_chars,
    )
    runtime = ServiceRuntime(settings, [SERVICE_NAME], metrics.registry)
    add_to_server(servicer, runtime.server)
    await runtime.start()
    # Load espeak-ng and the phoneme map before taking traffic.
    await asyncio.get_running_loop().run_in_executor(
        text_executor, lambda: servicer.frontend(registry.default).sentences("Ready.")
    )
    freeze_startup_heap()
    pool.start()
    readiness = asyncio.create_task(_track_readiness(runtime, pool))
    await runtime.wait_for_stop()
    readiness.cancel()
    await runtime.shutdown()
    await pool.close()
    await cache.close()
    text_executor.shutdown(wait=False, cancel_futures=True)


def main() -> int:
    return run_service("gateway", serve)


if __name__ == "__main__":
    sys.exit(main())
