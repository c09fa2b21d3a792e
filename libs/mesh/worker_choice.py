"""Which worker gets the next stream. Deliberately simple until zone-aware routing replaces it."""

from __future__ import annotations

from typing import Callable, Sequence

from libs.routing.endpoints import Endpoint


def first_healthy(endpoints: Sequence[Endpoint], local_zone: str, is_serving: Callable[[Endpoint], bool]) -> Endpoint | None:
    """The first serving endpoint of the local zone, else the first serving one anywhere, else None."""
    serving = [endpoint for endpoint in endpoints if is_serving(endpoint)]
    for endpoint in serving:
        if endpoint.zone == local_zone:
            return endpoint
    return serving[0] if serving else None
