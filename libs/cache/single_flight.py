"""Coalesce concurrent work on the same key inside one process (single flight).

The first caller for a key becomes the leader and does the work; callers that arrive while it runs
wait for the leader's result instead of repeating the work. A leader that fails or is cancelled
gives its waiters `None`, and each of them then does the work itself. A leader whose result is still
on its way to the cache keeps serving it (`hold_until`), so nobody repeats the work in the gap
between the result and the cache write.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class Flight(Generic[T]):
    """The leader's handle: call `publish` with the result once it exists."""

    def __init__(self, future: asyncio.Future[T | None]) -> None:
        self._future = future
        self.held_until: asyncio.Future[Any] | None = None

    def publish(self, result: T) -> None:
        """Hand `result` to every waiter."""
        if not self._future.done():
            self._future.set_result(result)

    def hold_until(self, done: asyncio.Future[Any]) -> None:
        """Keep answering with the published result after the leader's block ends, until `done`
        (e.g. the task writing the result to the cache) has finished."""
        self.held_until = done


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
        flight = Flight(future)
        try:
            yield flight
        finally:
            if not future.done():
                future.set_result(None)
            held = flight.held_until
            if held is not None and not held.done() and future.result() is not None:
                held.add_done_callback(lambda _: self._land(key, future))
            else:
                self._land(key, future)

    def _land(self, key: str, future: asyncio.Future[T | None]) -> None:
        if self._flights.get(key) is future:
            del self._flights[key]
