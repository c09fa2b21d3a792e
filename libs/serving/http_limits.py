"""A cap on the requests one client may have open at once at an HTTP door (any ASGI app).

The gRPC door limits the streams of one client address (`--max-streams-per-client`); this is the
same limit at the HTTP door, with its own count. A request counts from its first byte until its
response has been sent in full (a streamed speech response holds its slot while it plays), so a
client that opens many requests and reads none cannot take the whole gateway. One past the limit
is answered at once with 429, `Retry-After: 1` and a JSON body in the shape HTTP speech APIs use
(libs.serving.http_errors). The client is the peer's address without its port, or behind a trusted
proxy the address it forwarded for, as at the gRPC door (libs.serving.clients). The app finds who it
is under `scope[CLIENT_SCOPE_KEY]`, so the synthesizer's own per-client limits and fairness apply
to HTTP callers too. An open WebSocket counts as one request for as long as it is open, and one past the
limit is refused in its handshake with the same 429.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any, Final

from libs.serving.clients import FORWARDED_FOR, ClientIdentity
from libs.serving.http_errors import error_body

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
AsgiApp = Callable[[Scope, Receive, Send], Awaitable[None]]

RETRY_AFTER_S: Final = 1
CLIENT_SCOPE_KEY: Final = "tts.client"
"""Where the app finds the request's client ("" when the door does not tell clients apart)."""
TIER_SCOPE_KEY: Final = "tts.tier"
"""Where the app finds the tier the request's API key speaks in when the request names none (absent: quality)."""


class ClientRequestLimit:
    """`app` serving at most `max_per_client` requests of one client address at once (0: no limit)."""

    def __init__(self, app: AsgiApp, max_per_client: int, clients: ClientIdentity | None = None) -> None:
        self._app = app
        self._max_per_client = max_per_client
        self._clients = clients or ClientIdentity()
        self._open: dict[str, int] = {}

    def open_requests(self, client: str) -> int:
        """Requests of `client` being served now."""
        return self._open.get(client, 0)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        peer = scope.get("client")
        if scope["type"] not in ("http", "websocket") or not peer:
            await self._app(scope, receive, send)
            return
        forwarded = next((value.decode("latin-1") for key, value in scope.get("headers", ()) if key == FORWARDED_FOR.encode()), None)
        client = self._clients.client(str(peer[0]), forwarded)
        scope[CLIENT_SCOPE_KEY] = client
        if not self._max_per_client:
            await self._app(scope, receive, send)
            return
        held = self._open.get(client, 0)
        if held >= self._max_per_client:
            await _refuse(send, held, scope["type"])
            return
        self._open[client] = held + 1
        try:
            await self._app(scope, receive, send)
        finally:
            left = self._open.pop(client) - 1
            if left:
                self._open[client] = left


async def _refuse(send: Send, held: int, scope_type: str) -> None:
    message = f"this client already has {held} requests open here, its limit; finish or cancel one before starting another"
    body = json.dumps(error_body(message, "rate_limit_error", code="client_limit")).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"retry-after", str(RETRY_AFTER_S).encode()),
    ]
    await send_refusal(send, scope_type, 429, headers, body)


async def send_refusal(send: Send, scope_type: str, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
    """An HTTP answer that refuses a request; a WebSocket's is its handshake's answer (ASGI's denial
    response), so the client sees the same status and body as over plain HTTP."""
    prefix = "websocket.http.response" if scope_type == "websocket" else "http.response"
    await send({"type": f"{prefix}.start", "status": status, "headers": headers})
    await send({"type": f"{prefix}.body", "body": body})
