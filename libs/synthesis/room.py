"""New listeners that find the mesh full wait a moment for room, oldest first, before they are refused.

Streams arriving at random come in clumps: at 0.8 of a capacity of a dozen listeners, more than a
dozen are open about a sixth of the time (a Poisson count of mean 9.6 is over 12 with probability
0.17), and a newcomer then fails the admission test although room may come back soon after (a
stream ends, the listeners' buffers grow and the test with them). Refused at once, it is an error
its caller must retry, and a browser or an OpenAI client does not.
So a stream refused for room waits, up to `wait_s` and never past half of what its deadline leaves:
whenever a stream ends, and every `poll_s` while any waits, the waiting ones are tried again, the
oldest first, and each that now passes is admitted. One still waiting at its end is refused as it
would have been at once, with the admission's pushback. A newcomer that arrives while others wait
is tried only after them, so it cannot take the room they wait for; a client's own streams are tried
in the order they came, so a round of tries costs one try per waiting client, however many streams
one of them floods the queue with.

Only a refusal for room waits (`NoRoom`: the admission test, the workers' stream slots); limits that
a stream ending does not lift for this caller (the gateway's streams, a client's own limit) refuse
at once, and so does a newcomer when as many wait as the gateway serves, or when its client has half
of those waiting.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final, Generic, TypeVar

POLL_S: Final = 0.1
"""How often the waiting are tried again while no stream ends: listeners' buffers grow meanwhile."""
MIN_DEADLINE_SHARE: Final = 0.5
"""At most this share of what a caller's deadline leaves is spent waiting: the rest is for its audio."""

_T = TypeVar("_T")


class NoRoom(Exception):
    """A new stream found no room on the mesh now; the message says why, as its refusal would."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        """What it lacked, as the refusal counts it (one of the gateway's shed reasons)."""


@dataclass(eq=False)
class _Waiter(Generic[_T]):
    attempt: Callable[[], _T]
    client: str
    refusal: NoRoom
    future: asyncio.Future[_T] = field(default_factory=lambda: asyncio.get_running_loop().create_future())


class RoomQueue(Generic[_T]):
    """The streams of one gateway waiting for room, in the order they came (module docstring)."""

    def __init__(
        self,
        wait_s: float,
        max_waiting: int,
        poll_s: float = POLL_S,
        on_waited: Callable[[bool, float], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """Streams wait at most `wait_s` (0: never), `max_waiting` of them at once; `on_waited(admitted,
        seconds)` hears how each wait ended and how long it took."""
        self.wait_s = wait_s
        self._max_waiting = max_waiting
        self._poll_s = poll_s
        self._on_waited = on_waited
        self._clock = clock
        self._waiting: list[_Waiter[_T]] = []
        self._poller: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def waiting(self) -> int:
        """Streams waiting now."""
        return len(self._waiting)

    async def take(self, attempt: Callable[[], _T], client: str, deadline_s: float | None, release: Callable[[_T], None]) -> _T:
        """What `attempt()` gives (a stream's place), at once when it passes and nobody waits before
        it, else once it passes on a later try; `NoRoom` when it never does within the wait (or may
        not wait at all). `deadline_s` is what the caller's deadline leaves (None: none); `release`
        gives back a place taken for a caller that went away meanwhile. Any other error of `attempt`
        is raised as it comes."""
        refused = self.pump()  # those already waiting are tried first
        wait_s = self._wait_for(client, deadline_s)
        if client in refused and wait_s > 0:  # its own older streams wait for room: it comes after them
            waiter = _Waiter(attempt, client, NoRoom(refused[client].reason, str(refused[client])))
        else:
            try:
                return attempt()
            except NoRoom as refusal:
                if wait_s <= 0:
                    raise
                waiter = _Waiter(attempt, client, refusal)
        self._loop = asyncio.get_running_loop()
        self._waiting.append(waiter)
        self._poll()
        started = self._clock()
        taken = False
        try:
            try:
                async with asyncio.timeout(wait_s):
                    result = await asyncio.shield(waiter.future)
            except TimeoutError:
                if not waiter.future.done():
                    raise waiter.refusal from None
                result = waiter.future.result()  # admitted just as the wait ran out
            taken = True
            return result
        finally:
            if waiter in self._waiting:
                self._waiting.remove(waiter)
            if not taken and waiter.future.done() and not waiter.future.cancelled() and waiter.future.exception() is None:
                release(waiter.future.result())  # admitted as its caller went away: the place goes back
            elif not waiter.future.done():
                waiter.future.cancel()
            if self._on_waited is not None:
                self._on_waited(taken, self._clock() - started)

    def _wait_for(self, client: str, deadline_s: float | None) -> float:
        """How long a newcomer of `client` refused for room may wait (0: not at all)."""
        if self.wait_s <= 0 or len(self._waiting) >= self._max_waiting:
            return 0.0
        if sum(waiter.client == client for waiter in self._waiting) >= max(1, self._max_waiting // 2):
            return 0.0
        if deadline_s is None:
            return self.wait_s
        return min(self.wait_s, MIN_DEADLINE_SHARE * deadline_s)

    def room_freed(self) -> None:
        """A stream ended: the waiting are tried again soon (not within the caller, which may be in the
        middle of giving a place back)."""
        if self._waiting and self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self.pump)

    def pump(self) -> dict[str, NoRoom]:
        """Try the waiting streams, the oldest first: each that passes is admitted. A client's streams
        are taken in the order they came, so once one of a client's is refused its later ones are not
        tried (a flood of one client's streams costs one try per round, not one each). The refusals,
        by client."""
        refused: dict[str, NoRoom] = {}
        for waiter in list(self._waiting):
            if waiter.future.done() or waiter.client in refused:
                continue
            try:
                result = waiter.attempt()
            except NoRoom as refusal:
                waiter.refusal = refused[waiter.client] = refusal
                continue
            except Exception as error:  # a limit it now meets (the gateway's, its client's): refused as it comes
                waiter.future.set_exception(error)
            else:
                waiter.future.set_result(result)
            self._waiting.remove(waiter)
        return refused

    def _poll(self) -> None:
        if self._poller is None or self._poller.done():
            self._poller = asyncio.get_running_loop().create_task(self._polling(), name="room_queue_poll")

    async def _polling(self) -> None:
        while self._waiting:
            await asyncio.sleep(self._poll_s)
            self.pump()
