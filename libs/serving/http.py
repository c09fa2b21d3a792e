"""An HTTP listener next to a service's gRPC server, on the same event loop (uvicorn serving ASGI)."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

import uvicorn

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


class HttpListener:
    """Serves an ASGI app on `port` until `stop` (started on the running event loop)."""

    def __init__(self, app: Any, host: str, port: int) -> None:
        host = host.strip("[]") or "::"
        config = uvicorn.Config(app, host=host, port=port, lifespan="off", log_level="warning", access_log=False)
        self._server = uvicorn.Server(config)
        self._task: asyncio.Task[None] | None = None
        self.port = port

    async def start(self) -> None:
        """Start serving; OSError when the port cannot be bound."""
        self._task = asyncio.create_task(self._server.serve())
        while not self._server.started:
            if self._task.done():
                self._task.result()  # re-raise why it could not start
                raise OSError(f"the HTTP port {self.port} could not be bound; it may be in use")
            await asyncio.sleep(0.01)
        _log.info("HTTP API listening on port %d", self.port)

    async def stop(self) -> None:
        """Stop accepting, let open responses finish (uvicorn's graceful shutdown)."""
        if self._task is None:
            return
        self._server.should_exit = True
        await asyncio.gather(self._task, return_exceptions=True)
