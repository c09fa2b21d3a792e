"""Routing event hook: a plain callback so metrics and logs can be wired in without a dependency here."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Final

EventHook = Callable[[str, str, str], None]
"""`on_event(kind, zone, reason)`: called synchronously on the routing path, so it must be cheap."""

# Event kinds. `zone` is the zone of the endpoint concerned; `reason` is a short, low-cardinality word.
EJECTED: Final = "ejected"
"""An endpoint was ejected after consecutive failures (reason: "consecutive_failures")."""
UNEJECTED: Final = "unejected"
"""An ejected endpoint's ejection time passed and it may take traffic again (reason: "ejection_expired")."""
EJECTION_SKIPPED: Final = "ejection_skipped"
"""An endpoint crossed the failure threshold but the ejection cap kept it in (reason: "max_ejected_ratio")."""
HEALTH_CHANGED: Final = "health_changed"
"""The grpc.health.v1 state of an endpoint changed (reason: the new state, e.g. "serving")."""
WATCH_BROKEN: Final = "watch_broken"
"""A health Watch stream failed and will be reopened with backoff (reason: the gRPC code name, lower case)."""
SPILL: Final = "spill"
"""A pick left the local zone (zone: the chosen zone; reason: "local_unavailable" or "local_failed")."""
NO_ENDPOINT: Final = "no_endpoint"
"""A pick found nothing available (zone: the local zone; reason: the endpoint kind)."""
RETRY: Final = "retry"
"""A failed attempt will be retried (zone: where it failed; reason: the gRPC code name, lower case)."""
RETRY_DENIED: Final = "retry_denied"
"""A retryable failure was not retried (reason: "max_attempts", "deadline", "pushback_stop" or "budget")."""

_log = logging.getLogger(__name__)


def ignore_event(kind: str, zone: str, reason: str) -> None:
    """The default hook: does nothing."""


def emit(hook: EventHook, kind: str, zone: str, reason: str) -> None:
    """Call `hook`, never letting a broken metrics callback break routing."""
    try:
        hook(kind, zone, reason)
    except Exception:  # a metrics bug must not fail a request
        _log.exception("routing event hook failed for %s/%s/%s", kind, zone, reason)
