"""Per-endpoint health: grpc.health.v1 state, outstanding streams, and passive outlier ejection.

`HealthTable` is pure state (inject a clock; no network). `HealthWatcher` keeps the table's
serving state fresh from `grpc.health.v1.Health/Watch` streams over the gateway's channels.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import math
import random
import threading
import time
from dataclasses import dataclass
from typing import Callable, Final, Iterable, Mapping

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from libs.routing import events
from libs.routing.endpoints import Endpoint
from libs.routing.events import EventHook, ignore_event
from libs.settings.fields import setting

_log = logging.getLogger(__name__)

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
    """Whether the picker may choose it now: healthy enough and not ejected."""


class _State:
    """Mutable per-endpoint record; only touched under the table's lock."""

    def __init__(self) -> None:
        self.serving = Serving.UNKNOWN
        self.outstanding_streams = 0
        self.consecutive_failures = 0
        self.ejection_count = 0
        self.ejected_until_s: float | None = None
        self.last_ejection_end_s: float | None = None


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

    def set_serving(self, endpoint: Endpoint, serving: Serving) -> None:
        """Record the endpoint's grpc.health.v1 state (from a Watch, or UNKNOWN when the Watch is down)."""
        with self._lock:
            state = self._state(endpoint)
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

    def record_success(self, endpoint: Endpoint) -> None:
        """An attempt on the endpoint succeeded: its consecutive failure count starts again from zero."""
        with self._lock:
            self._state(endpoint).consecutive_failures = 0

    def record_failure(self, endpoint: Endpoint) -> bool:
        """An attempt failed because of the endpoint (see ENDPOINT_FAILURE_CODES); True if this ejected it."""
        pending: list[tuple[str, str, str]] = []
        with self._lock:
            now = self._clock()
            self._expire_ejections(now, pending)
            state = self._state(endpoint)
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
        """Whether the endpoint may take a new stream now."""
        return self.status(endpoint).available

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
            consecutive_failures=state.consecutive_failures,
            ejection_count=state.ejection_count,
            ejected_until_s=state.ejected_until_s,
            available=healthy and state.ejected_until_s is None,
        )

    def _may_eject(self, kind: str) -> bool:
        same_kind = [state for endpoint, state in self._states.items() if endpoint.kind == kind]
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


DEFAULT_WATCH_RECONNECT_BASE_S: Final = 0.2
DEFAULT_WATCH_RECONNECT_MAX_S: Final = 5.0

_SERVING_FROM_PROTO: Final = {
    health_pb2.HealthCheckResponse.SERVING: Serving.SERVING,
    health_pb2.HealthCheckResponse.NOT_SERVING: Serving.NOT_SERVING,
}


@dataclass(frozen=True)
class WatchConfig:
    """How the gateway watches its workers' grpc.health.v1 state."""

    service_name: str = ""
    """Health service name to watch; "" is the whole server."""
    reconnect_base_s: float = DEFAULT_WATCH_RECONNECT_BASE_S
    """Backoff base after a failed Watch; the n-th failure in a row waits uniform(0, min(max, base*2^n))."""
    reconnect_max_s: float = DEFAULT_WATCH_RECONNECT_MAX_S
    """Backoff cap between Watch attempts."""


class HealthWatcher:
    """Runs one grpc.health.v1 Watch per endpoint and writes what it hears into a HealthTable.

    The watcher borrows the channels: the gateway owns them and stops the watcher before closing
    them. A Watch that breaks after it had delivered a status is reopened after a short pause
    without touching the state, so a routine connection recycle (GOAWAY, max connection age) does
    not flap the endpoint. If reopening fails, the endpoint is set to UNKNOWN and the Watch is
    retried with full-jitter backoff. A hung connection is not detected here; passive ejection and
    channel keepalive cover that. The channel's own reconnect backoff (grpc.initial_reconnect_backoff_ms,
    1 s by default) also bounds how soon a restarted worker is seen again.
    """

    def __init__(
        self,
        table: HealthTable,
        channels: Mapping[Endpoint, grpc.aio.Channel],
        config: WatchConfig = WatchConfig(),
        rng: random.Random | None = None,
        on_event: EventHook = ignore_event,
    ) -> None:
        self._table = table
        self._channels = dict(channels)
        self._config = config
        self._rng = rng if rng is not None else random.Random()
        self._on_event = on_event
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        """Start one Watch task per endpoint on the running event loop."""
        if self._tasks:
            raise RuntimeError("HealthWatcher already started")
        for endpoint, channel in self._channels.items():
            task = asyncio.get_running_loop().create_task(self._watch_forever(endpoint, channel), name=f"health-watch {endpoint}")
            self._tasks.append(task)

    async def stop(self) -> None:
        """Cancel every Watch and wait for the tasks to end."""
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def __aenter__(self) -> HealthWatcher:
        self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    async def _watch_forever(self, endpoint: Endpoint, channel: grpc.aio.Channel) -> None:
        stub = health_pb2_grpc.HealthStub(channel)
        request = health_pb2.HealthCheckRequest(service=self._config.service_name)
        failures_in_a_row = 0
        while True:
            call = stub.Watch(request)
            delivered = False
            code = grpc.StatusCode.OK
            try:
                async for response in call:
                    delivered = True
                    self._table.set_serving(endpoint, _SERVING_FROM_PROTO.get(response.status, Serving.UNKNOWN))
                # The server ended the stream cleanly (e.g. shutting down): treat it like a break.
                code = grpc.StatusCode.UNAVAILABLE
            except grpc.aio.AioRpcError as error:
                code = error.code()
            except Exception:  # e.g. a channel closed under us: keep watching with backoff, never die silently
                _log.exception("health Watch on %s failed", endpoint)
                code = grpc.StatusCode.UNKNOWN
            finally:
                call.cancel()
            events.emit(self._on_event, events.WATCH_BROKEN, endpoint.zone, code.name.lower())
            if code is grpc.StatusCode.UNIMPLEMENTED and failures_in_a_row == 0:
                _log.warning("%s has no grpc.health.v1 service; it stays unroutable", endpoint)
            if delivered:
                # Keep the last state and reopen soon; the short pause stops a server that
                # answers and hangs up in a loop from turning this into a busy loop.
                failures_in_a_row = 0
                await asyncio.sleep(self._rng.uniform(0.0, self._config.reconnect_base_s))
                continue
            self._table.set_serving(endpoint, Serving.UNKNOWN)
            ceiling_s = min(self._config.reconnect_max_s, self._config.reconnect_base_s * 2.0**failures_in_a_row)
            failures_in_a_row = min(failures_in_a_row + 1, 32)  # keeps 2**n finite
            await asyncio.sleep(self._rng.uniform(0.0, ceiling_s))
