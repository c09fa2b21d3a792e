"""Kubernetes discovery: EndpointSlices become pods with their zone, ready and terminating honoured.

`snapshot_of_slices` is checked on slices as the API server writes them. End to end, lightkube's
real async client lists and watches a small API server over real HTTP (tests/support/fake_kube_api.py:
the EndpointSlice list and watch, which is all the gateway reads, behind the manifests' RBAC), and the
real WorkerPool opens a channel and a health Watch to each pod: grpc.health.v1 servers on 127.0.0.x,
one per pod. Its error paths are in test_routing_endpointslices_faults.py.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from lightkube import AsyncClient, KubeConfig
from lightkube.config.models import Cluster, User
from prometheus_client import CollectorRegistry

from libs.routing.endpoints import Endpoint, parse_endpoint
from libs.routing.kubernetes import EndpointSliceDiscovery, snapshot_of_slices
from libs.upstream.pool import WorkerPool
from libs.upstream.settings import UpstreamSettings
from tests.support.fake_kube_api import FakeApiServer, RunningApiServer, free_port_on
from tests.support.faults.toy_mesh import wait_until
from tests.support.servers import aio_server

NAMESPACE = "tts"
TARGET = parse_endpoint("zone-a=acoustic:50052", "acoustic")


def _slice(name: str, pods: list[dict[str, Any]], port: int = 50052, service: str = "acoustic") -> dict[str, Any]:
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": {"kubernetes.io/service-name": service}},
        "addressType": "IPv4",
        "ports": [{"name": "grpc", "port": port, "protocol": "TCP"}],
        "endpoints": pods,
    }


def _pod(ip: str, zone: str, *, ready: bool = True, serving: bool = True, terminating: bool = False) -> dict[str, Any]:
    return {"addresses": [ip], "zone": zone, "conditions": {"ready": ready, "serving": serving, "terminating": terminating}}


def test_ready_pods_are_live_terminating_and_unready_ones_drain_and_each_keeps_its_zone() -> None:
    slices = [
        _slice("acoustic-1", [_pod("10.0.0.1", "zone-a"), _pod("10.0.0.2", "zone-b", ready=False, terminating=True)]),
        _slice("acoustic-2", [_pod("10.0.0.3", "zone-c", ready=False), {"addresses": ["10.0.0.4"], "conditions": {}}]),
    ]
    snapshot = snapshot_of_slices(TARGET, slices)
    assert snapshot.live == {
        Endpoint("zone-a", "10.0.0.1:50052", "acoustic"),
        Endpoint("zone-a", "10.0.0.4:50052", "acoustic"),  # no zone in the slice: the target's; ready unset: ready
    }
    assert snapshot.draining == {Endpoint("zone-b", "10.0.0.2:50052", "acoustic"), Endpoint("zone-c", "10.0.0.3:50052", "acoustic")}


def test_a_slice_of_another_port_or_address_type_adds_no_pod() -> None:
    other_port = _slice("a", [_pod("10.0.0.1", "zone-a")], port=9102)
    other_port["ports"].append({"name": "metrics", "port": 9103, "protocol": "TCP"})
    fqdn = {**_slice("b", [_pod("10.0.0.2", "zone-a")]), "addressType": "FQDN"}
    assert snapshot_of_slices(TARGET, [other_port, fqdn]).live == frozenset()
    # A single port that differs (a Service whose targetPort is not its port) is the pods' port.
    only = _slice("c", [_pod("10.0.0.5", "zone-a")], port=8443)
    assert snapshot_of_slices(TARGET, [only]).live == {Endpoint("zone-a", "10.0.0.5:8443", "acoustic")}


@pytest.fixture
async def api_server() -> AsyncIterator[tuple[FakeApiServer, str]]:
    """The fake API server with the manifests' RBAC: the gateway's token may list and watch slices in NAMESPACE."""
    fake = FakeApiServer(NAMESPACE, tokens={"gateway-token": "gateway"})
    async with RunningApiServer(fake) as running:
        yield fake, running.url


async def _health_server(ip: str, port: int) -> grpc.aio.Server:
    server = aio_server()
    servicer = health.aio.HealthServicer()
    await servicer.set("", health_pb2.HealthCheckResponse.SERVING)
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    server.add_insecure_port(f"{ip}:{port}")
    await server.start()
    return server


async def test_gateway_follows_endpointslices_adding_ready_pods_and_draining_terminating_ones(
    api_server: tuple[FakeApiServer, str],
) -> None:
    fake, url = api_server
    port = free_port_on("127.0.0.41")
    ips = ["127.0.0.41", "127.0.0.42", "127.0.0.43"]
    servers = [await _health_server(ip, port) for ip in ips]
    fake.apply(_slice("acoustic-x", [_pod(ips[0], "zone-a"), _pod(ips[1], "zone-b")], port=port))
    upstream = UpstreamSettings(
        acoustic=(parse_endpoint(f"zone-a=acoustic:{port}", "acoustic"),),
        vocoder=(parse_endpoint(f"zone-a=vocoder:{port}", "vocoder"),),
        discovery="kubernetes",
    )

    def client() -> AsyncClient:
        config = KubeConfig.from_one(cluster=Cluster(server=url), user=User(token="gateway-token"), namespace=NAMESPACE)
        return AsyncClient(config=config, trust_env=False)

    pool = WorkerPool(
        upstream, "zone-a", registry=CollectorRegistry(),
        discovery=lambda targets, publish: EndpointSliceDiscovery(targets, publish, NAMESPACE, client_factory=client),
    )  # fmt: skip
    table = pool.table("acoustic")
    pod = {ip: Endpoint(zone, f"{ip}:{port}", "acoustic") for ip, zone in zip(ips, ["zone-a", "zone-b", "zone-a"], strict=False)}
    pool.start()
    try:
        # Listed first: a channel and a Watch per pod, each in the zone its slice names.
        await wait_until(lambda: all(table.tracks(pod[ip]) and table.is_available(pod[ip]) for ip in ips[:2]), timeout_s=10)
        assert {status.endpoint for status in table.statuses()} == {pod[ips[0]], pod[ips[1]]}
        assert fake.watch_versions and fake.watch_versions[0] is not None  # the watch starts where the list ended
        # A new ready pod is added from the watch.
        fake.apply(_slice("acoustic-x", [_pod(ips[0], "zone-a"), _pod(ips[1], "zone-b"), _pod(ips[2], "zone-a")], port=port))
        await wait_until(lambda: table.tracks(pod[ips[2]]) and table.is_available(pod[ips[2]]), timeout_s=5)
        # A terminating pod takes no new stream while one of its streams is still running...
        table.stream_started(pod[ips[0]])
        fake.apply(_slice("acoustic-x", [_pod(ips[0], "zone-a", ready=False, terminating=True), _pod(ips[1], "zone-b"), _pod(ips[2], "zone-a")], port=port))
        await wait_until(lambda: table.status(pod[ips[0]]).draining, timeout_s=5)
        assert not table.is_available(pod[ips[0]])
        await pool.reap()
        assert table.tracks(pod[ips[0]])  # ...and stays known until that stream ends
        table.stream_finished(pod[ips[0]])
        assert pod[ips[0]] in await pool.reap()
        # A deleted slice drains its pods.
        fake.apply(_slice("acoustic-x", [], port=port), event="DELETED")
        await wait_until(lambda: all(table.status(pod[ip]).draining for ip in ips[1:]), timeout_s=5)
        assert set(await pool.reap()) == {pod[ips[1]], pod[ips[2]]}
        assert table.statuses() == []
    finally:
        await pool.close()
        for server in servers:
            await server.stop(None)
