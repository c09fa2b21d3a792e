"""Zone-aware routing and failure policy of the gateway (DESIGN section 7), with no network code
except the health Watch.

- `endpoints`: `Endpoint(zone, address, kind)`, parsed from `ZONE=HOST:PORT[,...]`.
- `health`: `HealthTable` (grpc.health.v1 state, outstanding streams, passive outlier ejection with
  a growing ejection time) and `HealthWatcher` (keeps the table fresh from Health/Watch).
- `picker`: `Picker.pick(kind, exclude=..., failed_zones=...)`: local zone first, by load.
- `retry`: `RetryPolicy.decide(...)` (codes, attempts, full-jitter backoff, pushback, deadline) and
  `RetryBudget` (retries <= 10% of requests plus a floor).
- `events`: the `on_event(kind, zone, reason)` hook that metrics are wired to.

One request through these pieces (the gateway owns the stream and resume logic)::

    budget.record_request()
    tried, failed_zones, attempts = set(), set(), 0
    while True:
        endpoint = picker.pick("acoustic", exclude=tried, failed_zones=failed_zones)
        if endpoint is None:
            fail with UNAVAILABLE
        attempts += 1
        with table.track_stream(endpoint):
            outcome = run the attempt with timeout=remaining deadline
        if outcome.ok:
            table.record_success(endpoint); done
        if outcome.code in ENDPOINT_FAILURE_CODES:
            table.record_failure(endpoint)
        tried.add(endpoint); failed_zones.add(endpoint.zone)
        decision = policy.decide(attempts_made=attempts, code=outcome.code,
                                 trailing_metadata=outcome.trailers, remaining_s=deadline - now,
                                 zone=endpoint.zone)
        if not decision.retry:
            fail with outcome.code
        await asyncio.sleep(decision.delay_s)
"""

from libs.routing.endpoints import Endpoint, EndpointParseError, endpoints_from_env, parse_endpoint, parse_endpoint_list
from libs.routing.events import EventHook, ignore_event
from libs.routing.health import (
    ENDPOINT_FAILURE_CODES,
    EndpointStatus,
    HealthConfig,
    HealthTable,
    HealthWatcher,
    Serving,
    WatchConfig,
)
from libs.routing.picker import Picker, PickerConfig
from libs.routing.retry import (
    PUSHBACK_METADATA_KEY,
    RETRYABLE_CODES,
    Pushback,
    RetryBudget,
    RetryBudgetConfig,
    RetryConfig,
    RetryDecision,
    RetryPolicy,
    parse_pushback,
)

__all__ = [
    "ENDPOINT_FAILURE_CODES",
    "PUSHBACK_METADATA_KEY",
    "RETRYABLE_CODES",
    "Endpoint",
    "EndpointParseError",
    "EndpointStatus",
    "EventHook",
    "HealthConfig",
    "HealthTable",
    "HealthWatcher",
    "Picker",
    "PickerConfig",
    "Pushback",
    "RetryBudget",
    "RetryBudgetConfig",
    "RetryConfig",
    "RetryDecision",
    "RetryPolicy",
    "Serving",
    "WatchConfig",
    "endpoints_from_env",
    "ignore_event",
    "parse_endpoint",
    "parse_endpoint_list",
    "parse_pushback",
]
