"""Which worker each attempt of one piece of work goes to, and whether a failed attempt is retried.

`Attempts` is the request loop (docs/ARCHITECTURE.md, "Routing and retries") for one sentence on one kind of worker, without the
network: the gateway's stream code asks it for an endpoint, runs the attempt, and reports the
outcome. It applies the routing library's rules: local zone first by load (the picker), zones
where this sentence already failed only as a last resort, passive ejection on worker faults, at
most `max_attempts` attempts, full-jitter backoff or the worker's pushback, and the gateway-wide
retry budget.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import grpc

from libs.routing.endpoints import Endpoint
from libs.routing.health import ENDPOINT_FAILURE_CODES, HealthTable
from libs.routing.picker import Picker
from libs.routing.retry import RetryDecision, RetryPolicy

Trailers = Iterable[tuple[str, str | bytes]] | None


@dataclass(frozen=True)
class AttemptFailure:
    """How one attempt ended badly."""

    code: grpc.StatusCode
    """The worker's status, or DEADLINE_EXCEEDED when it went silent past the attempt timeout."""
    details: str
    """A short description for logs and the client's message."""
    trailers: Trailers = None
    """The call's trailing metadata (may carry a retry pushback)."""


class Attempts:
    """Endpoint choice and retry decisions for one sentence on one kind of worker."""

    def __init__(
        self,
        kind: str,
        table: HealthTable,
        picker: Picker,
        policy: RetryPolicy,
        eligible: Callable[[Endpoint], bool] = lambda endpoint: True,
        preferred: Callable[[Endpoint], bool] = lambda endpoint: True,
    ) -> None:
        """Only `eligible` endpoints are tried; among those not tried yet, `preferred` ones first
        (e.g. those holding the voice in memory), whatever their zone."""
        self.kind = kind
        self._table = table
        self._picker = picker
        self._policy = policy
        self._eligible = eligible
        self._preferred = preferred
        self.made = 0
        """Attempts made so far for the current piece of work."""
        self.tried: set[Endpoint] = set()
        self.failed_zones: set[str] = set()
        self.last_failure: AttemptFailure | None = None
        self.refusal: AttemptFailure | None = None
        """The last RESOURCE_EXHAUSTED of this piece of work: a worker that had no room for it."""

    def choose(self) -> Endpoint | None:
        """The endpoint for the next attempt (counted as made), or None when no endpoint may take it."""
        statuses = self._table.statuses(self.kind)
        excluded = self.tried | {status.endpoint for status in statuses if not self._eligible(status.endpoint)}
        others = {status.endpoint for status in statuses if not self._preferred(status.endpoint)}
        endpoint = self._picker.pick(self.kind, exclude=excluded | others, failed_zones=self.failed_zones)
        if endpoint is None and others - excluded:
            endpoint = self._picker.pick(self.kind, exclude=excluded, failed_zones=self.failed_zones)
        if endpoint is not None:
            self.made += 1
        return endpoint

    def failed(self, endpoint: Endpoint, failure: AttemptFailure, remaining_s: float | None, budgeted: bool = True) -> RetryDecision:
        """Record a failed attempt on `endpoint`; the decision says whether (and after how long) to retry
        (`budgeted` False: a retry would not spend the retry budget)."""
        if failure.code in ENDPOINT_FAILURE_CODES:
            self._table.record_failure(endpoint)
        self.tried.add(endpoint)
        self.failed_zones.add(endpoint.zone)
        self.last_failure = failure
        if failure.code is grpc.StatusCode.RESOURCE_EXHAUSTED:
            self.refusal = failure
        return self._policy.decide(
            attempts_made=self.made,
            code=failure.code,
            trailing_metadata=failure.trailers,
            remaining_s=remaining_s,
            zone=endpoint.zone,
            budgeted=budgeted,
        )

    def succeeded(self, endpoint: Endpoint) -> None:
        """The piece of work finished on `endpoint`; the next one starts with a fresh attempt count."""
        self._table.record_success(endpoint)
        self.reset()

    def reset(self) -> None:
        """Start counting attempts for a new piece of work (a new sentence)."""
        self.made = 0
        self.tried.clear()
        self.failed_zones.clear()
        self.last_failure = self.refusal = None
