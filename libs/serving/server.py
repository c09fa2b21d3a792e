"""What every service process shares: the grpc.aio server, grpc.health.v1, /metrics, tracing, signals, shutdown.

A service builds a `ServiceRuntime`, registers its servicer on `runtime.server`, starts it (health
answers NOT_SERVING while the model loads), flips to SERVING when ready, and waits for SIGTERM/SIGINT.
On a signal it reports NOT_SERVING first (so load balancers stop sending), then gives in-flight
streams `shutdown_grace_s` to finish. `run_service` is every service's `main`: logging, tracing (set
up from OTEL_* env vars, flushed on exit) and the event loop.
"""

from __future__ import annotations

import asyncio
import errno
import gc
import logging
import signal
import socket
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Final, Protocol, TypeVar

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

from libs.serving.decoding import RequestDecodingInterceptor
from libs.serving.tls import OWN_PORT_OPTION, probe_server, server_credentials
from libs.settings.fields import setting
from libs.settings.files import SettingFileError, SettingTargetError
from libs.telemetry.process import FROZEN_HEAP, register_process_metrics
from libs.telemetry.tracing import server_interceptor, setup_tracing, shutdown_tracing
from libs.wire.errors import InvalidRequestError
from libs.wire.headers import ANNOUNCES_END_METADATA
from libs.wire.limits import MAX_GATEWAY_REQUEST_BYTES, MAX_RESPONSE_BYTES, MAX_SENTENCE_REQUEST_BYTES, MAX_WORKER_MESSAGE_BYTES

_log = logging.getLogger(__name__)
_Settings = TypeVar("_Settings")

DEFAULT_PORTS: Final[Mapping[str, int]] = {"gateway": 50051, "acoustic": 50052, "vocoder": 50053}
DEFAULT_METRICS_PORTS: Final[Mapping[str, int]] = {"gateway": 9101, "acoustic": 9102, "vocoder": 9103}
DEFAULT_ZONE: Final = "local"
# What a port takes in one message: the gateway's clients send a request of a few KB, the gateway
# sends an acoustic worker a sentence's phoneme ids and a vocoder mel slices (libs.wire.limits).
DEFAULT_MAX_RECEIVE_MESSAGE_BYTES: Final[Mapping[str, int]] = {
    "gateway": MAX_GATEWAY_REQUEST_BYTES,
    "acoustic": MAX_SENTENCE_REQUEST_BYTES,
    "vocoder": MAX_WORKER_MESSAGE_BYTES,
}
# HTTP/2 asks for at least 100 streams per connection (RFC 9113, 6.5.2). A gateway carries every
# stream it has on a worker (one per utterance, up to its --max-streams) and its health Watch over
# one connection, so a worker allows four times the gateway's default.
DEFAULT_MAX_CONCURRENT_STREAMS: Final[Mapping[str, int]] = {"gateway": 100, "acoustic": 1024, "vocoder": 1024}


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
    tls_cert: str = setting(
        "", env="TTS_TLS_CERT", doc="PEM certificate (chain) of the gRPC port; with --tls-key it serves TLS only (empty: plaintext)"
    )
    tls_key: str = setting("", env="TTS_TLS_KEY", doc="PEM private key of --tls-cert")
    tls_client_ca: str = setting(
        "", env="TTS_TLS_CLIENT_CA", doc="PEM CA whose client certificates the gRPC port requires (mutual TLS; empty: none asked)"
    )
    health_port: int = setting(
        0, env="TTS_HEALTH_PORT", unit="TCP port", minimum=0, maximum=65535,
        doc="plaintext port serving only grpc.health.v1, for probes that cannot speak TLS (0: none)",
    )  # fmt: skip

    max_receive_message_bytes: int = setting(
        MAX_WORKER_MESSAGE_BYTES, env="TTS_MAX_RECEIVE_MESSAGE_BYTES", unit="bytes", minimum=1024,
        by_service=DEFAULT_MAX_RECEIVE_MESSAGE_BYTES,
        doc="largest message the gRPC port takes; a bigger one is refused with RESOURCE_EXHAUSTED before it is read",
    )  # fmt: skip
    max_concurrent_streams: int = setting(
        100, env="TTS_MAX_CONCURRENT_STREAMS", unit="count", minimum=1, by_service=DEFAULT_MAX_CONCURRENT_STREAMS,
        doc="streams one client connection may have open at once (HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS); more wait in the client",
    )  # fmt: skip

    def __post_init__(self) -> None:
        if bool(self.tls_cert) != bool(self.tls_key):
            raise ValueError("--tls-cert and --tls-key go together: give both (TLS) or neither (plaintext)")
        if self.tls_client_ca and not self.tls_cert:
            raise ValueError("--tls-client-ca needs --tls-cert and --tls-key: client certificates are asked only over TLS")


# Keepalive, the one agreement between every server and every channel of the mesh: a server takes a
# client's ping as often as every MIN_PING_INTERVAL_MS, even with no call or no data in flight (the
# gateway's health Watches are silent for hours), and a channel never pings more often (the
# gateway's --keepalive-time-ms has it as its minimum). A ping sooner is a strike, and the third
# strike closes the connection with GOAWAY too_many_pings, failing every stream on it. gRPC ignores
# option names it does not know, so these are spelt as gRPC core reads them.
MIN_PING_INTERVAL_MS: Final = 10_000
SERVER_KEEPALIVE_OPTIONS: Final = (
    ("grpc.http2.min_ping_interval_without_data_ms", MIN_PING_INTERVAL_MS),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_ping_strikes", 2),
    # The server's own pings find dead client connections (it needs no permission to send them).
    ("grpc.keepalive_time_ms", 30 * 1000),
)
CHANNEL_OPTIONS: Final = (
    ("grpc.max_receive_message_length", MAX_WORKER_MESSAGE_BYTES),
    ("grpc.max_send_message_length", MAX_WORKER_MESSAGE_BYTES),
    ("grpc.keepalive_time_ms", 30 * 1000),
)


MAX_CONNECTION_AGE_MS: Final = 5 * 60 * 1000
MAX_CONNECTION_AGE_GRACE_MS: Final = 60 * 60 * 1000
"""How long calls in flight on a rotated connection may go on. A listener who reads at real time
holds a stream as long as its speech lasts (5,000 characters are about 5 minutes; a streamed text
has no end), and the gateway's worker calls last as long as the utterance: a grace shorter than that
cuts the stream at the connection's age plus the grace, and it can resume only on another worker."""


def server_options(settings: ServerSettings) -> list[tuple[str, int]]:
    """gRPC arguments of a service's server: message sizes, streams per connection, the port, keepalive."""
    return [
        ("grpc.max_receive_message_length", settings.max_receive_message_bytes),
        ("grpc.max_send_message_length", MAX_RESPONSE_BYTES),
        ("grpc.max_concurrent_streams", settings.max_concurrent_streams),
        OWN_PORT_OPTION,
        # Rotate connections now and then so new replicas behind a load balancer get traffic: new
        # calls move to a new connection, while the calls in flight on the old one keep going.
        ("grpc.max_connection_age_ms", MAX_CONNECTION_AGE_MS),
        ("grpc.max_connection_age_grace_ms", MAX_CONNECTION_AGE_GRACE_MS),
        *SERVER_KEEPALIVE_OPTIONS,
    ]


class PortUnavailableError(OSError):
    """A port the service must listen on is taken by another process (or cannot be bound)."""


def _port_taken(host: str, port: int) -> bool:
    """Whether another process listens on `host`:`port` (False for port 0, or a host that does not resolve)."""
    if port == 0:
        return False
    try:
        addresses = socket.getaddrinfo(host.strip("[]") or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror:
        return False  # gRPC's bind reports it
    for family, kind, protocol, _, address in addresses:
        with socket.socket(family, kind, protocol) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as gRPC binds: TIME_WAIT is no obstacle
            try:
                probe.bind(address)
            except OSError as error:
                if error.errno == errno.EADDRINUSE:
                    return True
    return False

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
    except (SettingFileError, SettingTargetError) as error:  # a file or server that cannot be used: say which, no traceback
        raise SystemExit(f"{service}: {error}") from None
    except PortUnavailableError as error:  # one line that says which port and what to do, no traceback
        _log.error("%s", error)
        raise SystemExit(1) from None
    finally:
        shutdown_tracing(provider)  # flush the last spans
    return 0


def freeze_startup_heap() -> None:
    """Take every object alive after start-up (modules, models, stubs) out of the garbage collector's
    full passes; call it once, when the service is about to report SERVING.

    A full pass walks every tracked object (in a worker, with torch and the voice loaded, a hundred
    thousand and more), and one comes due whenever enough objects have survived since the last; in
    the middle of a request it is a stall the client hears. What start-up built lives
    as long as the process, so nothing is lost by never scanning it again; objects made later are
    collected as usual.
    """
    gc.collect()
    FROZEN_HEAP.freeze()


class ServiceRuntime:
    """The grpc.aio server of one service with its health service, tracing and metrics endpoint.

    `registry` gets the process metrics (RSS, and GPU memory once CUDA is in use) added to it.
    """

    def __init__(
        self,
        settings: ServerSettings,
        service_names: Sequence[str],
        registry: CollectorRegistry,
        interceptors: Sequence[grpc.aio.ServerInterceptor] = (),
    ) -> None:
        """`interceptors` run inside the tracing one, in order (the gateway's API-key check)."""
        self.settings = settings
        # Read before anything starts, so a bad certificate stops the service at once.
        self._credentials = (
            server_credentials(settings.tls_cert, settings.tls_key, settings.tls_client_ca) if settings.tls_cert else None
        )
        self.server = grpc.aio.server(
            options=server_options(settings), interceptors=[server_interceptor(), RequestDecodingInterceptor(), *interceptors]
        )
        self.health = health.aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        # "" is the whole server; clients and Kubernetes probes may ask either.
        self._service_names = ("", *service_names)
        self._registry = registry
        register_process_metrics(registry)
        self._stop = asyncio.Event()
        self._probe_server: grpc.aio.Server | None = None
        self.port = 0

    async def start(self) -> int:
        """Bind, start serving (health NOT_SERVING) and the /metrics endpoint; returns the bound gRPC port."""
        await self.set_serving(False)
        address = f"{self.settings.host}:{self.settings.port}"
        try:
            if _port_taken(self.settings.host, self.settings.port):  # before gRPC, whose own report is C++ log noise
                self.port = 0
            elif self._credentials is None:
                self.port = self.server.add_insecure_port(address)
            else:
                self.port = self.server.add_secure_port(address, self._credentials)
        except RuntimeError:  # "Failed to bind to address"
            self.port = 0
        if self.port == 0:
            await self.server.stop(None)  # else its finaliser runs after the loop has closed
            raise PortUnavailableError(
                f"cannot listen on gRPC port {address}: another process listens there (or it is not an address of "
                "this host); stop that process or choose another --port (TTS_PORT)"
            )
        await self.server.start()
        if self.settings.health_port:
            await self._start_probe_server()
        if self.settings.metrics_port:
            try:
                start_http_server(self.settings.metrics_port, registry=self._registry)
            except OSError as error:
                await self.server.stop(None)
                if self._probe_server is not None:
                    await self._probe_server.stop(None)
                taken = "another process listens there" if error.errno == errno.EADDRINUSE else error.strerror
                raise PortUnavailableError(
                    f"cannot serve /metrics on port {self.settings.metrics_port}: {taken}; stop that process or choose "
                    "another --metrics-port (TTS_METRICS_PORT; 0 switches /metrics off)"
                ) from None
        self._install_signal_handlers()
        security = "plaintext" if self._credentials is None else "mutual TLS" if self.settings.tls_client_ca else "TLS"
        _log.info("listening on port %d, %s (zone %s)", self.port, security, self.settings.zone)
        return self.port

    async def _start_probe_server(self) -> None:
        host, port = self.settings.host, self.settings.health_port
        try:
            if _port_taken(host, port):  # before gRPC, whose own report is C++ log noise
                raise OSError(errno.EADDRINUSE, "in use")
            self._probe_server = await probe_server(self.health, host, port)
        except OSError:
            await self.server.stop(None)
            raise PortUnavailableError(
                f"cannot listen on health port {host}:{port}: another process listens there (or it is not an address of "
                "this host); stop that process or choose another --health-port (TTS_HEALTH_PORT)"
            ) from None

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
        if self._probe_server is not None:
            await self._probe_server.stop(0)
        _log.info("stopped")

    def _install_signal_handlers(self) -> None:
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, self.request_stop)


UNANNOUNCED_END_WAIT_S: Final = 0.25
"""How long a stream whose requests ended without their last one marked `end`, from a caller that
does not announce its end, waits for the cancellation that may be on its way. The request side of a
cancelled call ends a moment before the call is marked cancelled; with three threads holding the GIL
by turns, 91 of 200 cancellations landed more than 5 ms later (the wait before), the latest 56 ms
later. The gateway announces its end (ANNOUNCES_END_METADATA) and never waits."""

class EndMarked(Protocol):
    """A worker stream's request: both kinds carry `end`."""

    end: bool


RequestT = TypeVar("RequestT", bound=EndMarked)


class StreamEnding:
    """How a worker stream's requests ended: with a request marked `end` (a clean end), or without
    one, which from a caller that announces its end (ANNOUNCES_END_METADATA) means the caller went
    away; another caller's stream waits a moment for the cancellation that may be on its way."""

    def __init__(self, context: grpc.aio.ServicerContext) -> None:
        self.announced = False
        """Whether the caller sent its request marked `end`."""
        self._promised = ANNOUNCES_END_METADATA in tuple(context.invocation_metadata() or ())
        self._exhausted = False
        self._waited = False

    async def requests(self, requests: AsyncIterator[RequestT]) -> AsyncIterator[RequestT]:
        """`requests` without the one marked `end` (which carries nothing else); InvalidRequestError
        for a request after it."""
        async for request in requests:
            if self.announced:
                raise InvalidRequestError("a request came after the one marked end; mark only the last request end")
            if request.end:
                if _carries_more_than_end(request):
                    raise InvalidRequestError("a request marked end carries nothing else; send what it carries in a request before it")
                self.announced = True
                continue
            yield request
        self._exhausted = True

    async def caller_gone(self) -> bool:
        """Whether the requests ended because the caller went away, not by a clean half-close. For a
        caller that does not announce its end this first waits UNANNOUNCED_END_WAIT_S, once, for a
        cancellation (CancelledError when it lands)."""
        if self.announced or not self._exhausted:
            return False
        if self._promised:
            return True
        if not self._waited:
            self._waited = True
            await asyncio.sleep(UNANNOUNCED_END_WAIT_S)
        return False


def _carries_more_than_end(request: Any) -> bool:
    rest = type(request)()
    rest.CopyFrom(request)
    rest.ClearField("end")
    return rest.ByteSize() > 0


class StreamTracker:
    """Counts a worker's open streams and how each one ended, so cancellation leaks show up in metrics."""

    def __init__(self, inflight: Gauge, finished: Counter) -> None:
        self._inflight = inflight
        self._finished = finished

    @asynccontextmanager
    async def track(self, context: grpc.aio.ServicerContext) -> AsyncIterator[StreamEnding]:
        """Wrap one stream handler's body, which reads its requests through the StreamEnding given."""
        self._inflight.inc()
        outcome = {"code": "OK"}
        ending = StreamEnding(context)
        closed = False
        try:
            yield ending
            # A caller that cancels (or whose deadline passes) while the handler awaits its next
            # request just ends the request stream, as a half-close does; the handler's task is
            # cancelled a moment later.
            if await ending.caller_gone():
                outcome["code"] = "CANCELLED"
        except GeneratorExit:
            # Cancelled while grpc wrote one of the handler's responses, outside the handler: grpc
            # then closes the handler's generator, and a done callback added now would never run.
            closed = True
            raise
        except asyncio.CancelledError:
            outcome["code"] = "CANCELLED"
            raise
        except BaseException:
            outcome["code"] = _code_name(context.code()) or "UNKNOWN"
            raise
        finally:
            self._inflight.dec()
            if closed:
                self._finished.labels(code="CANCELLED").inc()
            else:
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
