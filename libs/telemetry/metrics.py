"""Prometheus metrics of each service, each set on its own registry (CATALOG.md lists every name).

A service creates its set once (`GatewayMetrics()`, `AcousticMetrics()`, `VocoderMetrics()`) and
serves `metrics.registry` on `--metrics-port`. Separate registries keep one service's /metrics free
of another's series and let tests build fresh sets.

Metrics fed from elsewhere come in through plain callbacks, so the code that produces the numbers
needs no Prometheus import:
- `WorkerMetrics.observe_batch` is the dynamic batcher's `on_batch(BatchStats)` callback;
- `GatewayMetrics.track_endpoints(statuses)` reads the routing health tables at scrape time;
- `GatewayMetrics.cache_outcome` is the mel cache's `on_outcome(outcome)` hook;
- `GatewayMetrics.auth_refused` is the API-key gate's `on_refused(reason)` hook (libs.serving.auth).
The gateway's routing counters (retries, resumes, ejections, spills, shed streams) are fed by the
routing event hooks in libs/upstream/metrics.py, on the same registry.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any, Final, Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

LATENCY_BUCKETS_S: Final = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 7.5, 10.0)
"""Time to first audio and total synthesis time: 10 ms to 10 s, finest where the targets are (< 300 ms)."""
INFERENCE_BUCKETS_S: Final = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.075, 0.1, 0.15, 0.25, 0.5, 1.0, 2.5, 5.0)
"""One model step: 1 ms (a GPU chunk) to 5 s (a long sentence on a busy CPU); 40 ms is one slice of audio."""
QUEUE_BUCKETS_S: Final = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.075, 0.1, 0.25, 0.5, 1.0, 2.5)
"""Waits before compute: sub-millisecond when idle, up to seconds when overloaded."""
BATCH_SIZE_BUCKETS: Final = (1, 2, 4, 8, 16, 32)
"""Jobs per model run."""

STAGE_PLAN: Final = "plan"
"""Acoustic text encoder + durations + prior for one sentence (never batched)."""
STAGE_CHUNK: Final = "chunk"
"""One chunk step as a stream sees it: acoustic flow + mel head, or vocoder windows of one mel slice."""
STAGE_BATCH: Final = "batch"
"""One batched model call of the dynamic batcher (only with batching on)."""


class BatchStatsLike(Protocol):
    """What `observe_batch` reads (libs.voice.batching.BatchStats)."""

    batch_size: int
    queue_s: tuple[float, ...]
    compute_s: float


class EndpointStatusLike(Protocol):
    """What `track_endpoints` reads (libs.routing.health.EndpointStatus)."""

    endpoint: Any
    """Has `.kind` ("acoustic" / "vocoder") and `.zone`."""
    available: bool


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
        self.unlistened_streams_total = Counter(
            f"tts_{service}_unlistened_streams_total",
            "Streams nobody listened to as their audio was made (prewarming, long-form jobs), whose steps ran "
            "on what the listeners' steps left.",
            registry=self.registry,
        )
        self.inference_seconds = Histogram(
            f"tts_{service}_inference_seconds",
            "Model time per step (stage: plan, chunk, or batch = one batched call when batching is on).",
            ["stage"],
            buckets=INFERENCE_BUCKETS_S,
            registry=self.registry,
        )
        self.step_cpu_seconds = Counter(
            f"tts_{service}_step_cpu_seconds",
            "CPU time of the inference thread in model steps, batching off (stage: plan or chunk; first_audio: "
            "true for the steps of a stream whose listener has heard nothing yet).",
            ["stage", "first_audio"],
            registry=self.registry,
        )
        self.queue_seconds = Histogram(
            f"tts_{service}_queue_seconds",
            "Time an inference job waits before its model run starts (inference thread, or the batcher when batching).",
            buckets=QUEUE_BUCKETS_S,
            registry=self.registry,
        )
        self.batch_size = Histogram(
            f"tts_{service}_batch_size",
            "Jobs per model run (1 for every run when batching is off).",
            buckets=BATCH_SIZE_BUCKETS,
            registry=self.registry,
        )
        self.realtime_capacity = Gauge(
            f"tts_{service}_realtime_capacity",
            "Audio seconds per second this worker can make (measured while busy, or pinned); 0 until known.",
            registry=self.registry,
        )
        self.realtime_demand = Gauge(
            f"tts_{service}_realtime_demand",
            "Audio seconds per second the open streams need (one per stream: each listener plays in real time).",
            registry=self.registry,
        )
        self.realtime_load = Gauge(
            f"tts_{service}_realtime_load",
            "Demand over capacity (ratio); 0 while the capacity is unknown. The autoscaler's target.",
            registry=self.registry,
        )

        self.precision = Gauge(
            f"tts_{service}_precision",
            "The arithmetic this worker's models run in: 1 for the one it serves (fp32 or bf16).",
            ["precision"],
            registry=self.registry,
        )
        self.voices_loaded = Gauge(
            f"tts_{service}_voices_loaded", "Voices whose models this worker holds in memory now.", registry=self.registry
        )
        self.voice_memory_bytes = Gauge(
            f"tts_{service}_voice_memory_bytes",
            "Resident memory the loaded voices took when they loaded (what --voice-memory-mb bounds).",
            registry=self.registry,
        )
        self.voice_changes_total = Counter(
            f"tts_{service}_voice_changes_total",
            "Voices loaded (change: load) and unloaded to make room (change: evict), by voice.",
            ["change", "voice"],
            registry=self.registry,
        )

    def serving_precision(self, precision: str) -> None:
        """The worker's models run in `precision` (settled once, as its first voice loads)."""
        self.precision.clear()
        self.precision.labels(precision=precision).set(1)

    def track_voices(self, loaded: Callable[[], int], memory_bytes: Callable[[], int]) -> None:
        """Read the voices held and their memory whenever the metrics are scraped."""
        self.voices_loaded.set_function(loaded)
        self.voice_memory_bytes.set_function(memory_bytes)

    def voice_changed(self, change: str, voice: str) -> None:
        """A voice shelf's `on_change` hook: `change` is load or evict."""
        self.voice_changes_total.labels(change=change, voice=voice).inc()

    def track_realtime(self, capacity: Callable[[], float], demand: Callable[[], float]) -> None:
        """Read capacity and demand (audio s per s) whenever the metrics are scraped."""
        self.realtime_capacity.set_function(capacity)
        self.realtime_demand.set_function(demand)
        self.realtime_load.set_function(lambda: demand() / capacity() if capacity() > 0 else 0.0)

    def observe_step(self, stage: str, queue_s: float, run_s: float, batched: bool) -> None:
        """One model step run by a stream on the inference thread.

        With batching off the step is the model run: its wait for the thread is the queue time and
        it is a batch of one. With batching on, queue time and batch size come from
        `observe_batch` instead, and the step's time includes its wait for the batch.
        """
        self.inference_seconds.labels(stage=stage).observe(run_s)
        if not batched:
            self.queue_seconds.observe(queue_s)
            if stage == STAGE_CHUNK:
                self.batch_size.observe(1)

    def observe_step_cpu(self, stage: str, first_audio: bool, cpu_s: float) -> None:
        """CPU time the inference thread spent in one unbatched step (with batching on, the stream's
        thread only waits: the batcher's thread does the work, for many streams at once)."""
        self.step_cpu_seconds.labels(stage=stage, first_audio="true" if first_audio else "false").inc(max(0.0, cpu_s))

    def observe_batch(self, stats: BatchStatsLike) -> None:
        """The dynamic batcher's `on_batch` callback: batch size, each job's queue time, compute time."""
        self.batch_size.observe(stats.batch_size)
        for queue_s in stats.queue_s:
            self.queue_seconds.observe(queue_s)
        self.inference_seconds.labels(stage=STAGE_BATCH).observe(stats.compute_s)


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
        self.mel_queue_seconds = Histogram(
            "tts_vocoder_mel_queue_seconds",
            "Queue time mel -> vocoder: from the vocoder taking a mel slice off its stream to the start of the step that vocodes it.",
            buckets=QUEUE_BUCKETS_S,
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
        self.inflight_streams = Gauge(
            "tts_gateway_inflight_streams",
            "Client calls open on this gateway right now.",
            registry=self.registry,
        )
        self.time_to_first_audio_seconds = Histogram(
            "tts_gateway_time_to_first_audio_seconds",
            "From a request's arrival to the first audio message sent to the client.",
            ["method"],
            buckets=LATENCY_BUCKETS_S,
            registry=self.registry,
        )
        self.synthesis_seconds = Histogram(
            "tts_gateway_synthesis_seconds",
            "From a request's arrival to its last audio message (requests that ended OK).",
            ["method"],
            buckets=LATENCY_BUCKETS_S,
            registry=self.registry,
        )
        self.audio_seconds_total = Counter(
            "tts_gateway_audio_seconds_total",
            "Seconds of audio sent to clients, by voice.",
            ["voice"],
            registry=self.registry,
        )
        self.voice_requests_total = Counter(
            "tts_gateway_voice_requests_total",
            "Synthesis requests by voice (voice usage).",
            ["voice"],
            registry=self.registry,
        )
        self.cache_operations_total = Counter(
            "tts_gateway_cache_operations_total",
            "Mel cache operations by outcome (hit, miss, error, corrupt, unauthentic, skipped, written, write_error; "
            "head_hit and head_written count the audio heads kept with the mel).",
            ["outcome"],
            registry=self.registry,
        )
        self.realtime_capacity = Gauge(
            "tts_gateway_realtime_capacity",
            "Listeners this gateway's admission takes now (audio s per s): the mesh's capacity as its workers say, "
            "times the admission headroom, times the share of it that what listeners heard lets it trust.",
            registry=self.registry,
        )
        self.realtime_share = Gauge(
            "tts_gateway_realtime_share",
            "Share of the workers' capacity admission trusts now: cut when listeners run dry under load, "
            "recovering while none does (1: all of it).",
            registry=self.registry,
        )
        self.listener_stall_seconds = Histogram(
            "tts_gateway_listener_stall_seconds",
            "Gaps listeners sat through: how long a player that starts at the first audio and plays in real time "
            "waited with an empty buffer before the next audio came (seconds).",
            buckets=(0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0),
            registry=self.registry,
        )
        self.fast_tier_cost = Gauge(
            "tts_gateway_fast_tier_cost",
            "What a listener of a voice's fast tier costs the mesh against one of its quality tier, from the workers' "
            "measurements (1: not known yet, or no fast tier).",
            registry=self.registry,
        )
        self.realtime_listeners = Gauge(
            "tts_gateway_realtime_listeners",
            "Listeners this gateway serves now (streams a listener waits for).",
            registry=self.registry,
        )
        self.auth_refusals_total = Counter(
            "tts_gateway_auth_refusals_total",
            "Client calls refused at the door for their API key, by reason (missing_key, malformed_header, "
            "unknown_key, rate_limited, stream_limit).",
            ["reason"],
            registry=self.registry,
        )

    def cache_outcome(self, outcome: str) -> None:
        """The mel cache's `on_outcome` hook."""
        self.cache_operations_total.labels(outcome=outcome).inc()

    def auth_refused(self, reason: str) -> None:
        """The API-key gate's `on_refused` hook."""
        self.auth_refusals_total.labels(reason=reason).inc()

    def track_realtime(self, capacity: Callable[[], float], listeners: Callable[[], int], share: Callable[[], float]) -> None:
        """Read the listeners admission takes, this gateway's listeners and the trusted share of the
        capacity whenever the metrics are scraped."""
        self.realtime_capacity.set_function(capacity)
        self.realtime_listeners.set_function(listeners)
        self.realtime_share.set_function(share)

    def listener_stalled(self, gap_s: float) -> None:
        """Admission's `on_stall` hook: a listener sat `gap_s` with an empty buffer."""
        self.listener_stall_seconds.observe(gap_s)

    def track_endpoints(self, statuses: Callable[[], Iterable[EndpointStatusLike]]) -> None:
        """Serve `tts_gateway_healthy_endpoints{kind,zone}` from `statuses()` at every scrape.

        `statuses` returns the `HealthTable.statuses()` of every worker kind; an endpoint counts
        while `available` (healthy and not ejected). Call once per gateway.
        """
        self.registry.register(_HealthyEndpointsCollector(statuses))


class _HealthyEndpointsCollector(Collector):
    """Available endpoints per worker kind and zone, read from the routing table when scraped."""

    NAME: Final = "tts_gateway_healthy_endpoints"

    def __init__(self, statuses: Callable[[], Iterable[EndpointStatusLike]]) -> None:
        self._statuses = statuses

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(self.NAME, "Worker endpoints the gateway may route to now.", labels=["kind", "zone"])
        counts: dict[tuple[str, str], int] = {}
        for status in self._statuses():
            key = (str(status.endpoint.kind), str(status.endpoint.zone))
            counts[key] = counts.get(key, 0) + int(bool(status.available))
        for (kind, zone), count in sorted(counts.items()):
            family.add_metric([kind, zone], float(count))
        yield family

    def describe(self) -> Iterator[GaugeMetricFamily]:
        yield GaugeMetricFamily(self.NAME, "", labels=["kind", "zone"])
