"""Choose the endpoint for one attempt: local zone first, by load; other zones only when needed."""

from __future__ import annotations

import random
from collections.abc import Collection
from dataclasses import dataclass
from typing import Final, Literal

from libs.routing import events
from libs.routing.endpoints import Endpoint
from libs.routing.events import EventHook, ignore_event
from libs.routing.health import EndpointStatus, HealthTable

PickStrategy = Literal["power_of_two", "least_outstanding"]
PICK_STRATEGIES: Final[tuple[str, ...]] = ("power_of_two", "least_outstanding")


@dataclass(frozen=True)
class PickerConfig:
    """Zone and load rules of one gateway's picker."""

    local_zone: str
    """The zone this gateway runs in; its endpoints are preferred."""
    strategy: PickStrategy = "power_of_two"
    """"power_of_two": the less loaded of two random candidates; "least_outstanding": the least loaded."""
    max_streams_per_endpoint: int | None = None
    """Outstanding streams at which an endpoint counts as full (no capacity); None means no limit."""

    def __post_init__(self) -> None:
        if self.strategy not in PICK_STRATEGIES:
            raise ValueError(f"strategy {self.strategy!r} is not one of {', '.join(PICK_STRATEGIES)}")
        if self.max_streams_per_endpoint is not None and self.max_streams_per_endpoint < 1:
            raise ValueError("max_streams_per_endpoint must be at least 1 (or None for no limit)")


class Picker:
    """Picks endpoints from a HealthTable. It does not count the stream: the caller wraps the attempt in
    `table.stream_started` / `stream_finished` so the load it reads stays true."""

    def __init__(
        self,
        table: HealthTable,
        config: PickerConfig,
        rng: random.Random | None = None,
        on_event: EventHook = ignore_event,
    ) -> None:
        self._table = table
        self._config = config
        self._rng = rng if rng is not None else random.Random()
        self._on_event = on_event

    def pick(
        self,
        kind: str,
        *,
        exclude: Collection[Endpoint] = (),
        failed_zones: Collection[str] = (),
    ) -> Endpoint | None:
        """The endpoint of `kind` for the next attempt, or None when nothing is available.

        `exclude`: endpoints this request already failed on; they are never chosen again.
        `failed_zones`: zones where this request's earlier attempts failed; they are used only when
        no other zone has an available endpoint. Order of preference: the local zone (unless it
        failed), then the other zones that did not fail, then the zones that did.
        """
        local_zone = self._config.local_zone
        candidates = [status for status in self._table.statuses(kind) if self._has_capacity(status, exclude)]
        local = [status for status in candidates if status.endpoint.zone == local_zone]
        remote = [status for status in candidates if status.endpoint.zone != local_zone]
        remote_fresh = [status for status in remote if status.endpoint.zone not in failed_zones]
        remote_failed = [status for status in remote if status.endpoint.zone in failed_zones]
        tiers = [remote_fresh, local, remote_failed] if local_zone in failed_zones else [local, remote_fresh, remote_failed]
        for tier in tiers:
            if tier:
                chosen = self._choose_by_load(tier)
                if chosen.zone != local_zone:
                    reason = "local_failed" if local_zone in failed_zones else "local_unavailable"
                    events.emit(self._on_event, events.SPILL, chosen.zone, reason)
                return chosen
        events.emit(self._on_event, events.NO_ENDPOINT, local_zone, kind)
        return None

    def _has_capacity(self, status: EndpointStatus, exclude: Collection[Endpoint]) -> bool:
        if not status.available or status.endpoint in exclude:
            return False
        limit = self._config.max_streams_per_endpoint
        return limit is None or status.outstanding_streams < limit

    def _choose_by_load(self, tier: list[EndpointStatus]) -> Endpoint:
        if len(tier) == 1:
            return tier[0].endpoint
        if self._config.strategy == "power_of_two":
            first, second = self._rng.sample(tier, 2)
            # The sample order is random, so ties between the two go either way.
            return (second if second.outstanding_streams < first.outstanding_streams else first).endpoint
        fewest = min(status.outstanding_streams for status in tier)
        # Random among the least loaded, so an idle fleet is not filled in list order.
        return self._rng.choice([status for status in tier if status.outstanding_streams == fewest]).endpoint
