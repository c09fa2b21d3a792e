"""The mesh's domain errors: what went wrong, in terms a caller can act on.

Code raises these (or lets text and voice errors through); each service turns them into a gRPC
status in one place, `libs.serving.status`.
"""

from __future__ import annotations

from typing import Final

import grpc


class MeshError(Exception):
    """Base of the mesh's own errors."""


class InvalidRequestError(MeshError):
    """The request itself is wrong (bad field value, undecodable text); retrying it cannot help."""

    def __init__(self, message: str, *, field: str = "") -> None:
        super().__init__(message)
        self.field = field
        """The request field that is wrong, by its name in the proto (`speed`, `lexicon`); "" when no one field is."""


class ModelVersionMismatchError(MeshError):
    """A worker runs another model version than the caller expects (its cache keys would be wrong)."""


class NoWorkerError(MeshError):
    """No healthy worker of a kind is available right now."""


class DownstreamError(MeshError):
    """A worker call failed; carries the worker's status so the client sees the real cause."""

    def __init__(self, code: grpc.StatusCode, message: str, retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.retry_after_s = retry_after_s
        """For a refusal (RESOURCE_EXHAUSTED): when a retry may find room (seconds; None: not known)."""


MAX_ECHO_CHARS: Final = 64
"""Most characters of a client's value an error message repeats."""


def echo(value: str, limit: int = MAX_ECHO_CHARS) -> str:
    """`value` quoted for an error message: whole when short, else its first `limit` characters, an
    ellipsis and its length, so that no message carries unbounded client input."""
    return repr(value) if len(value) <= limit else f"{value[:limit]!r}{_cut(len(value))}"


def shortened(text: str, limit: int) -> str:
    """`text` whole when it has at most `limit` characters, else its first `limit`, an ellipsis and its length."""
    return text if len(text) <= limit else f"{text[:limit]}{_cut(len(text))}"


def _cut(length: int) -> str:
    return f"… ({length} characters)"
