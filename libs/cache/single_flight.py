"""Coalesce concurrent work on the same key inside one process (single flight).

The first caller for a key becomes the leader and does the work; callers that arrive while it runs
wait for the leader's result instead of repeating the work. A leader that fails or is cancelled
gives its waiters `None`, and each of them then does the work itself.
"""

from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager
from typing import AsyncIterator, Generic, TypeVar

T = TypeVar("T")


class Flight(Generic[T]):
    """The leader's handle: call `publish` with the result once it exists."""

    def __init__(self, future: asyncio.Future[T | None]) -> None:
        self._future = future

    def publish(self, result: T) -> None:
        """Hand `result` to every waiter."""
        if not self._future.done():
            self._future.set_result(result)


class SingleFlight(Generic[T]):
    """Per-key leader election for one event loop."""

    def __init__(self) -> None:
        self._flights: dict[str, asyncio.Future[T | None]] = {}

    def in_flight(self, key: str) -> bool:
        """Whether a leader is working on `key` now."""
        return key in self._flights

    async def wait(self, key: str) -> T | None:
        """If a leader works on `key`, wait for its result (None if it failed); None when there is no leader."""
        future = self._flights.get(key)
        if future is None:
            return None
        # shield: a waiter that is cancelled must not cancel the shared future for the others.
        return await asyncio.shield(future)

    @asynccontextmanager
    async def lead(self, key: str) -> AsyncIterator[Flight[T]]:
        """Become the leader for `key` for the duration of the block (the caller checked `in_flight`)."""
        future: asyncio.Future[T | None] = asyncio.get_running_loop().create_future()
        self._flights[key] = future
        try:
            yield Flight(future)
        finally:
            if not future.done():
                future.set_result(None)
            if self._flights.get(key) is future:
                del self._flights[key]
