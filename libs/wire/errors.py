"""The mesh's domain errors: what went wrong, in terms a caller can act on.

Code raises these (or lets text and voice errors through); each service turns them into a gRPC
status in one place, `libs.serving.status`.
"""

from __future__ import annotations

import grpc


class MeshError(Exception):
    """Base of the mesh's own errors."""


class InvalidRequestError(MeshError):
    """The request itself is wrong (bad field value, undecodable text); retrying it cannot help."""


class ModelVersionMismatchError(MeshError):
    """A worker runs another model version than the caller expects (its cache keys would be wrong)."""


class NoWorkerError(MeshError):
    """No healthy worker of a kind is available right now."""


class DownstreamError(MeshError):
    """A worker call failed; carries the worker's status so the client sees the real cause."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
