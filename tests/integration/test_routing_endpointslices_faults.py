"""EndpointSlice discovery through what an API server does to its watchers, and within the RBAC rules
the manifests give the gateway (tests/support/fake_kube_api.py: no kube-apiserver installs here).

Each test runs the real discovery (`EndpointSliceDiscovery`, lightkube's async client over real
HTTP) against the fake API server and checks the pods it publishes: a watch from history that has
been compacted (410 Gone) lists again and sees what changed; a watch dropped without a word is
reopened from the last version seen and misses nothing; a slow API server, one whose watches go
quiet without closing, and one that refuses the gateway for a while all leave the last known pods
routable until it answers again.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from lightkube import ApiError, AsyncClient, KubeConfig
from lightkube.config.models import Cluster, User
from lightkube.resources.discovery_v1 import EndpointSlice

from libs.routing.discovery import Snapshot
from libs.routing.endpoints import Endpoint, parse_endpoint
from libs.routing.kubernetes import EndpointSliceDiscovery
from tests.support.fake_kube_api import FakeApiServer, Rbac, RunningApiServer
from tests.support.faults.toy_mesh import wait_until

NAMESPACE = "tts"
TOKEN = "gateway-token"
TARGET = parse_endpoint("zone-a=acoustic:50052", "acoustic")


def _slice(*ips: str) -> dict[str, Any]:
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {"name": "acoustic-x", "namespace": NAMESPACE, "labels": {"kubernetes.io/service-name": "acoustic"}},
        "addressType": "IPv4",
        "ports": [{"name": "grpc", "port": 50052, "protocol": "TCP"}],
        "endpoints": [{"addresses": [ip], "zone": "zone-a", "conditions": {"ready": True}} for ip in ips],
    }


def _live(*ips: str) -> set[str]:
    return {f"{ip}:50052" for ip in ips}


class Published:
    """What discovery published last, and every snapshot it published."""

    def __init__(self) -> None:
        self.snapshots: list[Snapshot] = []

    def __call__(self, target: Endpoint, snapshot: Snapshot) -> None:
        self.snapshots.append(snapshot)

    @property
    def live(self) -> set[str]:
        return {endpoint.address for endpoint in self.snapshots[-1].live} if self.snapshots else set()


def _client(url: str, token: str = TOKEN, namespace: str = NAMESPACE) -> AsyncClient:
    config = KubeConfig.from_one(cluster=Cluster(server=url), user=User(token=token), namespace=namespace)
    return AsyncClient(config=config, trust_env=False)


@pytest.fixture
def fake() -> Iterator[FakeApiServer]:
    yield FakeApiServer(NAMESPACE, tokens={TOKEN: "gateway"})


@asynccontextmanager
async def discovering(fake: FakeApiServer, watch_deadline_s: float = 330.0) -> AsyncIterator[tuple[Published, str]]:
    """The API server running and the discovery following it, until the block ends."""
    published = Published()
    async with RunningApiServer(fake) as running:
        discovery = EndpointSliceDiscovery(
            [TARGET], published, NAMESPACE, client_factory=lambda: _client(running.url), rng=random.Random(7),
            watch_deadline_s=watch_deadline_s,
        )  # fmt: skip
        task = asyncio.create_task(discovery.run())
        try:
            yield published, running.url
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


async def test_discovery_needs_only_what_the_manifests_rbac_grants_and_the_rest_is_refused(fake: FakeApiServer) -> None:
    fake.apply(_slice("10.0.0.1"))
    async with discovering(fake) as (published, url):
        await wait_until(lambda: published.live == _live("10.0.0.1"), timeout_s=10)
        fake.apply(_slice("10.0.0.1", "10.0.0.2"))
        await wait_until(lambda: published.live == _live("10.0.0.1", "10.0.0.2"), timeout_s=10)
        assert fake.refused == []
        assert {request[3] for request in fake.requests} == {"list", "watch"}
        assert {request[:3] for request in fake.requests} == {("gateway", NAMESPACE, "discovery.k8s.io/endpointslices")}
        # What the Role does not grant is refused to the same token: one slice by name, another namespace;
        # no token at all is not even authenticated.
        client = _client(url)
        with pytest.raises(ApiError) as got:
            await client.get(EndpointSlice, "acoustic-x", namespace=NAMESPACE)
        assert got.value.status.code == 403
        with pytest.raises(ApiError) as listed:
            async for _ in client.list(EndpointSlice, namespace="kube-system"):
                pass
        assert listed.value.status.code == 403
        with pytest.raises(ApiError) as anonymous:
            async for _ in _client(url, token="not-a-token").list(EndpointSlice, namespace=NAMESPACE):
                pass
        assert anonymous.value.status.code == 401


async def test_a_watch_answered_410_gone_lists_again_and_sees_what_changed_meanwhile(fake: FakeApiServer) -> None:
    fake.apply(_slice("10.0.0.1"))
    async with discovering(fake) as (published, _):
        # The watch must be open before the compaction: one opened after it, from the listed version, is still valid.
        await wait_until(lambda: published.live == _live("10.0.0.1") and len(fake.watches) == 1, timeout_s=10)
        lists = len(fake.list_versions)
        fake.compact()  # the open watch gets 410 Gone; its history is gone
        fake.apply(_slice("10.0.0.1", "10.0.0.3"))
        await wait_until(lambda: published.live == _live("10.0.0.1", "10.0.0.3"), timeout_s=15)
        assert len(fake.list_versions) > lists, "the 410 did not lead to a new listing"
        await wait_until(lambda: fake.watch_versions[-1] == fake.list_versions[-1], timeout_s=5)  # watching from the new list
        assert all(snapshot.live for snapshot in published.snapshots), "the pods were dropped while relisting"


async def test_a_dropped_watch_is_reopened_from_the_last_version_seen_and_misses_nothing(fake: FakeApiServer) -> None:
    fake.apply(_slice("10.0.0.1"))
    async with discovering(fake) as (published, _):
        await wait_until(lambda: published.live == _live("10.0.0.1") and len(fake.watches) == 1, timeout_s=10)
        lists, seen_version = len(fake.list_versions), str(fake.version)
        fake.drop_watches()
        fake.apply(_slice("10.0.0.1", "10.0.0.4"))  # while no watch is open
        await wait_until(lambda: published.live == _live("10.0.0.1", "10.0.0.4"), timeout_s=10)
        assert len(fake.list_versions) == lists, "a dropped watch needs no new listing"
        assert seen_version in fake.watch_versions[1:], "the watch was not reopened from the last version seen"


async def test_a_slow_api_server_keeps_the_last_pods_routable_until_it_answers(fake: FakeApiServer) -> None:
    fake.apply(_slice("10.0.0.1"))
    async with discovering(fake) as (published, _):
        await wait_until(lambda: published.live == _live("10.0.0.1") and len(fake.watches) == 1, timeout_s=10)
        fake.delay_s = 3.0
        fake.drop_watches()
        fake.apply(_slice("10.0.0.1", "10.0.0.5"))
        await asyncio.sleep(2.0)
        assert published.live == _live("10.0.0.1"), "the pods changed before the slow server answered"
        await wait_until(lambda: published.live == _live("10.0.0.1", "10.0.0.5"), timeout_s=15)
        assert all(snapshot.live for snapshot in published.snapshots)


async def test_watches_that_go_quiet_without_closing_are_given_up_and_the_slices_listed_again(fake: FakeApiServer) -> None:
    fake.apply(_slice("10.0.0.1"))
    async with discovering(fake, watch_deadline_s=2.0) as (published, _):
        await wait_until(lambda: published.live == _live("10.0.0.1") and len(fake.watches) == 1, timeout_s=10)
        fake.hang_watches = True  # from now on a watch is accepted and never answered, nor closed
        fake.drop_watches()
        fake.apply(_slice("10.0.0.1", "10.0.0.6"))
        lists = len(fake.list_versions)
        await wait_until(lambda: published.live == _live("10.0.0.1", "10.0.0.6"), timeout_s=10)
        assert len(fake.list_versions) > lists


async def test_a_gateway_refused_for_a_while_keeps_its_pods_and_catches_up_once_allowed_again(fake: FakeApiServer) -> None:
    fake.apply(_slice("10.0.0.1"))
    granted = fake.rbac
    async with discovering(fake) as (published, _):
        await wait_until(lambda: published.live == _live("10.0.0.1") and len(fake.watches) == 1, timeout_s=10)
        fake.rbac = Rbac(NAMESPACE)  # the RoleBinding removed
        fake.drop_watches()
        fake.apply(_slice("10.0.0.1", "10.0.0.7"))
        await wait_until(lambda: len(fake.refused) >= 2, timeout_s=10)
        assert {code for _, code in fake.refused} == {403}
        assert published.live == _live("10.0.0.1")
        fake.rbac = granted
        await wait_until(lambda: published.live == _live("10.0.0.1", "10.0.0.7"), timeout_s=20)
        assert all(snapshot.live for snapshot in published.snapshots)
