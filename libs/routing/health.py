"""Per-endpoint health: grpc.health.v1 state, outstanding streams, draining, and passive outlier ejection.

`HealthTable` is pure state (inject a clock; no network). `libs.routing.watcher.HealthWatcher`
keeps the table's serving state fresh from `grpc.health.v1.Health/Watch` streams.
"""

from __future__ import annotations

import enum
import math
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Final

import grpc

from libs.routing import events
from libs.routing.endpoints import Endpoint
from libs.routing.events import EventHook, ignore_event
from libs.settings.fields import setting

Clock = Callable[[], float]
"""Monotonic seconds; `time.monotonic` in production, a fake in tests."""

DEFAULT_CONSECUTIVE_FAILURES: Final = 5
DEFAULT_BASE_EJECTION_S: Final = 30.0
DEFAULT_MAX_EJECTION_S: Final = 300.0
DEFAULT_EJECTION_DECAY_S: Final = 60.0
DEFAULT_MAX_EJECTED_RATIO: Final = 0.5

ENDPOINT_FAILURE_CODES: Final = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.INTERNAL,
        grpc.StatusCode.UNKNOWN,
        grpc.StatusCode.DATA_LOSS,
    }
)
"""Codes that say the worker (not the request) is at fault, so they count towards ejection.

RESOURCE_EXHAUSTED is left out on purpose: an overloaded worker is alive and asks for pushback;
ejecting it would remove capacity exactly when load is highest.
"""


class Serving(enum.Enum):
    """An endpoint's health as grpc.health.v1 last reported it."""

    UNKNOWN = "unknown"
    SERVING = "serving"
    NOT_SERVING = "not_serving"


@dataclass(frozen=True)
class HealthConfig:
    """Outlier ejection and health rules for one gateway's endpoint table."""

    consecutive_failures: int = setting(
        DEFAULT_CONSECUTIVE_FAILURES, env="TTS_EJECTION_FAILURES", flag="--ejection-failures", unit="count", minimum=1,
        doc="failed attempts in a row (no success between) that eject a worker",
    )  # fmt: skip
    base_ejection_s: float = setting(
        DEFAULT_BASE_EJECTION_S, env="TTS_EJECTION_BASE_S", flag="--ejection-base-s", unit="s", minimum=0,
        doc="first ejection's length; the n-th recent one lasts n times this",
    )  # fmt: skip
    max_ejection_s: float = setting(
        DEFAULT_MAX_EJECTION_S, env="TTS_EJECTION_MAX_S", flag="--ejection-max-s", unit="s", minimum=0,
        doc="longest ejection",
    )  # fmt: skip
    ejection_decay_s: float = DEFAULT_EJECTION_DECAY_S
    """Each full period of this length after an ejection ends, without a new one, forgets one past ejection."""
    max_ejected_ratio: float = DEFAULT_MAX_EJECTED_RATIO
    """At most this share of a kind's endpoints is ejected at once (one may always be), so a gateway-side
    fault cannot eject the whole fleet."""
    route_unknown: bool = False
    """Whether endpoints whose health is not known yet (or whose Watch is down) may take traffic."""

    def __post_init__(self) -> None:
        if self.consecutive_failures < 1:
            raise ValueError("consecutive_failures must be at least 1")
        if self.base_ejection_s <= 0 or self.max_ejection_s < self.base_ejection_s:
            raise ValueError("need 0 < base_ejection_s <= max_ejection_s")
        if self.ejection_decay_s <= 0:
            raise ValueError("ejection_decay_s must be positive")
        if not 0.0 <= self.max_ejected_ratio <= 1.0:
            raise ValueError("max_ejected_ratio must be within [0, 1]")


@dataclass(frozen=True)
class EndpointStatus:
    """A read-only view of one endpoint's state at one instant."""

    endpoint: Endpoint
    """The endpoint described."""
    serving: Serving
    """Last reported grpc.health.v1 state."""
    outstanding_streams: int
    """Streams opened to it and not finished yet."""
    consecutive_failures: int
    """Failures since its last success (reset on un-ejection)."""
    ejection_count: int
    """Recent ejections, after decay; sets the length of the next one."""
    ejected_until_s: float | None
    """Clock time when the current ejection ends, or None when not ejected."""
    available: bool
    """Whether the picker may choose it now: healthy enough, not ejected and not draining."""
    stream_limit: int | None = None
    """Streams the worker says it takes at once (0: no limit), from its last admission; None until it admitted one."""
    draining: bool = False
    """Whether discovery says the worker is going away (terminating, or gone from its name): it takes
    no new streams and finishes the ones it has."""


class _State:
    """Mutable per-endpoint record; only touched under the table's lock."""

    def __init__(self) -> None:
        self.serving = Serving.UNKNOWN
        self.outstanding_streams = 0
        self.stream_limit: int | None = None
        self.consecutive_failures = 0
        self.ejection_count = 0
        self.ejected_until_s: float | None = None
        self.last_ejection_end_s: float | None = None
        self.draining = False


class HealthTable:
    """Health, load and ejection state of every endpoint; thread-safe, and safe to use from asyncio code."""

    def __init__(
        self,
        endpoints: Iterable[Endpoint],
        config: HealthConfig = HealthConfig(),
        clock: Clock = time.monotonic,
        on_event: EventHook = ignore_event,
    ) -> None:
        self._config = config
        self._clock = clock
        self._on_event = on_event
        self._lock = threading.Lock()
        self._states: dict[Endpoint, _State] = {endpoint: _State() for endpoint in endpoints}

    @property
    def config(self) -> HealthConfig:
        """The rules this table applies."""
        return self._config

    @property
    def endpoints(self) -> tuple[Endpoint, ...]:
        """Every endpoint the table tracks, in insertion order."""
        return tuple(self._states)

    def add(self, endpoint: Endpoint) -> bool:
        """Track a newly discovered endpoint (health UNKNOWN until its Watch answers); a draining one
        that came back takes streams again. True if the endpoint was not tracked before."""
        with self._lock:
            state = self._states.get(endpoint)
            if state is not None:
                state.draining = False
                return False
            self._states[endpoint] = _State()
            return True

    def drain(self, endpoint: Endpoint) -> None:
        """Stop giving the endpoint new streams; the ones it has go on until they finish."""
        with self._lock:
            self._state(endpoint).draining = True

    def remove_drained(self) -> list[Endpoint]:
        """Forget every draining endpoint that has no outstanding stream left; returns them."""
        with self._lock:
            gone = [endpoint for endpoint, state in self._states.items() if state.draining and state.outstanding_streams == 0]
            for endpoint in gone:
                del self._states[endpoint]
        return gone

    def set_serving(self, endpoint: Endpoint, serving: Serving) -> None:
        """Record the endpoint's grpc.health.v1 state (from a Watch, or UNKNOWN when the Watch is down)."""
        with self._lock:
            state = self._states.get(endpoint)
            if state is None:  # removed while its Watch was still delivering
                return
            changed = state.serving is not serving
            state.serving = serving
        if changed:
            events.emit(self._on_event, events.HEALTH_CHANGED, endpoint.zone, serving.value)

    def stream_started(self, endpoint: Endpoint) -> None:
        """Count one more outstanding stream on the endpoint (call when the attempt opens its stream)."""
        with self._lock:
            self._state(endpoint).outstanding_streams += 1

    def stream_finished(self, endpoint: Endpoint) -> None:
        """Count one fewer outstanding stream (call exactly once per `stream_started`, however it ended)."""
        with self._lock:
            state = self._state(endpoint)
            if state.outstanding_streams == 0:
                raise RuntimeError(f"stream_finished without stream_started on {endpoint}")
            state.outstanding_streams -= 1

    def set_stream_limit(self, endpoint: Endpoint, limit: int) -> None:
        """Record how many streams the endpoint says it takes at once (0: no limit)."""
        with self._lock:
            state = self._states.get(endpoint)
            if state is not None:  # None: drained and forgotten since the stream opened
                state.stream_limit = limit

    def record_success(self, endpoint: Endpoint) -> None:
        """An attempt on the endpoint succeeded: its consecutive failure count starts again from zero."""
        with self._lock:
            state = self._states.get(endpoint)
            if state is not None:  # None: drained and forgotten since the attempt ended
                state.consecutive_failures = 0

    def record_failure(self, endpoint: Endpoint) -> bool:
        """An attempt failed because of the endpoint (see ENDPOINT_FAILURE_CODES); True if this ejected it."""
        pending: list[tuple[str, str, str]] = []
        with self._lock:
            now = self._clock()
            self._expire_ejections(now, pending)
            state = self._states.get(endpoint)
            if state is None:  # drained and forgotten since the attempt ended: nothing left to eject
                return False
            state.consecutive_failures += 1
            ejected = False
            if state.ejected_until_s is None and state.consecutive_failures >= self._config.consecutive_failures:
                if self._may_eject(endpoint.kind):
                    self._eject(state, now)
                    ejected = True
                    pending.append((events.EJECTED, endpoint.zone, "consecutive_failures"))
                else:
                    pending.append((events.EJECTION_SKIPPED, endpoint.zone, "max_ejected_ratio"))
        self._emit_all(pending)
        return ejected

    def status(self, endpoint: Endpoint) -> EndpointStatus:
        """The endpoint's state now (ejections that have run out are lifted first)."""
        pending: list[tuple[str, str, str]] = []
        with self._lock:
            self._expire_ejections(self._clock(), pending)
            view = self._view(endpoint, self._state(endpoint))
        self._emit_all(pending)
        return view

    def statuses(self, kind: str | None = None) -> list[EndpointStatus]:
        """The state now of every endpoint, or of every endpoint of `kind`."""
        pending: list[tuple[str, str, str]] = []
        with self._lock:
            self._expire_ejections(self._clock(), pending)
            views = [
                self._view(endpoint, state)
                for endpoint, state in self._states.items()
                if kind is None or endpoint.kind == kind
            ]
        self._emit_all(pending)
        return views

    def is_available(self, endpoint: Endpoint) -> bool:
        """Whether the endpoint may take a new stream now (False for one the table no longer tracks)."""
        with self._lock:
            if endpoint not in self._states:
                return False
        return self.status(endpoint).available

    def tracks(self, endpoint: Endpoint) -> bool:
        """Whether the endpoint is in the table (discovered, or draining and not yet forgotten)."""
        with self._lock:
            return endpoint in self._states

    def _state(self, endpoint: Endpoint) -> _State:
        try:
            return self._states[endpoint]
        except KeyError:
            raise KeyError(f"{endpoint} is not in this health table") from None

    def _view(self, endpoint: Endpoint, state: _State) -> EndpointStatus:
        healthy = state.serving is Serving.SERVING or (state.serving is Serving.UNKNOWN and self._config.route_unknown)
        return EndpointStatus(
            endpoint=endpoint,
            serving=state.serving,
            outstanding_streams=state.outstanding_streams,
            stream_limit=state.stream_limit,
            consecutive_failures=state.consecutive_failures,
            ejection_count=state.ejection_count,
            ejected_until_s=state.ejected_until_s,
            available=healthy and state.ejected_until_s is None and not state.draining,
            draining=state.draining,
        )

    def _may_eject(self, kind: str) -> bool:
        same_kind = [state for endpoint, state in self._states.items() if endpoint.kind == kind and not state.draining]
        ejected = sum(1 for state in same_kind if state.ejected_until_s is not None)
        allowed = max(1, math.floor(self._config.max_ejected_ratio * len(same_kind)))
        return ejected < allowed

    def _eject(self, state: _State, now: float) -> None:
        config = self._config
        if state.last_ejection_end_s is not None:
            # Forget one past ejection per quiet decay period, so an endpoint that recovered for good
            # is not punished for old incidents, while a flapping one keeps growing its ejection time.
            quiet_periods = math.floor(max(0.0, now - state.last_ejection_end_s) / config.ejection_decay_s)
            state.ejection_count = max(0, state.ejection_count - quiet_periods)
        state.ejection_count += 1
        duration_s = min(config.max_ejection_s, config.base_ejection_s * state.ejection_count)
        state.ejected_until_s = now + duration_s
        state.last_ejection_end_s = state.ejected_until_s

    def _expire_ejections(self, now: float, pending: list[tuple[str, str, str]]) -> None:
        for endpoint, state in self._states.items():
            if state.ejected_until_s is not None and now >= state.ejected_until_s:
                state.ejected_until_s = None
                # A returning endpoint must fail a full run again before it is ejected again.
                state.consecutive_failures = 0
                pending.append((events.UNEJECTED, endpoint.zone, "ejection_expired"))

    def _emit_all(self, pending: list[tuple[str, str, str]]) -> None:
        # Hooks run outside the lock, so a hook that reads the table cannot deadlock.
        for kind, zone, reason in pending:
            events.emit(self._on_event, kind, zone, reason)
