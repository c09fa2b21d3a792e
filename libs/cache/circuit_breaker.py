"""A circuit breaker for a dependency the request path can live without (the Redis cache).

Closed: calls go through. After `failure_threshold` failures in a row it opens: calls are skipped
for `open_s`. Then it lets exactly one probe through (half-open); the probe's success closes it,
its failure opens it again. This keeps a dead Redis from costing every request a timeout.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

DEFAULT_FAILURE_THRESHOLD: Final = 3
"""Failed Redis calls in a row that open the breaker: a sick Redis costs at most this many timeouts."""
DEFAULT_OPEN_S: Final = 5.0
"""How long an open breaker skips Redis before one probe call decides whether it closes."""


class BreakerState(enum.Enum):
    """Where the breaker is."""

    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


@dataclass(frozen=True)
class BreakerConfig:
    """When the breaker opens and for how long."""

    failure_threshold: int = DEFAULT_FAILURE_THRESHOLD
    """Consecutive failures that open the breaker."""
    open_s: float = DEFAULT_OPEN_S
    """Seconds the breaker stays open before one probe is allowed."""


class CircuitBreaker:
    """Consecutive-failure breaker with a single half-open probe. Not thread-safe (one event loop)."""

    def __init__(self, config: BreakerConfig = BreakerConfig(), clock: Callable[[], float] = time.monotonic) -> None:
        self._config = config
        self._clock = clock
        self._state = BreakerState.CLOSED
        self._failures = 0
        self._opened_at = 0.0

    @property
    def state(self) -> BreakerState:
        """Current state (OPEN turns into HALF_OPEN only when a call asks, in `allow`)."""
        return self._state

    def allow(self) -> bool:
        """Whether a call may go to the dependency now; in half-open, only the first caller gets True."""
        if self._state is BreakerState.CLOSED:
            return True
        if self._state is BreakerState.OPEN and self._clock() - self._opened_at >= self._config.open_s:
            self._state = BreakerState.HALF_OPEN
            return True
        return False

    def record_success(self) -> None:
        """A call succeeded: close the breaker."""
        self._state = BreakerState.CLOSED
        self._failures = 0

    def record_failure(self) -> None:
        """A call failed: count it, and open the breaker at the threshold or after a failed probe."""
        self._failures += 1
        if self._state is BreakerState.HALF_OPEN or self._failures >= self._config.failure_threshold:
            self._state = BreakerState.OPEN
            self._opened_at = self._clock()
