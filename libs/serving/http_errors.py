"""Errors of the HTTP doors, in the shape OpenAI's API gives them, so its clients raise their own
exceptions for ours: `{"error": {"message", "type", "param", "code"}}`.

- `message` says what to fix; `type` is OpenAI's error type; `param` names the request parameter
  to fix (null when no one parameter is); `code` is a short machine-readable reason.
- The HTTP status comes from the gRPC status the same error gets at the gRPC door, through the one
  table (libs.serving.status), so both doors refuse the same request the same way.
- Refusals that only HTTP has (a body over the size limit, a route or method that does not exist)
  name their status themselves.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

import grpc
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import BaseRoute, Route

from libs.serving.status import field_of, grpc_status_for, http_status_for, retry_after_s

StatusFor = Callable[[BaseException], tuple[grpc.StatusCode, str]]
"""A door's error table: an error -> its gRPC status code and client-facing message."""

INVALID_REQUEST: Final = "invalid_request_error"


def error_body(message: str, type_: str, param: str | None = None, code: str | None = None) -> dict[str, Any]:
    """An error as OpenAI's API sends it."""
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


class HttpError(Exception):
    """A request an HTTP door refuses: its status follows from `grpc_code` unless `status` is given."""

    def __init__(
        self,
        grpc_code: grpc.StatusCode,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        status: int | None = None,
        retry_after_s: float | None = None,
    ) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s
        """For a refusal: when a retry may find room (seconds; sent as `Retry-After`, None: not said)."""
        mapped_status, self.type = http_status_for(grpc_code)
        self.status = status if status is not None else mapped_status
        self.message = message
        self.param = param
        """The request parameter to fix, by its HTTP name (None when no one parameter is)."""
        self.code = code if code is not None else grpc_code.name.lower()
        self.grpc_code = grpc_code
        """The same outcome as a gRPC status (what the request metrics count)."""

    def body(self) -> dict[str, Any]:
        return error_body(self.message, self.type, self.param, self.code)

    def response(self, headers: Mapping[str, str] | None = None) -> JSONResponse:
        sent = dict(headers or {})
        if self.retry_after_s is not None:
            sent.setdefault("Retry-After", str(max(1, math.ceil(self.retry_after_s))))
        return JSONResponse(self.body(), status_code=self.status, headers=sent or None)


def http_error_for(error: BaseException, params: Mapping[str, str | None], status_for: StatusFor = grpc_status_for) -> HttpError:
    """The HTTP error for `error`: an HttpError as it is; a domain error through `status_for` (the
    one status table, or a door's extension of it), its `param` the HTTP name `params` gives the
    field the error is about (libs.serving.status.field_of; a field `params` does not name is None)."""
    if isinstance(error, HttpError):
        return error
    code, message = status_for(error)
    return HttpError(code, message, param=params.get(field_of(error)), retry_after_s=retry_after_s(error))


def openai_shaped_app(routes: Sequence[BaseRoute]) -> Starlette:
    """An ASGI app of `routes` whose own refusals (no such route, a method a route does not take) are
    OpenAI-shaped too."""
    return Starlette(routes=routes, exception_handlers={HTTPException: http_exception_handler})


async def http_exception_handler(request: Request, error: Exception) -> JSONResponse:
    """Starlette's own refusals (no such route: 404, a method the route does not take: 405) in the
    same shape, saying what the API does take."""
    if not isinstance(error, HTTPException):  # registered for HTTPException only
        raise error
    method, path = request.method, request.url.path
    headers = dict(error.headers or {})
    if error.status_code == 404:
        message, code = f"there is no route {method} {path}; the routes are {', '.join(_routes(request))}", "not_found"
    elif error.status_code == 405:
        allowed = headers.get("Allow", headers.get("allow", ""))
        message, code = f"{path} does not take {method}; it takes {allowed or 'other methods'}", "method_not_allowed"
    else:
        message, code = str(error.detail), None
    grpc_code = grpc.StatusCode.NOT_FOUND if error.status_code == 404 else grpc.StatusCode.INVALID_ARGUMENT
    return HttpError(grpc_code, message, code=code, status=error.status_code).response(headers)


def _routes(request: Request) -> list[str]:
    """The app's routes as "METHOD /path" (HEAD, which comes with GET, left out)."""
    return [
        f"{method} {route.path}"
        for route in request.app.routes
        if isinstance(route, Route)
        for method in sorted((route.methods or set()) - {"HEAD"})
    ]
