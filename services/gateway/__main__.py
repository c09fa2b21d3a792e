"""`python -m services.gateway`: the public TextToSpeech service."""

from __future__ import annotations

import asyncio
import logging
import sys
from concurrent.futures import ThreadPoolExecutor
from importlib.metadata import version
from pathlib import Path

from libs.cache.mel_cache import MelCache
from libs.scheduling.capacity import AudioCost, SharedCapacity, with_children_cpu
from libs.serving.auth import ApiKeyGate, ApiKeyInterceptor
from libs.serving.clients import ClientIdentity
from libs.serving.http import HttpListener, HttpTls
from libs.serving.http_auth import ApiKeyAsgi
from libs.serving.server import PortUnavailableError, ServiceRuntime, freeze_startup_heap, run_service
from libs.synthesis.admission import RealtimeAdmission
from libs.synthesis.phoneme_reading import PhonemeReader
from libs.synthesis.synthesizer import Synthesizer
from libs.synthesis.text_side import TextSide
from libs.telemetry.metrics import GatewayMetrics
from libs.text.phonemizer_pool import PhonemizerPool
from libs.upstream.pool import WorkerPool
from libs.voice.registry import VoiceRegistry
from services.gateway.background_work import BackgroundWork, check_redis_kinds
from services.gateway.http_api import SpeechApi
from services.gateway.phonemes_http import phoneme_routes
from services.gateway.servicer import SERVICE_NAME, TextToSpeechServicer, add_to_server
from services.gateway.socket_routes import SocketDoors
from services.gateway.wyoming_door import WyomingDoor
from services.settings import GatewaySettings, load_gateway_settings

_log = logging.getLogger(__name__)


async def _track_readiness(runtime: ServiceRuntime, pool: WorkerPool) -> None:
    """SERVING while at least one acoustic and one vocoder worker serve; NOT_SERVING otherwise."""
    serving: bool | None = None
    while True:
        await pool.changed.wait()
        if pool.ready != serving:
            serving = pool.ready
            if serving:  # admission knows the workers' capacity before the first stream comes
                await pool.loads.poll_once()
            await runtime.set_serving(serving)
            _log.info("gateway %s", "SERVING" if serving else "NOT_SERVING: waiting for workers")


async def serve(settings: GatewaySettings) -> None:
    """Run the gateway until SIGTERM/SIGINT."""
    await check_redis_kinds(settings)  # a Redis of another kind than the settings say stops the gateway here
    metrics = GatewayMetrics()
    registry = settings.voices.catalogue().registry()  # the installed voices and those of --voices-dir
    cache = MelCache.from_settings(settings.cache, on_outcome=metrics.cache_outcome, zone=settings.server.zone)
    # Key, certificate and password files are read here, before any port opens.
    gate = ApiKeyGate.from_settings(settings.auth, on_refused=metrics.auth_refused)
    runtime = ServiceRuntime(settings.server, [SERVICE_NAME], metrics.registry, [ApiKeyInterceptor(gate)] if gate else [])
    # The pool's routing counters (retries, resumes, ejections, ...) go on the same /metrics registry.
    pool = WorkerPool(
        settings.upstream,
        settings.server.zone,
        retry=settings.retry,
        retry_budget=settings.retry_budget,
        ejection=settings.ejection,
        registry=metrics.registry,
    )
    metrics.track_endpoints(pool.endpoint_statuses)
    # Text is normalised and cut on one thread; espeak-ng runs in child processes, where a text that
    # crashes it cannot take the gateway down.
    text_executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="text")
    phonemizers = PhonemizerPool(settings.text.text_processes, settings.text.text_process_timeout_s)
    # Long-form jobs and prewarming; the live streams' text side tells prewarming's promotion of each sentence.
    background = BackgroundWork.from_settings(settings, registry, metrics.registry, cache.keyring)
    text_side = TextSide(
        text_executor, settings.limits.max_text_chars, settings.text, phonemizers, on_sentence=background.on_sentence
    )
    # Listeners are admitted by the mesh's real-time capacity and their buffers; the gateway's own CPU
    # (its text processes' included) goes into the ledger it shares with workers on the same budget.
    admission = RealtimeAdmission(
        pool.realtime_capacity, pool.other_gateways_streams, settings.limits.admission_headroom, settings.limits.active_client_s,
        on_stall=metrics.listener_stalled, min_share=settings.limits.realtime_min_share, playing_wait_s=pool.playing_wait_s,
    )  # fmt: skip
    capacity = SharedCapacity("gateway", cost=AudioCost(with_children_cpu(phonemizers.pids)))
    metrics.track_realtime(
        admission.listener_capacity, lambda: len(admission.listening()), admission.feedback.share
    )
    metrics.fast_tier_cost.set_function(pool.fast_tier_cost)
    synthesizer = Synthesizer(
        pool=pool, cache=cache, text_side=text_side, max_streams=settings.limits.max_streams,
        max_streams_per_client=settings.limits.max_streams_per_client, admission=admission, capacity=capacity,
        opening_max_ids=settings.limits.opening_max_ids, auto_quality_share=settings.limits.auto_quality_share,
        room_wait_s=settings.limits.room_wait_ms / 1000,
    )  # fmt: skip
    pool.metrics.streams_waiting_for_room.set_function(lambda: synthesizer.waiting_for_room)
    clients = ClientIdentity(settings.clients.trusted_proxies)  # per-client limits see through the edge
    servicer = TextToSpeechServicer(registry=registry, synthesizer=synthesizer, metrics=metrics, clients=clients)
    add_to_server(servicer, runtime.server)
    background.speak_with(synthesizer, text_executor, phonemizers, registry, pool)  # job runners, the cache warmer
    background.add_to_server(runtime.server)
    http = None
    if settings.http.http_port:
        api = SpeechApi(synthesizer, registry, metrics, settings.http.http_max_body_bytes, _web_dir(settings.http.web_dir))
        # The same API keys as the gRPC door, on the Authorization header of every API call (/v1/...);
        # the web page's static files are public, its calls to the API carry a key like any other.
        routes = background.http_routes() + phoneme_routes(  # POST /v1/audio/phonemes
            PhonemeReader(phonemizers, registry, settings.limits.max_text_chars, settings.text), metrics, settings.http.http_max_body_bytes
        )
        routes += SocketDoors(synthesizer, registry, metrics, settings.socket, settings.http.http_max_body_bytes).routes()  # WebSocket: ours and ElevenLabs'
        app = ApiKeyAsgi(api.app(routes), gate, guarded_prefixes=("/v1/",)) if gate else api.app(routes)
        # The door's armour as at the gRPC port: as many open requests per client as streams, and
        # TLS whenever the public port has it (the same certificate).
        server = settings.server
        tls = HttpTls(server.tls_cert, server.tls_key, server.tls_client_ca) if server.tls_cert else None
        http = HttpListener(
            app, server.host, settings.http.http_port, max_requests_per_client=settings.limits.max_streams_per_client, tls=tls,
            clients=clients, max_message_bytes=settings.http.http_max_body_bytes,
        )
    wyoming = _wyoming_door(settings, synthesizer, registry, metrics, clients)
    await runtime.start()
    if http is not None:
        try:
            await http.start()
        except PortUnavailableError:
            await runtime.server.stop(None)  # else its finaliser runs after the loop has closed
            raise
    if wyoming is not None:
        try:
            await wyoming.start()
        except PortUnavailableError:
            await runtime.server.stop(None)
            if http is not None:
                await http.stop()
            raise
    await phonemizers.start()
    await text_side.warm_up(registry.default)  # every text process loads espeak-ng and the voice before SERVING
    freeze_startup_heap()
    pool.start()
    await background.start()
    readiness = asyncio.create_task(_track_readiness(runtime, pool))
    await runtime.wait_for_stop()
    readiness.cancel()
    if http is not None:
        await http.stop()
    if wyoming is not None:
        await wyoming.stop()
    await runtime.shutdown()
    await background.close()
    await pool.close()
    capacity.close()
    await cache.close()
    await phonemizers.close()
    text_executor.shutdown(wait=False, cancel_futures=True)


def _wyoming_door(
    settings: GatewaySettings, synthesizer: Synthesizer, registry: VoiceRegistry, metrics: GatewayMetrics, clients: ClientIdentity
) -> WyomingDoor | None:
    """The Wyoming door when its port is set: per-client limits as at the HTTP door, idle as a stream."""
    if not settings.wyoming.wyoming_port:
        return None
    return WyomingDoor(
        settings.wyoming, synthesizer, registry, metrics, clients=clients,
        max_connections_per_client=settings.limits.max_streams_per_client, idle_timeout_s=settings.text.stream_idle_timeout_s,
        version=version("tts-mesh"),
    )  # fmt: skip


def _web_dir(configured: str) -> Path | None:
    """The web page's folder: the configured one, or the built page of this checkout."""
    if configured == "none":
        return None
    folder = Path(configured) if configured else Path(__file__).resolve().parents[2] / "web" / "dist"
    return folder if (folder / "index.html").is_file() else None


def main() -> int:
    settings = load_gateway_settings()
    return run_service("gateway", settings, settings.server.zone, serve)


if __name__ == "__main__":
    sys.exit(main())
