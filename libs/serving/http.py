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


def _listening_socket(host: str, port: int) -> socket.socket:
    """The listening socket: on "::" one socket for IPv6 and IPv4 both (uvicorn's own is IPv6 only),
    so a proxy that dials 127.0.0.1 reaches the door as a client dialling ::1 does."""
    if host == "::" and socket.has_dualstack_ipv6():
        return socket.create_server((host, port), family=socket.AF_INET6, dualstack_ipv6=True)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    return socket.create_server((host, port), family=family)


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
    ) -> None:
        """At most `max_requests_per_client` requests of one client address at once (0: no limit;
        libs.serving.http_limits); HTTPS only when `tls` is given."""
        host = host.strip("[]") or "::"
        self._host = host
        app = ClientRequestLimit(app, max_requests_per_client, clients)  # names the client even without a limit
        config = uvicorn.Config(
            app, host=host, port=port, lifespan="off", log_level="warning", access_log=False,
            # The client address stays the peer's: which proxies may name another is the gateway's
            # --trusted-proxies (libs.serving.clients), not uvicorn's own default list.
            proxy_headers=False, **(tls.uvicorn_options() if tls else {})
        )
        self._server = uvicorn.Server(config)
        self._task: asyncio.Task[None] | None = None
        self.port = port
        self.scheme = "https" if tls else "http"

    async def start(self) -> None:
        """Start serving; PortUnavailableError (one line that says what to do) when the port cannot be bound."""
        try:
            listening = _listening_socket(self._host, self.port)
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
