"""What every service process shares: the grpc.aio server, grpc.health.v1, /metrics, tracing, signals, shutdown.

A service builds a `ServiceRuntime`, registers its servicer on `runtime.server`, starts it (health
answers NOT_SERVING while the model loads), flips to SERVING when ready, and waits for SIGTERM/SIGINT.
On a signal it reports NOT_SERVING first (so load balancers stop sending), then gives in-flight
streams `shutdown_grace_s` to finish. `run_service` is every service's `main`: logging, tracing (set
up from OTEL_* env vars, flushed on exit) and the event loop.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import signal
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, AsyncIterator, Callable, Coroutine, Final, Mapping, Sequence, TypeVar

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

from libs.settings.fields import setting
from libs.telemetry.process import register_process_metrics
from libs.telemetry.tracing import server_interceptor, setup_tracing, shutdown_tracing

_log = logging.getLogger(__name__)
_Settings = TypeVar("_Settings")

DEFAULT_PORTS: Final[Mapping[str, int]] = {"gateway": 50051, "acoustic": 50052, "vocoder": 50053}
DEFAULT_METRICS_PORTS: Final[Mapping[str, int]] = {"gateway": 9101, "acoustic": 9102, "vocoder": 9103}
DEFAULT_ZONE: Final = "local"


@dataclass(frozen=True)
class ServerSettings:
    """Settings every service has."""

    port: int = setting(0, env="TTS_PORT", doc="gRPC listen port", unit="TCP port", minimum=0, maximum=65535, by_service=DEFAULT_PORTS)
    host: str = setting("[::]", env="TTS_HOST", doc="address to listen on ([::] is every interface)")
    zone: str = setting(DEFAULT_ZONE, env="TTS_ZONE", doc="availability zone this process runs in")
    metrics_port: int = setting(
        0, env="TTS_METRICS_PORT", doc="Prometheus /metrics HTTP port (0 disables it)", unit="TCP port",
        minimum=0, maximum=65535, by_service=DEFAULT_METRICS_PORTS,
    )  # fmt: skip
    shutdown_grace_s: float = setting(
        5.0, env="TTS_SHUTDOWN_GRACE_S", doc="time in-flight streams get to finish after SIGTERM", unit="s", minimum=0
    )

MAX_MESSAGE_BYTES: Final = 16 * 1024 * 1024
SERVER_OPTIONS: Final = (
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    # Rotate connections now and then so new replicas behind a load balancer get traffic.
    ("grpc.max_connection_age_ms", 5 * 60 * 1000),
    ("grpc.max_connection_age_grace_ms", 60 * 1000),
    ("grpc.keepalive_time_ms", 30 * 1000),
    ("grpc.http2.min_recv_ping_interval_without_data_ms", 10 * 1000),
)
CHANNEL_OPTIONS: Final = (
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.keepalive_time_ms", 30 * 1000),
)

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


def configure_logging() -> None:
    """One log format for all services."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")


def run_service(service: str, settings: _Settings, zone: str, serve: Callable[[_Settings], Coroutine[Any, Any, None]]) -> int:
    """A service's `main`: trace as `service` in `zone`, run `serve(settings)` until it returns."""
    configure_logging()
    provider = setup_tracing(service, zone)
    try:
        asyncio.run(serve(settings))
    finally:
        shutdown_tracing(provider)  # flush the last spans
    return 0


def freeze_startup_heap() -> None:
    """Take every object alive after start-up (modules, models, stubs) out of the garbage collector's
    full passes; call it once, when the service is about to report SERVING.

    A full pass walks every tracked object: in a worker, with torch and the voice loaded (about 180
    thousand objects), one took 65 ms, and one comes due whenever enough objects have survived since
    the last; in the middle of a request it is a stall the client hears. What start-up built lives
    as long as the process, so nothing is lost by never scanning it again; objects made later are
    collected as usual.
    """
    gc.collect()
    gc.freeze()


class ServiceRuntime:
    """The grpc.aio server of one service with its health service, tracing and metrics endpoint.

    `registry` gets the process metrics (RSS, and GPU memory once CUDA is in use) added to it.
    """

    def __init__(self, settings: ServerSettings, service_names: Sequence[str], registry: CollectorRegistry) -> None:
        self.settings = settings
        self.server = grpc.aio.server(options=list(SERVER_OPTIONS), interceptors=[server_interceptor()])
        self.health = health.aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        # "" is the whole server; clients and Kubernetes probes may ask either.
        self._service_names = ("", *service_names)
        self._registry = registry
        register_process_metrics(registry)
        self._stop = asyncio.Event()
        self.port = 0

    async def start(self) -> int:
        """Bind, start serving (health NOT_SERVING) and the /metrics endpoint; returns the bound gRPC port."""
        await self.set_serving(False)
        self.port = self.server.add_insecure_port(f"{self.settings.host}:{self.settings.port}")
        if self.port == 0:
            raise OSError(f"could not bind gRPC port {self.settings.host}:{self.settings.port}")
        await self.server.start()
        if self.settings.metrics_port:
            start_http_server(self.settings.metrics_port, registry=self._registry)
        self._install_signal_handlers()
        _log.info("listening on port %d (zone %s)", self.port, self.settings.zone)
        return self.port

    async def set_serving(self, serving: bool) -> None:
        """Report SERVING or NOT_SERVING for the server and every service it hosts."""
        status = SERVING if serving else NOT_SERVING
        for name in self._service_names:
            await self.health.set(name, status)

    def request_stop(self) -> None:
        """Begin a graceful shutdown (what SIGTERM does)."""
        self._stop.set()

    async def wait_for_stop(self) -> None:
        """Block until a stop is requested."""
        await self._stop.wait()

    async def shutdown(self) -> None:
        """NOT_SERVING, then stop accepting calls and give in-flight ones the grace period."""
        await self.set_serving(False)
        await self.health.enter_graceful_shutdown()
        await self.server.stop(self.settings.shutdown_grace_s)
        _log.info("stopped")

    def _install_signal_handlers(self) -> None:
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, self.request_stop)


STREAM_END_SETTLE_S: Final = 0.005
"""How long a stream whose requests ended waits for a cancellation that may be on its way."""


class StreamTracker:
    """Counts a worker's open streams and how each one ended, so cancellation leaks show up in metrics."""

    def __init__(self, inflight: Gauge, finished: Counter) -> None:
        self._inflight = inflight
        self._finished = finished

    @asynccontextmanager
    async def track(self, context: grpc.aio.ServicerContext) -> AsyncIterator[None]:
        """Wrap one stream handler's body."""
        self._inflight.inc()
        outcome = {"code": "OK"}
        try:
            yield
            # A caller that cancels (or whose deadline passes) while the handler awaits its next
            # request just ends the request stream, exactly as a half-close does; the handler's task
            # is cancelled a moment later. Waiting that moment tells the two apart.
            await asyncio.sleep(STREAM_END_SETTLE_S)
        except asyncio.CancelledError:
            outcome["code"] = "CANCELLED"
            raise
        except BaseException:
            outcome["code"] = _code_name(context.code()) or "UNKNOWN"
            raise
        finally:
            self._inflight.dec()
            # A client's cancellation can reach the handler as a request stream that just ends, a
            # moment before the call is marked cancelled; the final word is the call's own, once done.
            context.add_done_callback(lambda _: self._finished.labels(code=self._final_code(context, outcome["code"])).inc())

    @staticmethod
    def _final_code(context: grpc.aio.ServicerContext, handler_code: str) -> str:
        if context.cancelled():
            return "CANCELLED"
        code = _code_name(context.code())
        if code is None:
            # A deadline that passes while the handler awaits the next request just ends the request
            # stream: the handler returns as if the caller had half-closed, and the call records no code.
            remaining_s = context.time_remaining()
            if remaining_s is not None and remaining_s <= 0:
                return "DEADLINE_EXCEEDED"
        return code or handler_code


def _code_name(code: object) -> str | None:
    return code.name if isinstance(code, grpc.StatusCode) else None
