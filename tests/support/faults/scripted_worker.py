"""Workers (acoustic, vocoder) that end every stream with one fixed status.

It is a real gRPC server (threads, so it serves sync and asyncio clients alike) with grpc.health.v1
SERVING, so the gateway routes to it like to any worker. Tests use it for what a real worker does
only under conditions hard to arrange: refusing with RESOURCE_EXHAUSTED, rejecting a request with
INVALID_ARGUMENT, or failing every stream while its health check says it is fine.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from libs.pb.tts.acoustic.v1 import acoustic_pb2, acoustic_pb2_grpc
from libs.pb.tts.vocoder.v1 import vocoder_pb2_grpc
from libs.wire.headers import STREAM_ACCEPTED_METADATA
from tests.support.servers import sync_server


class _Scripted:
    """Counts the streams it gets and ends each with `code` after accepting it, as a real worker
    accepts a stream (headers) and then judges its first request."""

    def __init__(self, code: grpc.StatusCode, trailers: Sequence[tuple[str, str]] = ()) -> None:
        self.code = code
        self.trailers = tuple(trailers)
        self._lock = threading.Lock()
        self.streams = 0
        """Streams received so far."""
        self._server: grpc.Server | None = None
        self.address = ""

    def _abort(self, request_iterator: Any, context: grpc.ServicerContext) -> Iterator[Any]:
        with self._lock:
            self.streams += 1
        context.send_initial_metadata((STREAM_ACCEPTED_METADATA,))
        next(request_iterator, None)
        context.set_trailing_metadata(self.trailers)
        context.abort(self.code, f"scripted {self.code.name}")
        yield from ()  # unreachable: abort raises; makes this a stream handler

    def _add_to(self, server: grpc.Server) -> None:
        raise NotImplementedError

    def start(self) -> str:
        """Serve on a free loopback port; returns "127.0.0.1:port"."""
        self._server, self.address = _serve(self._add_to)
        return self.address

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop(0)
            self._server = None


class ScriptedAcoustic(_Scripted, acoustic_pb2_grpc.AcousticServicer):
    """Answers GetModelInfo with `model_info` and aborts every SynthesizeMel stream with `code`."""

    def __init__(
        self, model_info: acoustic_pb2.ModelInfo, code: grpc.StatusCode, trailers: Sequence[tuple[str, str]] = ()
    ) -> None:
        super().__init__(code, trailers)
        self.model_info = model_info

    def GetModelInfo(self, request: Any, context: grpc.ServicerContext) -> acoustic_pb2.ModelInfo:
        return self.model_info

    def SynthesizeMel(self, request_iterator: Any, context: grpc.ServicerContext) -> Iterator[Any]:
        return self._abort(request_iterator, context)

    def _add_to(self, server: grpc.Server) -> None:
        acoustic_pb2_grpc.add_AcousticServicer_to_server(self, server)


class ScriptedVocoder(_Scripted, vocoder_pb2_grpc.VocoderServicer):
    """Aborts every Vocode stream with `code` (after accepting it, as a real worker judges a stream)."""

    def Vocode(self, request_iterator: Any, context: grpc.ServicerContext) -> Iterator[Any]:
        return self._abort(request_iterator, context)

    def _add_to(self, server: grpc.Server) -> None:
        vocoder_pb2_grpc.add_VocoderServicer_to_server(self, server)


def _serve(add_servicer: Any) -> tuple[grpc.Server, str]:
    """A threaded gRPC server on a free loopback port with grpc.health.v1 SERVING and one servicer."""
    server = sync_server(ThreadPoolExecutor(max_workers=8))
    health_servicer = health.HealthServicer()
    health_servicer.set("", health_pb2.HealthCheckResponse.SERVING)
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    add_servicer(server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    return server, f"127.0.0.1:{port}"
