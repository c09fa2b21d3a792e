"""WorkerPool with DNS discovery over real grpc.health.v1 servers on 127.0.0.x: pods come, drain,
come back, and are dialled by address with TLS checked against the name they were found behind."""

from __future__ import annotations

import socket
from pathlib import Path

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from prometheus_client import CollectorRegistry

from libs.devmesh.certs import make_mesh_tls
from libs.routing.endpoints import Endpoint, parse_endpoint
from libs.telemetry.metrics import GatewayMetrics
from libs.upstream.pool import WorkerPool
from libs.upstream.settings import UpstreamSettings
from tests.support.faults.toy_mesh import wait_until
from tests.support.servers import aio_server


def _free_port(host: str) -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


async def _health_server(address: str, credentials: grpc.ServerCredentials | None = None) -> grpc.aio.Server:
    server = aio_server()
    servicer = health.aio.HealthServicer()
    await servicer.set("", health_pb2.HealthCheckResponse.SERVING)
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    if credentials is None:
        server.add_insecure_port(address)
    else:
        server.add_secure_port(address, credentials)
    await server.start()
    return server


class Names:
    """The resolver stand-in: what each name resolves to now."""

    def __init__(self, **names: list[str]) -> None:
        self.names = {name.replace("_", "-"): ips for name, ips in names.items()}

    async def __call__(self, host: str, port: int) -> list[str]:
        return list(self.names[host])


async def test_a_pod_that_drains_and_returns_keeps_or_regains_a_working_channel() -> None:
    port = _free_port("127.0.0.61")
    servers = [await _health_server(f"{ip}:{port}") for ip in ("127.0.0.61", "127.0.0.62")]
    names = Names(acoustic_a=["127.0.0.61", "127.0.0.62"], vocoder_a=["127.0.0.61"])
    upstream = UpstreamSettings(
        acoustic=(parse_endpoint(f"zone-a=acoustic-a:{port}", "acoustic"),),
        vocoder=(parse_endpoint(f"zone-a=vocoder-a:{port}", "vocoder"),),
        discovery_interval_s=0.05,
    )
    pool = WorkerPool(upstream, "zone-a", registry=CollectorRegistry(), resolver=names)
    table = pool.table("acoustic")
    second = Endpoint("zone-a", f"127.0.0.62:{port}", "acoustic")
    pool.start()
    try:
        await wait_until(lambda: table.tracks(second) and table.is_available(second))
        names.names["acoustic-a"] = ["127.0.0.61"]
        await wait_until(lambda: table.status(second).draining)
        table.stream_started(second)  # a stream still on it: it stays, and comes back as it was
        names.names["acoustic-a"] = ["127.0.0.61", "127.0.0.62"]
        await wait_until(lambda: table.is_available(second))
        table.stream_finished(second)
        assert await pool.reap() == []
        # Gone for good: forgotten, channel closed; listed again: a new channel that works.
        names.names["acoustic-a"] = ["127.0.0.61"]
        await wait_until(lambda: not table.tracks(second), timeout_s=5)
        # Every pod of a name gone: the zone still shows, with 0 routable workers.
        metrics = GatewayMetrics()
        metrics.track_endpoints(pool.endpoint_statuses)
        healthy = "tts_gateway_healthy_endpoints"
        assert metrics.registry.get_sample_value(healthy, {"kind": "acoustic", "zone": "zone-a"}) == 1.0
        names.names["acoustic-a"] = []
        first = Endpoint("zone-a", f"127.0.0.61:{port}", "acoustic")
        await wait_until(lambda: not table.tracks(first), timeout_s=5)
        assert metrics.registry.get_sample_value(healthy, {"kind": "acoustic", "zone": "zone-a"}) == 0.0
        names.names["acoustic-a"] = ["127.0.0.61", "127.0.0.62"]
        # Both pods listed again: each is healthy once its own Watch answers (they answer in any order).
        await wait_until(lambda: all(table.tracks(pod) and table.is_available(pod) for pod in (first, second)), timeout_s=5)
        assert metrics.registry.get_sample_value(healthy, {"kind": "acoustic", "zone": "zone-a"}) == 2.0
    finally:
        await pool.close()
        for server in servers:
            await server.stop(None)


async def test_a_pod_is_dialled_by_address_and_its_certificate_checked_against_the_name(tmp_path: Path) -> None:
    tls = make_mesh_tls(tmp_path / "tls")  # the worker certificate names "localhost", not 127.0.0.63
    port = _free_port("127.0.0.63")
    server = await _health_server(f"127.0.0.63:{port}", tls.server_credentials())
    names = Names(localhost=["127.0.0.63"])
    upstream = UpstreamSettings(
        acoustic=(parse_endpoint(f"zone-a=localhost:{port}", "acoustic"),),
        vocoder=(parse_endpoint(f"zone-a=localhost:{port}", "vocoder"),),
        tls_ca=str(tls.ca), tls_cert=str(tls.gateway_cert), tls_key=str(tls.gateway_key),
    )  # fmt: skip
    pool = WorkerPool(upstream, "zone-a", registry=CollectorRegistry(), resolver=names)
    pod = Endpoint("zone-a", f"127.0.0.63:{port}", "acoustic")
    pool.start()
    try:
        await wait_until(lambda: pool.table("acoustic").tracks(pod) and pool.table("acoustic").is_available(pod), timeout_s=10)
    finally:
        await pool.close()
        await server.stop(None)
    # Without the name, the same address fails verification: the check above is not vacuous.
    channel = grpc.aio.secure_channel(pod.address, tls.client_credentials())
    try:
        call = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=2)
        server = await _health_server(f"127.0.0.63:{port}", tls.server_credentials())
        try:
            await call
            raise AssertionError("a certificate without the pod's address was accepted")
        except grpc.aio.AioRpcError as error:
            assert error.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
        finally:
            await server.stop(None)
    finally:
        await channel.close()
