"""The gateway's routing and failure-handling knobs (DESIGN §7), read from the environment.

Every value has a production default chosen below; tests and deployments override them with the
`TTS_*` variables named in `ROUTING_ENV`. Nothing here opens a connection: `channel_options` is the
only place that turns settings into gRPC channel arguments.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields
from typing import Any, Callable, Final, Mapping

from libs.mesh.server import CHANNEL_OPTIONS
from libs.routing.health import DEFAULT_BASE_EJECTION_S, DEFAULT_CONSECUTIVE_FAILURES, DEFAULT_MAX_EJECTION_S
from libs.routing.retry import (
    DEFAULT_BASE_BACKOFF_S,
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_MAX_BACKOFF_S,
    DEFAULT_MAX_RETRY_TOKENS,
    DEFAULT_MIN_RETRIES_PER_S,
    DEFAULT_RETRY_RATIO,
)

# A healthy worker answers a pending request within tens of milliseconds (one chunk); a saturated
# one with a full inference queue within a couple of seconds. Five seconds of silence while a
# worker owes an answer means it is hung, and still leaves room for two more attempts inside a
# typical 30 s client deadline.
DEFAULT_ATTEMPT_TIMEOUT_S: Final = 5.0
# A CPU gateway process relays ~25 slices/s per stream; a few hundred streams keep it well below
# one core, and beyond that queueing in the gateway only adds latency the client would rather
# spend retrying another gateway.
DEFAULT_MAX_STREAMS: Final = 256
# Keepalive at 20 s stays above the workers' 10 s minimum ping interval (faster pings earn a
# GOAWAY) and, with a 5 s ack timeout, drops a dead connection that sends no RST in under 30 s.
DEFAULT_KEEPALIVE_TIME_MS: Final = 20_000
DEFAULT_KEEPALIVE_TIMEOUT_MS: Final = 5_000
# gRPC's default reconnect backoff grows to 120 s: a worker restarted after a crash loop would sit
# idle for minutes. Capping it at 2 s costs a loopback/cluster dial every 2 s per dead endpoint.
DEFAULT_RECONNECT_INITIAL_MS: Final = 250
DEFAULT_RECONNECT_MAX_MS: Final = 2_000
DEFAULT_CONNECT_TIMEOUT_MS: Final = 2_000


@dataclass(frozen=True)
class RoutingSettings:
    """How one gateway picks workers, times out attempts, retries, ejects and sheds load."""

    attempt_timeout_s: float = DEFAULT_ATTEMPT_TIMEOUT_S
    """Longest silence from a worker that owes an answer before the attempt is abandoned (seconds)."""
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    """Attempts per sentence and per stream kind, the first one included."""
    base_backoff_s: float = DEFAULT_BASE_BACKOFF_S
    """Backoff ceiling before the first retry; doubles per retry, full jitter below it (seconds)."""
    max_backoff_s: float = DEFAULT_MAX_BACKOFF_S
    """Cap on the backoff ceiling (seconds)."""
    retry_ratio: float = DEFAULT_RETRY_RATIO
    """Retries allowed per client request, over time (the retry budget's ratio)."""
    retry_floor_per_s: float = DEFAULT_MIN_RETRIES_PER_S
    """Retries per second the budget allows regardless of traffic (its floor)."""
    retry_max_tokens: float = DEFAULT_MAX_RETRY_TOKENS
    """Largest burst of retries the budget holds (tokens)."""
    ejection_failures: int = DEFAULT_CONSECUTIVE_FAILURES
    """Consecutive failed attempts that eject an endpoint."""
    base_ejection_s: float = DEFAULT_BASE_EJECTION_S
    """First ejection's length; the n-th recent one lasts n times this (seconds)."""
    max_ejection_s: float = DEFAULT_MAX_EJECTION_S
    """Longest ejection (seconds)."""
    max_streams: int = DEFAULT_MAX_STREAMS
    """Client streams this gateway serves at once; more are shed at once with RESOURCE_EXHAUSTED."""
    keepalive_time_ms: int = DEFAULT_KEEPALIVE_TIME_MS
    """Interval of HTTP/2 keepalive pings on worker channels while calls are open (milliseconds)."""
    keepalive_timeout_ms: int = DEFAULT_KEEPALIVE_TIMEOUT_MS
    """Time a keepalive ping may go unanswered before the connection is dropped (milliseconds)."""
    reconnect_initial_ms: int = DEFAULT_RECONNECT_INITIAL_MS
    """First reconnect backoff after a worker connection fails (milliseconds)."""
    reconnect_max_ms: int = DEFAULT_RECONNECT_MAX_MS
    """Cap on the reconnect backoff, so a restarted worker is dialled again within this (milliseconds)."""
    connect_timeout_ms: int = DEFAULT_CONNECT_TIMEOUT_MS
    """Shortest time one connection attempt may take before it is abandoned (milliseconds)."""

    def __post_init__(self) -> None:
        if self.attempt_timeout_s <= 0:
            raise ValueError("attempt_timeout_s must be positive")
        if self.max_streams < 1:
            raise ValueError("max_streams must be at least 1")
        if self.ejection_failures < 1:
            raise ValueError("ejection_failures must be at least 1")


ROUTING_ENV: Final[Mapping[str, str]] = {
    "attempt_timeout_s": "TTS_ATTEMPT_TIMEOUT_S",
    "max_attempts": "TTS_MAX_ATTEMPTS",
    "base_backoff_s": "TTS_RETRY_BASE_BACKOFF_S",
    "max_backoff_s": "TTS_RETRY_MAX_BACKOFF_S",
    "retry_ratio": "TTS_RETRY_RATIO",
    "retry_floor_per_s": "TTS_RETRY_FLOOR_PER_S",
    "retry_max_tokens": "TTS_RETRY_MAX_TOKENS",
    "ejection_failures": "TTS_EJECTION_FAILURES",
    "base_ejection_s": "TTS_EJECTION_BASE_S",
    "max_ejection_s": "TTS_EJECTION_MAX_S",
    "max_streams": "TTS_GATEWAY_MAX_STREAMS",
    "keepalive_time_ms": "TTS_KEEPALIVE_TIME_MS",
    "keepalive_timeout_ms": "TTS_KEEPALIVE_TIMEOUT_MS",
    "reconnect_initial_ms": "TTS_RECONNECT_INITIAL_MS",
    "reconnect_max_ms": "TTS_RECONNECT_MAX_MS",
    "connect_timeout_ms": "TTS_CONNECT_TIMEOUT_MS",
}
"""The environment variable of each RoutingSettings field."""


def settings_from_env(cls: type, env_names: Mapping[str, str], environ: Mapping[str, str] | None = None) -> Any:
    """An instance of dataclass `cls` whose fields come from `environ` (os.environ if None) or their defaults."""
    env = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    for spec in fields(cls):
        name = env_names[spec.name]
        raw = env.get(name, "").strip()
        if not raw:
            continue
        parse: Callable[[str], Any] = type(spec.default)  # int, float or str, from the default
        try:
            values[spec.name] = parse(raw)
        except ValueError:
            raise ValueError(f"{name}={raw!r} is not a valid {parse.__name__}") from None
    return cls(**values)


def routing_settings_from_env(environ: Mapping[str, str] | None = None) -> RoutingSettings:
    """RoutingSettings from the `TTS_*` variables of ROUTING_ENV, defaults for the rest."""
    return settings_from_env(RoutingSettings, ROUTING_ENV, environ)


def channel_options(settings: RoutingSettings) -> list[tuple[str, int]]:
    """gRPC arguments of the gateway's worker channels: message sizes, keepalive, fast reconnects."""
    options = dict(CHANNEL_OPTIONS)
    options.update(
        {
            "grpc.keepalive_time_ms": settings.keepalive_time_ms,
            "grpc.keepalive_timeout_ms": settings.keepalive_timeout_ms,
            # Health Watch streams carry no data for long stretches; keep pinging through them.
            "grpc.http2.max_pings_without_data": 0,
            "grpc.initial_reconnect_backoff_ms": settings.reconnect_initial_ms,
            "grpc.min_reconnect_backoff_ms": settings.connect_timeout_ms,
            "grpc.max_reconnect_backoff_ms": settings.reconnect_max_ms,
            # Retries happen once, in the gateway's own loop; gRPC's would stack on top of them.
            "grpc.enable_retries": 0,
        }
    )
    return list(options.items())
