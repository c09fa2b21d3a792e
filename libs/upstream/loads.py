"""What each worker can take on, as it last said (`GetLoad`, asked every LOAD_POLL_S), and what the
gateway derives from it: the mesh's real-time capacity, how long a worker's step takes now, how the
vocoder paces, and how long a round trip to a worker takes."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Final

import grpc

from libs.pb.tts.common.v1 import load_pb2
from libs.routing.endpoints import Endpoint

_log = logging.getLogger(__name__)

LOAD_POLL_S: Final = 0.5
"""How often every serving worker is asked for its load."""
LOAD_TIMEOUT_S: Final = 2.0
"""How long one ask may take; a worker that does not answer keeps its last load until it is stale."""
STALE_AFTER_S: Final = 10.0
"""A load older than this no longer counts (the worker stopped answering)."""
RTT_WEIGHT: Final = 0.2
"""Share of the difference to a new round trip that is taken."""


@dataclass(frozen=True)
class KnownLoad:
    """A worker's last load and when it came."""

    load: load_pb2.WorkerLoad
    at_s: float
    rtt_s: float
    """Round trip of the asks to this worker (exponentially weighted)."""


class LoadWatcher:
    """Asks every serving worker for its load, and keeps the answers."""

    def __init__(
        self,
        endpoints: Callable[[], Iterable[Endpoint]],
        ask: Callable[[Endpoint], Any],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`endpoints()` lists the workers to ask now; `ask(endpoint)` is an awaitable of its WorkerLoad."""
        self._endpoints = endpoints
        self._ask = ask
        self._clock = clock
        self._known: dict[Endpoint, KnownLoad] = {}
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start asking (on the running loop)."""
        self._task = asyncio.get_running_loop().create_task(self._run(), name="worker-loads")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    def forget(self, endpoint: Endpoint) -> None:
        """`endpoint` is gone."""
        self._known.pop(endpoint, None)

    def load(self, endpoint: Endpoint) -> KnownLoad | None:
        """`endpoint`'s last load, if it is fresh."""
        known = self._known.get(endpoint)
        if known is None or self._clock() - known.at_s > STALE_AFTER_S:
            return None
        return known

    def loads(self, endpoints: Iterable[Endpoint]) -> list[KnownLoad]:
        """The fresh loads of `endpoints`."""
        return [known for endpoint in endpoints if (known := self.load(endpoint)) is not None]

    async def poll_once(self) -> None:
        """Ask every listed worker once, all at the same time."""
        endpoints = list(self._endpoints())
        await asyncio.gather(*(self._poll(endpoint) for endpoint in endpoints))

    async def ensure(self, endpoints: Iterable[Endpoint]) -> None:
        """Ask those of `endpoints` whose load is not known fresh now, all at the same time (each
        within LOAD_TIMEOUT_S): for a decision that must not be made blind, as right after a start."""
        unknown = [endpoint for endpoint in endpoints if self.load(endpoint) is None]
        if unknown:
            await asyncio.gather(*(self._poll(endpoint) for endpoint in unknown))

    async def _run(self) -> None:
        while True:
            await self.poll_once()
            await asyncio.sleep(LOAD_POLL_S)

    async def _poll(self, endpoint: Endpoint) -> None:
        started_s = self._clock()
        try:
            async with asyncio.timeout(LOAD_TIMEOUT_S):
                load = await self._ask(endpoint)
        except (grpc.aio.AioRpcError, TimeoutError, grpc.aio.UsageError) as error:
            _log.debug("GetLoad on %s failed: %r", endpoint, error)
            return
        now = self._clock()
        rtt_s = now - started_s
        previous = self._known.get(endpoint)
        if previous is not None:
            rtt_s = previous.rtt_s + RTT_WEIGHT * (rtt_s - previous.rtt_s)
        self._known[endpoint] = KnownLoad(load, now, rtt_s)


def summed_capacity(loads: Iterable[KnownLoad]) -> float:
    """Streams the workers of one kind keep in real time together (0: none has said)."""
    return sum(known.load.capacity_streams for known in loads)
