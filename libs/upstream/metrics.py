"""Prometheus metrics of the gateway's routing: retries, resumes, ejections and shed requests.

They are fed by the routing library's event hooks (`hook_for(kind)`) and by the gateway's stream
code (`resumed`, `shed`), and registered on the gateway's own registry next to GatewayMetrics.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from libs.routing import events
from libs.routing.events import EventHook

SHED_GATEWAY_FULL: Final = "gateway_full"
"""The gateway already serves its maximum of concurrent streams."""
SHED_WORKERS_SATURATED: Final = "workers_saturated"
"""Every worker that could take the stream refused it with RESOURCE_EXHAUSTED."""
SHED_RETRY_BUDGET: Final = "retry_budget"
"""A worker refused and the retry budget had no token for another attempt."""
SHED_CLIENT_LIMIT: Final = "client_limit"
"""The client (its address) already has its maximum of streams open at this gateway."""
SHED_REALTIME: Final = "realtime"
"""One more listener would make the listeners the mesh serves run dry (libs.synthesis.admission)."""
SHED_PREEMPTED: Final = "preempted"
"""A stream of a client over its share of a full mesh, not yet audible, gave its place to another client's."""
START_TURN: Final = "turn"
"""A first sentence waiting for one of the gateway's turns to start on the workers (StartSlots)."""
START_HOLD: Final = "hold"
"""A listener's first piece held back until the audio it holds outlasts the wait for the next pieces."""
START_DELAY_BUCKETS_S: Final = (0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.35, 0.5, 0.75, 1.0, 1.5, 2.5, 5.0)


class RoutingMetrics:
    """Counters of routing decisions, by zone and reason."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.retries_total = Counter(
            "tts_gateway_retries_total",
            "Failed worker attempts that were retried, by the zone that failed and the gRPC code (lower case).",
            ["zone", "reason"],
            registry=self.registry,
        )
        self.retries_denied_total = Counter(
            "tts_gateway_retries_denied_total",
            "Retryable failures not retried, by zone and why (max_attempts, deadline, pushback_stop, budget).",
            ["zone", "reason"],
            registry=self.registry,
        )
        self.resumes_total = Counter(
            "tts_gateway_resumes_total",
            "Worker streams reopened on another endpoint mid-utterance, by kind, the zone that failed and the code.",
            ["kind", "zone", "reason"],
            registry=self.registry,
        )
        self.ejections_total = Counter(
            "tts_gateway_ejections_total",
            "Endpoints ejected after consecutive failures, by kind and zone.",
            ["kind", "zone"],
            registry=self.registry,
        )
        self.spills_total = Counter(
            "tts_gateway_spills_total",
            "Attempts sent outside the local zone, by kind, chosen zone and reason (local_unavailable, local_failed).",
            ["kind", "zone", "reason"],
            registry=self.registry,
        )
        self.shed_total = Counter(
            "tts_gateway_shed_total",
            "Client streams refused with RESOURCE_EXHAUSTED because the mesh had no room, by reason.",
            ["reason"],
            registry=self.registry,
        )
        self.streams_by_tier_total = Counter(
            "tts_gateway_streams_by_tier_total",
            "Client streams admitted, by the tier of the voice they are spoken in and the tier asked for "
            "(asked auto, spoken fast: moved to the fast tier because the mesh was too busy for quality).",
            ["tier", "asked"],
            registry=self.registry,
        )
        self.moved_to_fast_total = Counter(
            "tts_gateway_moved_to_fast_total",
            "Client streams playing in auto that moved to the fast tier from their next sentence, to make room "
            "for a new stream that would otherwise have been refused.",
            registry=self.registry,
        )
        self.room_wait_seconds = Histogram(
            "tts_gateway_room_wait_seconds",
            "Time a client stream that found the mesh full waited for room, by outcome: admitted, or refused "
            "(its wait ran out, or its caller went away).",
            ["outcome"],
            buckets=START_DELAY_BUCKETS_S,
            registry=self.registry,
        )
        self.streams_waiting_for_room = Gauge(
            "tts_gateway_streams_waiting_for_room",
            "Client streams waiting for room on a full mesh now (streams).",
            registry=self.registry,
        )
        self.retry_budget_tokens = Gauge(
            "tts_gateway_retry_budget_tokens",
            "Retries the gateway's retry budget would allow right now (tokens).",
            registry=self.registry,
        )
        self.streams_starting = Gauge(
            "tts_gateway_streams_starting",
            "Streams holding one of the gateway's turns to start on the workers now (streams).",
            registry=self.registry,
        )
        self.streams_waiting_to_start = Gauge(
            "tts_gateway_streams_waiting_to_start",
            "Streams waiting for a turn to start on the workers now (streams).",
            registry=self.registry,
        )
        self.start_delay_seconds = Histogram(
            "tts_gateway_start_delay_seconds",
            "Time a stream's first audio waited on purpose, by part: turn (for a turn to start on the workers), "
            "hold (its first piece held until the audio held outlasts the wait for the next pieces).",
            ["part"],
            buckets=START_DELAY_BUCKETS_S,
            registry=self.registry,
        )

    def hook_for(self, kind: str, also: Callable[[str, str, str], None] | None = None) -> EventHook:
        """The routing event hook of the `kind` ("acoustic"/"vocoder") endpoints; `also` sees every event too."""

        def on_event(event: str, zone: str, reason: str) -> None:
            if event == events.RETRY:
                self.retries_total.labels(zone=zone, reason=reason).inc()
            elif event == events.RETRY_DENIED:
                self.retries_denied_total.labels(zone=zone, reason=reason).inc()
            elif event == events.EJECTED:
                self.ejections_total.labels(kind=kind, zone=zone).inc()
            elif event == events.SPILL:
                self.spills_total.labels(kind=kind, zone=zone, reason=reason).inc()
            if also is not None:
                also(event, zone, reason)

        return on_event

    def resumed(self, kind: str, zone: str, reason: str) -> None:
        """A `kind` stream that failed in `zone` with `reason` is being reopened elsewhere."""
        self.resumes_total.labels(kind=kind, zone=zone, reason=reason).inc()

    def spoken_in(self, tier: str, asked: str) -> None:
        """A client stream was admitted in `tier`, having asked for `asked` ("" counts as "default")."""
        self.streams_by_tier_total.labels(tier=tier, asked=asked or "default").inc()

    def moved_to_fast(self, streams: int) -> None:
        """`streams` playing auto streams move to the fast tier from their next sentence."""
        self.moved_to_fast_total.inc(streams)

    def waited_for_room(self, admitted: bool, seconds: float) -> None:
        """A client stream refused for room waited `seconds` for it, and was `admitted` or not."""
        self.room_wait_seconds.labels(outcome="admitted" if admitted else "refused").observe(seconds)

    def shed(self, reason: str) -> None:
        """A client stream was refused for `reason` (one of the SHED_* words)."""
        self.shed_total.labels(reason=reason).inc()
