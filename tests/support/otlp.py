"""An OTLP/gRPC trace collector on a loopback port that keeps every span the services send it: what the
tracing tests read, and what `bench.gaps` replays listeners from."""

from __future__ import annotations

import threading
from concurrent import futures
from dataclasses import dataclass
from types import TracebackType

from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.common.v1 import common_pb2

from tests.support.servers import sync_server


@dataclass(frozen=True)
class ExportedSpan:
    """One span as the collector received it."""

    service: str
    zone: str
    name: str
    kind: int
    trace_id: bytes
    span_id: bytes
    parent_span_id: bytes
    attributes: dict[str, object]
    start_s: float = 0.0
    """When it started (seconds since the epoch, as the service's clock read it)."""
    end_s: float = 0.0
    """When it ended (seconds since the epoch)."""


def _value(value: common_pb2.AnyValue) -> object:
    return getattr(value, value.WhichOneof("value")) if value.WhichOneof("value") else None


class SpanCollector(trace_service_pb2_grpc.TraceServiceServicer):
    """Keeps every span it is sent; `with SpanCollector() as collector:` serves it on `collector.endpoint`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._spans: list[ExportedSpan] = []
        self._server = sync_server(futures.ThreadPoolExecutor(max_workers=4))
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(self, self._server)
        self.endpoint = f"http://127.0.0.1:{self._server.add_insecure_port('127.0.0.1:0')}"
        """The `OTEL_EXPORTER_OTLP_ENDPOINT` that sends spans here."""

    def __enter__(self) -> SpanCollector:
        self._server.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None) -> None:
        self._server.stop(None)

    def Export(self, request, context):  # the gRPC method's name
        received = []
        for resource_spans in request.resource_spans:
            resource = {kv.key: _value(kv.value) for kv in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    received.append(
                        ExportedSpan(
                            service=str(resource["service.name"]),
                            zone=str(resource.get("cloud.availability_zone")),
                            name=span.name,
                            kind=span.kind,
                            trace_id=span.trace_id,
                            span_id=span.span_id,
                            parent_span_id=span.parent_span_id,
                            attributes={kv.key: _value(kv.value) for kv in span.attributes},
                            start_s=span.start_time_unix_nano / 1e9,
                            end_s=span.end_time_unix_nano / 1e9,
                        )
                    )
        with self._lock:
            self._spans.extend(received)
        return trace_service_pb2.ExportTraceServiceResponse()

    def spans(self) -> list[ExportedSpan]:
        """Every span received so far."""
        with self._lock:
            return list(self._spans)

    def clear(self) -> None:
        """Forget the spans received so far."""
        with self._lock:
            self._spans.clear()

    def trace(self, trace_id: bytes) -> list[ExportedSpan]:
        """The spans of one trace received so far."""
        with self._lock:
            return [span for span in self._spans if span.trace_id == trace_id]
