"""When and how long to wait before retrying a failed attempt, and the budget that caps retries.

Retries happen only at the gateway. A retry needs: a retryable code, attempts left, no "stop"
pushback from the server, enough deadline left for a useful attempt, and a token from the budget.
"""

from __future__ import annotations

import random
import re
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Final

import grpc

from libs.routing import events
from libs.routing.events import EventHook, ignore_event
from libs.settings.fields import setting
from libs.wire.headers import PUSHBACK_METADATA_KEY

RETRYABLE_CODES: Final = frozenset(
    {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.RESOURCE_EXHAUSTED}
)
"""The only codes worth another attempt; anything else (INVALID_ARGUMENT, NOT_FOUND, ...) is final."""


DEFAULT_MAX_ATTEMPTS: Final = 3
DEFAULT_BASE_BACKOFF_S: Final = 0.05
DEFAULT_MAX_BACKOFF_S: Final = 1.0
DEFAULT_MIN_ATTEMPT_TIME_S: Final = 0.05

DEFAULT_RETRY_RATIO: Final = 0.1
DEFAULT_MIN_RETRIES_PER_S: Final = 1.0
DEFAULT_MAX_RETRY_TOKENS: Final = 10.0

_PUSHBACK_VALUE: Final = re.compile(r"^[0-9]{1,10}$")
_TOKEN_EPSILON: Final = 1e-9  # ten deposits of 0.1 sum to 0.999...; they must still buy a retry


@dataclass(frozen=True)
class RetryConfig:
    """Attempt limit and backoff of the gateway's retries."""

    max_attempts: int = setting(
        DEFAULT_MAX_ATTEMPTS, env="TTS_MAX_ATTEMPTS", unit="count", minimum=1,
        doc="attempts per sentence and per worker kind, the first one included",
    )  # fmt: skip
    base_backoff_s: float = setting(
        DEFAULT_BASE_BACKOFF_S, env="TTS_RETRY_BASE_BACKOFF_S", flag="--retry-base-backoff-s", unit="s", minimum=0,
        doc="backoff ceiling before the first retry; it doubles for each later one (full jitter below it)",
    )  # fmt: skip
    max_backoff_s: float = setting(
        DEFAULT_MAX_BACKOFF_S, env="TTS_RETRY_MAX_BACKOFF_S", flag="--retry-max-backoff-s", unit="s", minimum=0,
        doc="cap on the backoff ceiling (a worker's pushback may ask for longer and is honoured)",
    )  # fmt: skip
    min_attempt_time_s: float = DEFAULT_MIN_ATTEMPT_TIME_S
    """A retry must leave at least this much of the deadline for the new attempt, or it is not made."""

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        if self.base_backoff_s < 0 or self.max_backoff_s < self.base_backoff_s:
            raise ValueError("need 0 <= base_backoff_s <= max_backoff_s")
        if self.min_attempt_time_s < 0:
            raise ValueError("min_attempt_time_s must not be negative")


@dataclass(frozen=True)
class RetryBudgetConfig:
    """The retry budget: retries stay within retry_ratio of requests, plus a small floor."""

    retry_ratio: float = setting(
        DEFAULT_RETRY_RATIO, env="TTS_RETRY_RATIO", unit="retries per request", minimum=0, maximum=1,
        doc="the retry budget: each client request earns this many retry tokens; a retry costs one",
    )  # fmt: skip
    min_retries_per_s: float = setting(
        DEFAULT_MIN_RETRIES_PER_S, env="TTS_RETRY_FLOOR_PER_S", flag="--retry-floor-per-s", unit="1/s", minimum=0,
        doc="retry tokens earned per second regardless of traffic, so a quiet gateway can still retry",
    )  # fmt: skip
    max_tokens: float = setting(
        DEFAULT_MAX_RETRY_TOKENS, env="TTS_RETRY_MAX_TOKENS", flag="--retry-max-tokens", unit="tokens", minimum=1,
        doc="most retry tokens held at once: the largest burst of retries after a healthy spell",
    )  # fmt: skip

    def __post_init__(self) -> None:
        if not 0.0 <= self.retry_ratio <= 1.0:
            raise ValueError("retry_ratio must be within [0, 1]")
        if self.min_retries_per_s < 0:
            raise ValueError("min_retries_per_s must not be negative")
        if self.max_tokens < 1:
            raise ValueError("max_tokens must be at least 1, or no retry could ever be paid for")


class RetryBudget:
    """A token bucket that caps retries at `retry_ratio` of requests plus a floor; thread-safe.

    Over any span of T seconds, retries <= retry_ratio * requests + max_tokens + min_retries_per_s * T.
    Unlike gRPC's retryThrottling (which spends tokens on failures and so bounds the failure ratio),
    this bucket is filled by requests and drained by retries, so it bounds the retry ratio itself,
    which is what protects a failing zone from multiplied load.
    """

    def __init__(self, config: RetryBudgetConfig = RetryBudgetConfig(), clock: Callable[[], float] = time.monotonic) -> None:
        self._config = config
        self._clock = clock
        self._lock = threading.Lock()
        self._tokens = config.max_tokens
        self._refilled_at_s = clock()

    def record_request(self) -> None:
        """Count one client request (its first attempt); call once per request, not per retry."""
        with self._lock:
            self._refill()
            self._tokens = min(self._config.max_tokens, self._tokens + self._config.retry_ratio)

    def try_spend_retry(self) -> bool:
        """Take one retry token if there is one; False means the budget is spent and the retry must not run."""
        with self._lock:
            self._refill()
            if self._tokens >= 1.0 - _TOKEN_EPSILON:
                self._tokens = max(0.0, self._tokens - 1.0)
                return True
            return False

    def tokens(self) -> float:
        """Retry tokens available now (for metrics)."""
        with self._lock:
            self._refill()
            return self._tokens

    def _refill(self) -> None:
        now = self._clock()
        elapsed_s = max(0.0, now - self._refilled_at_s)
        self._refilled_at_s = now
        self._tokens = min(self._config.max_tokens, self._tokens + elapsed_s * self._config.min_retries_per_s)


@dataclass(frozen=True)
class Pushback:
    """A server's `grpc-retry-pushback-ms` hint."""

    delay_s: float | None
    """Wait exactly this long before retrying; None means the server asked not to be retried."""


def parse_pushback(trailing_metadata: Iterable[tuple[str, str | bytes]] | None) -> Pushback | None:
    """The pushback hint in a call's trailing metadata, or None if the server gave none.

    A non-negative decimal integer is a delay in ms; a negative or unparseable value (or several
    values for the key) means "do not retry", as gRPC's retry design specifies.
    """
    if trailing_metadata is None:
        return None
    values = [value for key, value in trailing_metadata if key.lower() == PUSHBACK_METADATA_KEY]
    if not values:
        return None
    if len(values) > 1:
        return Pushback(delay_s=None)
    value = values[0]
    text = value.decode("ascii", errors="replace") if isinstance(value, bytes) else value
    if not _PUSHBACK_VALUE.match(text):
        return Pushback(delay_s=None)
    return Pushback(delay_s=int(text) / 1000.0)


@dataclass(frozen=True)
class RetryDecision:
    """Whether to retry a failed attempt and how long to wait first."""

    retry: bool
    """True: wait `delay_s`, then make another attempt."""
    delay_s: float
    """Seconds to sleep before the next attempt (0 when not retrying)."""
    reason: str
    """Why: "backoff", "pushback", or why not: "not_retryable", "max_attempts", "pushback_stop", "deadline", "budget"."""


class RetryPolicy:
    """Decides, after each failed attempt, whether and when to retry (exponential backoff, full jitter)."""

    def __init__(
        self,
        config: RetryConfig = RetryConfig(),
        budget: RetryBudget | None = None,
        rng: random.Random | None = None,
        on_event: EventHook = ignore_event,
    ) -> None:
        self._config = config
        self._budget = budget
        self._rng = rng if rng is not None else random.Random()
        self._on_event = on_event

    @property
    def config(self) -> RetryConfig:
        """The limits this policy applies."""
        return self._config

    @staticmethod
    def is_retryable(code: grpc.StatusCode) -> bool:
        """Whether `code` is one of RETRYABLE_CODES."""
        return code in RETRYABLE_CODES

    def backoff_ceiling_s(self, retry_index: int) -> float:
        """min(max_backoff_s, base_backoff_s * 2**retry_index); retry_index 0 is the first retry."""
        exponent = min(retry_index, 62)  # beyond this the cap has long applied
        return min(self._config.max_backoff_s, self._config.base_backoff_s * 2.0**exponent)

    def backoff_s(self, retry_index: int) -> float:
        """A full-jitter backoff: uniform(0, backoff_ceiling_s(retry_index))."""
        return self._rng.uniform(0.0, self.backoff_ceiling_s(retry_index))

    def decide(
        self,
        *,
        attempts_made: int,
        code: grpc.StatusCode,
        trailing_metadata: Iterable[tuple[str, str | bytes]] | None = None,
        remaining_s: float | None = None,
        zone: str = "",
        budgeted: bool = True,
    ) -> RetryDecision:
        """Decide after attempt number `attempts_made` (1 = the first) failed with `code`.

        `remaining_s` is the time left to the request's deadline (None: no deadline); the returned
        delay never runs past it. `zone` is where the attempt failed, for the event hook. A budget
        token is spent only when everything else allows the retry, and only if `budgeted` (a caller
        moving admitted work off a worker that is gone adds no load, and says so).
        """
        if not self.is_retryable(code):
            return RetryDecision(retry=False, delay_s=0.0, reason="not_retryable")
        if attempts_made >= self._config.max_attempts:
            return self._deny("max_attempts", zone)
        pushback = parse_pushback(trailing_metadata)
        if pushback is not None and pushback.delay_s is None:
            return self._deny("pushback_stop", zone)
        usable_s = None if remaining_s is None else remaining_s - self._config.min_attempt_time_s
        if pushback is not None and pushback.delay_s is not None:
            delay_s, reason = pushback.delay_s, "pushback"
            if usable_s is not None and delay_s > usable_s:
                return self._deny("deadline", zone)
        else:
            ceiling_s = self.backoff_ceiling_s(attempts_made - 1)
            if usable_s is not None:
                if usable_s < 0:
                    return self._deny("deadline", zone)
                # Draw below what the deadline allows rather than give up on an unlucky draw.
                ceiling_s = min(ceiling_s, usable_s)
            delay_s, reason = self._rng.uniform(0.0, ceiling_s), "backoff"
        if budgeted and self._budget is not None and not self._budget.try_spend_retry():
            return self._deny("budget", zone)
        events.emit(self._on_event, events.RETRY, zone, code.name.lower())
        return RetryDecision(retry=True, delay_s=delay_s, reason=reason)

    def _deny(self, reason: str, zone: str) -> RetryDecision:
        events.emit(self._on_event, events.RETRY_DENIED, zone, reason)
        return RetryDecision(retry=False, delay_s=0.0, reason=reason)
