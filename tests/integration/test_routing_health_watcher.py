"""HealthWatcher against a real grpc.aio server whose HealthServicer flips SERVING / NOT_SERVING."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from dataclasses import dataclass

import grpc
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from libs.routing.endpoints import Endpoint
from libs.routing.health import HealthTable, Serving
from libs.routing.watcher import HealthWatcher, WatchConfig
from tests.support.faults.proxy import FaultProxy
from tests.support.servers import aio_server

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING

# The channel's own reconnect backoff (1 s initially by default) is shortened so tests run fast.
FAST_RECONNECT = [
    ("grpc.initial_reconnect_backoff_ms", 50),
    ("grpc.min_reconnect_backoff_ms", 50),
    ("grpc.max_reconnect_backoff_ms", 200),
]
FAST_WATCH = WatchConfig(reconnect_base_s=0.05, reconnect_max_s=0.2)


@dataclass
class HealthServer:
    server: grpc.aio.Server
    servicer: health.aio.HealthServicer
    address: str


@pytest.fixture
async def health_server() -> AsyncIterator[HealthServer]:
    server = aio_server()
    servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    yield HealthServer(server, servicer, f"127.0.0.1:{port}")
    await server.stop(grace=None)


async def _wait_for(table: HealthTable, endpoint: Endpoint, serving: Serving, timeout_s: float = 5.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while (status := table.status(endpoint)).serving is not serving:
        if loop.time() > deadline:
            raise AssertionError(f"{endpoint} stayed {status.serving} instead of becoming {serving}")
        await asyncio.sleep(0.01)


class Watched:
    """A table with one endpoint, its channel, and the watcher keeping it fresh."""

    def __init__(self, address: str, config: WatchConfig = FAST_WATCH) -> None:
        self.endpoint = Endpoint("zone-a", address, "acoustic")
        self.events: list[tuple[str, str, str]] = []
        self.table = HealthTable([self.endpoint], on_event=lambda *event: self.events.append(event))
        self.channel = grpc.aio.insecure_channel(address, options=FAST_RECONNECT)
        self.watcher = HealthWatcher(
            self.table,
            {self.endpoint: self.channel},
            config,
            rng=random.Random(1),
            on_event=lambda *event: self.events.append(event),
        )

    async def close(self) -> None:
        await self.watcher.stop()
        await self.channel.close()


async def test_watcher_follows_serving_state_flips(health_server: HealthServer) -> None:
    watched = Watched(health_server.address)
    assert watched.table.status(watched.endpoint).serving is Serving.UNKNOWN
    watched.watcher.start()
    try:
        await _wait_for(watched.table, watched.endpoint, Serving.SERVING)
        assert watched.table.is_available(watched.endpoint)
        await health_server.servicer.set("", NOT_SERVING)
        await _wait_for(watched.table, watched.endpoint, Serving.NOT_SERVING)
        assert not watched.table.is_available(watched.endpoint)
        await health_server.servicer.set("", SERVING)
        await _wait_for(watched.table, watched.endpoint, Serving.SERVING)
        await health_server.servicer.enter_graceful_shutdown()
        await _wait_for(watched.table, watched.endpoint, Serving.NOT_SERVING)
    finally:
        await watched.close()
    changes = [reason for kind, _, reason in watched.events if kind == "health_changed"]
    assert changes == ["serving", "not_serving", "serving", "not_serving"]


async def test_watcher_reports_unregistered_service_as_unknown_until_it_is_set(health_server: HealthServer) -> None:
    watched = Watched(health_server.address, WatchConfig(service_name="tts.v1.Acoustic", reconnect_base_s=0.05))
    watched.watcher.start()
    try:
        await asyncio.sleep(0.3)
        assert watched.table.status(watched.endpoint).serving is Serving.UNKNOWN
        await health_server.servicer.set("tts.v1.Acoustic", SERVING)
        await _wait_for(watched.table, watched.endpoint, Serving.SERVING)
    finally:
        await watched.close()


async def test_watcher_reopens_a_cut_watch_without_flapping_and_marks_a_dead_server_unknown(health_server: HealthServer) -> None:
    proxy = FaultProxy(health_server.address)
    await proxy.start()
    watched = Watched(proxy.address)
    watched.watcher.start()
    try:
        await _wait_for(watched.table, watched.endpoint, Serving.SERVING)

        # A cut connection (like a connection recycle) breaks the Watch; the state is kept...
        await proxy.cut()
        await asyncio.sleep(0.3)
        assert any(kind == "watch_broken" for kind, _, _ in watched.events)
        assert watched.table.status(watched.endpoint).serving is Serving.SERVING
        assert [kind for kind, _, _ in watched.events].count("health_changed") == 1
        # ...and the reopened Watch still delivers changes.
        await health_server.servicer.set("", NOT_SERVING)
        await _wait_for(watched.table, watched.endpoint, Serving.NOT_SERVING)
        await health_server.servicer.set("", SERVING)
        await _wait_for(watched.table, watched.endpoint, Serving.SERVING)

        # A crash (connections reset, new ones refused) makes the endpoint unknown, hence unroutable.
        await proxy.crash()
        await _wait_for(watched.table, watched.endpoint, Serving.UNKNOWN)
        assert not watched.table.is_available(watched.endpoint)

        # When the server is back, the watcher reconnects with backoff and sees SERVING again.
        await proxy.pass_through()
        await _wait_for(watched.table, watched.endpoint, Serving.SERVING)
    finally:
        await watched.close()
        await proxy.stop()


async def test_stopping_the_watcher_leaves_the_channel_usable(health_server: HealthServer) -> None:
    watched = Watched(health_server.address)
    watched.watcher.start()
    await _wait_for(watched.table, watched.endpoint, Serving.SERVING)
    await watched.watcher.stop()
    reply = await health_pb2_grpc.HealthStub(watched.channel).Check(health_pb2.HealthCheckRequest(service=""), timeout=2.0)
    assert reply.status == SERVING
    await watched.channel.close()


async def test_watcher_marks_endpoint_unknown_when_nothing_listens() -> None:
    server = aio_server()
    port = server.add_insecure_port("127.0.0.1:0")  # bound, then released: nothing listens there
    await server.stop(grace=None)
    watched = Watched(f"127.0.0.1:{port}")
    watched.table.set_serving(watched.endpoint, Serving.SERVING)  # stale knowledge from before
    watched.watcher.start()
    try:
        await _wait_for(watched.table, watched.endpoint, Serving.UNKNOWN)
        await asyncio.sleep(0.5)
        broken = [reason for kind, _, reason in watched.events if kind == "watch_broken"]
        # Retries continue with backoff: more than one attempt, but not a busy loop.
        assert 2 <= len(broken) <= 20
        assert set(broken) == {"unavailable"}
    finally:
        await watched.close()


async def test_watcher_keeps_a_server_without_health_service_unroutable() -> None:
    server = aio_server()  # no services at all: every call is UNIMPLEMENTED
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    watched = Watched(f"127.0.0.1:{port}")
    try:
        async with watched.watcher:
            await asyncio.sleep(0.3)
            assert watched.table.status(watched.endpoint).serving is Serving.UNKNOWN
            broken = {reason for kind, _, reason in watched.events if kind == "watch_broken"}
            assert broken == {"unimplemented"}
    finally:
        await watched.channel.close()
        await server.stop(grace=None)
