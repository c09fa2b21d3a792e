"""An HTTP listener next to a service's gRPC server, on the same event loop (uvicorn serving ASGI)."""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
import ssl
from dataclasses import dataclass
from typing import Any

import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from libs.serving.clients import ClientIdentity
from libs.serving.http_limits import ClientRequestLimit
from libs.serving.server import PortUnavailableError
from libs.settings.fields import setting

_log = logging.getLogger(__name__)

DEFAULT_HTTP_PORT = 8000
# The longest JSON body a speech request needs: 5,000 characters of input, escaped, plus the options.
DEFAULT_MAX_BODY_BYTES = 64 * 1024


@dataclass(frozen=True)
class HttpSettings:
    """The gateway's HTTP door."""

    http_port: int = setting(
        DEFAULT_HTTP_PORT, env="TTS_HTTP_PORT", unit="TCP port", minimum=0, maximum=65535,
        doc="HTTP port of the OpenAI-compatible API (/v1/audio/speech); 0 disables it",
    )  # fmt: skip
    http_max_body_bytes: int = setting(
        DEFAULT_MAX_BODY_BYTES, env="TTS_HTTP_MAX_BODY_BYTES", unit="bytes", minimum=1024,
        doc="largest HTTP request body accepted; larger ones get 413",
    )  # fmt: skip
    web_dir: str = setting(
        "", env="TTS_WEB_DIR", doc="folder of the web page served at / (empty: web/dist of this checkout, when it exists; none: no page)"
    )


HEADER_TIMEOUT_S = 10.0
"""How long a connection may take to send a request's headers, from when it opens or its last
response ended (the edge in front allows as long: libs.edge.envoy)."""


class _HeadersInTime(H11Protocol):
    """uvicorn's HTTP/1.1 protocol with a deadline on request headers. uvicorn has none: a client that
    opens a connection and sends nothing, or a header a byte at a time, held it (and its memory) for
    good. The deadline runs from the connection's start and from each response's end (a keep-alive
    connection's next request) until a request's headers are whole; then the connection is closed."""

    header_timeout_s: float = HEADER_TIMEOUT_S
    _header_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._await_headers()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._await_headers()

    def handle_events(self) -> None:
        cycle = self.cycle
        super().handle_events()
        if self.cycle is not cycle or self.transport.get_protocol() is not self:  # a request began, or a WebSocket took over
            self._headers_came()

    def connection_lost(self, exc: Exception | None) -> None:
        self._headers_came()
        super().connection_lost(exc)

    def _await_headers(self) -> None:
        self._headers_came()
        if not self.transport.is_closing():
            self._header_timer = self.loop.call_later(self.header_timeout_s, self._too_slow)

    def _headers_came(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _too_slow(self) -> None:
        self._header_timer = None
        if not self.transport.is_closing() and (self.cycle is None or self.cycle.response_complete):
            self.transport.close()


DEFAULT_SOCKET_CONTEXTS = 8
# A socket that says nothing and speaks nothing for this long is closed (a voice agent keeps its
# socket open between turns; one that left it behind costs a little memory until then).
DEFAULT_SOCKET_IDLE_TIMEOUT_S = 60.0
# What one context of a socket may send in all: an LLM's answer is a few thousand characters; a
# hundred thousand is over an hour of speech.
DEFAULT_SOCKET_CONTEXT_CHARS = 100_000


@dataclass(frozen=True)
class SocketSettings:
    """The gateway's WebSocket doors (ours and ElevenLabs'), on the HTTP port."""

    socket_max_contexts: int = setting(
        DEFAULT_SOCKET_CONTEXTS, env="TTS_SOCKET_MAX_CONTEXTS", unit="count", minimum=1, maximum=64,
        doc="contexts (utterances) one WebSocket may speak at once; each also counts as a stream of its client",
    )  # fmt: skip
    socket_idle_timeout_s: float = setting(
        DEFAULT_SOCKET_IDLE_TIMEOUT_S, env="TTS_SOCKET_IDLE_TIMEOUT_S", unit="s", minimum=1, maximum=3600,
        doc="a WebSocket that sends nothing and has nothing left to speak for this long is closed",
    )  # fmt: skip
    socket_max_context_chars: int = setting(
        DEFAULT_SOCKET_CONTEXT_CHARS, env="TTS_SOCKET_MAX_CONTEXT_CHARS", unit="characters", minimum=1, maximum=10_000_000,
        doc="text one WebSocket context may send in all; past it the context ends with INVALID_ARGUMENT",
    )  # fmt: skip


@dataclass(frozen=True)
class HttpTls:
    """The HTTP door's TLS: the same certificate and key as the gateway's public gRPC port."""

    cert_path: str
    key_path: str
    client_ca_path: str = ""
    """Set: a client must show a certificate from this CA (as at the gRPC port)."""

    def uvicorn_options(self) -> dict[str, Any]:
        options: dict[str, Any] = {"ssl_certfile": self.cert_path, "ssl_keyfile": self.key_path}
        if self.client_ca_path:
            options.update(ssl_ca_certs=self.client_ca_path, ssl_cert_reqs=ssl.CERT_REQUIRED)
        return options


SEND_BUFFER_BYTES = 256 * 1024
"""The kernel's send buffer of each connection (accepted sockets inherit it): without a fixed size it
grows to megabytes toward a client that does not read, seconds of audio made for no one; 256 KiB still
carries the fastest encoding (48 kHz float, 192 KB/s) over a 1 s round trip."""


def listening_socket(host: str, port: int) -> socket.socket:
    """The listening socket: on "::" one socket for IPv6 and IPv4 both (uvicorn's own is IPv6 only),
    so a proxy that dials 127.0.0.1 reaches the door as a client dialling ::1 does."""
    if host == "::" and socket.has_dualstack_ipv6():
        listening = socket.create_server((host, port), family=socket.AF_INET6, dualstack_ipv6=True)
    else:
        listening = socket.create_server((host, port), family=socket.AF_INET6 if ":" in host else socket.AF_INET)
    listening.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER_BYTES)
    return listening


class HttpListener:
    """Serves an ASGI app on `port` until `stop` (started on the running event loop)."""

    def __init__(
        self,
        app: Any,
        host: str,
        port: int,
        *,
        max_requests_per_client: int = 0,
        tls: HttpTls | None = None,
        clients: ClientIdentity | None = None,
        max_message_bytes: int = DEFAULT_MAX_BODY_BYTES,
        header_timeout_s: float = HEADER_TIMEOUT_S,
    ) -> None:
        """At most `max_requests_per_client` requests of one client address at once (0: no limit;
        libs.serving.http_limits; an open WebSocket counts as one); HTTPS only when `tls` is given;
        a WebSocket message over `max_message_bytes` closes its socket (1009); a connection that has
        not sent a request's headers `header_timeout_s` after it opened or its last response ended is
        closed."""
        host = host.strip("[]") or "::"
        self._host = host
        app = ClientRequestLimit(app, max_requests_per_client, clients)  # names the client even without a limit
        config = uvicorn.Config(
            app, host=host, port=port, lifespan="off", log_level="warning", access_log=False,
            http=type("HeadersInTime", (_HeadersInTime,), {"header_timeout_s": header_timeout_s}),
            # The client address stays the peer's: which proxies may name another is the gateway's
            # --trusted-proxies (libs.serving.clients), not uvicorn's own default list.
            proxy_headers=False, **(tls.uvicorn_options() if tls else {}),
            # WebSockets: wsproto, pinned; a message is bounded as a body is; no compression (audio does
            # not compress, and it would cost CPU per frame); pings find dead peers.
            ws="wsproto", ws_max_size=max_message_bytes, ws_per_message_deflate=False, ws_ping_interval=20.0, ws_ping_timeout=20.0,
        )
        self._server = uvicorn.Server(config)
        self._task: asyncio.Task[None] | None = None
        self.port = port
        self.scheme = "https" if tls else "http"

    async def start(self) -> None:
        """Start serving; PortUnavailableError (one line that says what to do) when the port cannot be bound."""
        try:
            listening = listening_socket(self._host, self.port)
        except OSError as error:
            taken = "another process listens there" if error.errno == errno.EADDRINUSE else error.strerror
            raise PortUnavailableError(
                f"cannot serve HTTP on port {self.port}: {taken}; stop that process or choose another --http-port "
                "(TTS_HTTP_PORT; 0 switches the HTTP door off)"
            ) from None
        self.port = listening.getsockname()[1]
        self._task = asyncio.create_task(self._server.serve(sockets=[listening]))
        while not self._server.started:
            if self._task.done():
                self._task.result()  # re-raise why it could not start
                raise OSError(f"the HTTP port {self.port} could not be bound; it may be in use")
            await asyncio.sleep(0.01)
        _log.info("HTTP API listening on port %d, %s", self.port, "TLS" if self.scheme == "https" else "plaintext")

    async def stop(self) -> None:
        """Stop accepting, let open responses finish (uvicorn's graceful shutdown)."""
        if self._task is None:
            return
        self._server.should_exit = True
        await asyncio.gather(self._task, return_exceptions=True)
