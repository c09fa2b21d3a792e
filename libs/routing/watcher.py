"""`HealthWatcher`: keeps a HealthTable's serving state fresh from one `grpc.health.v1.Health/Watch`
stream per endpoint, over the gateway's channels; endpoints are added and removed as discovery
finds and forgets pods."""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from libs.routing import events
from libs.routing.endpoints import Endpoint
from libs.routing.events import EventHook, ignore_event
from libs.routing.health import HealthTable, Serving

_log = logging.getLogger(__name__)

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
        self._tasks: dict[Endpoint, asyncio.Task[None]] = {}
        self._started = False

    def start(self) -> None:
        """Start one Watch task per endpoint on the running event loop."""
        if self._started:
            raise RuntimeError("HealthWatcher already started")
        self._started = True
        for endpoint, channel in self._channels.items():
            self._spawn(endpoint, channel)

    def watch(self, endpoint: Endpoint, channel: grpc.aio.Channel) -> None:
        """Watch one more endpoint (a pod discovery just found); started at once if the watcher runs."""
        if endpoint in self._channels:
            return
        self._channels[endpoint] = channel
        if self._started:
            self._spawn(endpoint, channel)

    def forget(self, endpoint: Endpoint) -> asyncio.Task[None] | None:
        """Stop watching an endpoint at once; returns its cancelled Watch task to await (or None)."""
        self._channels.pop(endpoint, None)
        task = self._tasks.pop(endpoint, None)
        if task is not None:
            task.cancel()
        return task

    async def unwatch(self, endpoint: Endpoint) -> None:
        """Stop watching an endpoint and wait until its Watch has ended (before its channel is closed)."""
        task = self.forget(endpoint)
        if task is not None:
            await asyncio.gather(task, return_exceptions=True)

    def _spawn(self, endpoint: Endpoint, channel: grpc.aio.Channel) -> None:
        task = asyncio.get_running_loop().create_task(self._watch_forever(endpoint, channel), name=f"health-watch {endpoint}")
        self._tasks[endpoint] = task

    async def stop(self) -> None:
        """Cancel every Watch and wait for the tasks to end."""
        tasks, self._tasks = list(self._tasks.values()), {}
        self._started = False
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
