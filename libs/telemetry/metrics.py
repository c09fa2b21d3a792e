"""Prometheus metrics of each service, each set on its own registry.

A service creates its set once (`AcousticMetrics()`, ...) and serves `metrics.registry` on
`--metrics-port`. Separate registries keep one service's /metrics free of another's series and let
tests build fresh sets.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge


class WorkerMetrics:
    """Metrics every worker (acoustic, vocoder) exports."""

    def __init__(self, service: str, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.inflight_streams = Gauge(
            f"tts_{service}_inflight_streams",
            "Streams open on this worker right now.",
            registry=self.registry,
        )
        self.streams_total = Counter(
            f"tts_{service}_streams_total",
            "Streams this worker has accepted, by final gRPC status code.",
            ["code"],
            registry=self.registry,
        )


class AcousticMetrics(WorkerMetrics):
    """Metrics of the acoustic worker."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        super().__init__("acoustic", registry)
        self.sentences_total = Counter(
            "tts_acoustic_sentences_total",
            "Sentences whose mel this worker synthesised to the end.",
            registry=self.registry,
        )
        self.frames_total = Counter(
            "tts_acoustic_frames_total",
            "Mel frames this worker sent.",
            registry=self.registry,
        )


class VocoderMetrics(WorkerMetrics):
    """Metrics of the vocoder worker."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        super().__init__("vocoder", registry)
        self.samples_total = Counter(
            "tts_vocoder_samples_total",
            "Audio samples this worker sent.",
            registry=self.registry,
        )


class GatewayMetrics:
    """Metrics of the gateway."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.requests_total = Counter(
            "tts_gateway_requests_total",
            "Client calls, by method and final gRPC status code.",
            ["method", "code"],
            registry=self.registry,
        )
        self.cache_operations_total = Counter(
            "tts_gateway_cache_operations_total",
            "Mel cache operations by outcome (hit, miss, error, corrupt, skipped, written, write_error).",
            ["outcome"],
            registry=self.registry,
        )
        self.inflight_streams = Gauge(
            "tts_gateway_inflight_streams",
            "Client streams open on this gateway right now.",
            registry=self.registry,
        )
