"""The API-key gate (libs.serving.auth) in front of an HTTP door (any ASGI app).

Every request to a path under `guarded_prefixes` (by default all) needs `Authorization: Bearer <key>`
(or, as ElevenLabs' clients send it, `xi-api-key: <key>`); a WebSocket shows it in its handshake. A refused request gets
401 (with `WWW-Authenticate: Bearer`) or 429 (with `Retry-After` in whole seconds) and a JSON body
in the shape HTTP speech APIs use (libs.serving.http_errors), with the refusal's reason as `code`.
A POST holds one of its key's streams until its response has been sent.
"""

from __future__ import annotations

import json
import math
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final

from libs.serving.auth import ApiKeyGate, Refusal
from libs.serving.clients import key_client
from libs.serving.http_errors import error_body
from libs.serving.http_limits import CLIENT_SCOPE_KEY, TIER_SCOPE_KEY, send_refusal

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
AsgiApp = Callable[[Scope, Receive, Send], Awaitable[None]]

_AUTHORIZATION: Final = b"authorization"
_XI_API_KEY: Final = b"xi-api-key"


class ApiKeyAsgi:
    """`app` behind the gate."""

    def __init__(self, app: AsgiApp, gate: ApiKeyGate, guarded_prefixes: Sequence[str] = ("/",)) -> None:
        self._app = app
        self._gate = gate
        self._guarded_prefixes = tuple(guarded_prefixes)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket") or not str(scope.get("path", "")).startswith(self._guarded_prefixes):
            await self._app(scope, receive, send)
            return
        authorization = None
        for name, value in scope.get("headers", ()):
            if name.lower() == _AUTHORIZATION:
                authorization = value.decode("latin-1")
                break
            if name.lower() == _XI_API_KEY and authorization is None:  # ElevenLabs' clients send their key so
                authorization = f"Bearer {value.decode('latin-1')}"
        try:
            # A speech request, and a WebSocket for as long as it is open, holds one of the key's streams.
            grant = self._gate.admit(authorization, stream=scope.get("method") == "POST" or scope["type"] == "websocket")
        except Refusal as refusal:
            await _refuse(send, refusal, scope["type"])
            return
        # The synthesizer's limits count the key as the client, as at the gRPC door.
        scope[CLIENT_SCOPE_KEY] = key_client(grant.key_id)
        scope[TIER_SCOPE_KEY] = grant.tier
        try:
            await self._app(scope, receive, send)
        finally:
            grant.release()


async def _refuse(send: Send, refusal: Refusal, scope_type: str) -> None:
    if refusal.unauthenticated:
        status, kind, extra = 401, "authentication_error", [(b"www-authenticate", b"Bearer")]
    else:
        retry_after_s = max(1, math.ceil(refusal.retry_after_s or 0.0))
        status, kind, extra = 429, "rate_limit_error", [(b"retry-after", str(retry_after_s).encode())]
    body = json.dumps(error_body(str(refusal), kind, code=refusal.reason)).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), *extra]
    await send_refusal(send, scope_type, status, headers, body)
