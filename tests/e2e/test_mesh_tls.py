"""Mutual TLS between the gateway and its workers, on real sockets.

The session mesh (tests/conftest.py) runs as `make run` does: workers that require a client
certificate from the local CA, a gateway that verifies theirs. Here: the mesh speaks; a worker
refuses plaintext, no certificate and a certificate from another CA; the gateway's credentials
refuse a worker certificate from another CA or for another name; a server serves a renewed
certificate without a restart; bad certificate files stop a worker at start with the flag named.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import numpy as np
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from libs.devmesh.certs import MeshTls, make_mesh_tls
from libs.devmesh.launcher import service_command
from libs.serving.tls import RELOAD_CHECK_S, TlsFileError, server_credentials
from libs.upstream.settings import UpstreamSettings, channel_credentials, channel_options
from tests.support.client import synthesize
from tests.support.faults.zone_mesh import wait_for
from tests.support.mesh import REPO_ROOT, Mesh
from tests.support.ports import free_port
from tests.support.servers import sync_server

SERVING = health_pb2.HealthCheckResponse.SERVING


def _check(channel: grpc.Channel) -> int:
    """The health status the server at the end of `channel` reports (grpc.RpcError if the call fails)."""
    return health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=10).status


def _refused(channel: grpc.Channel) -> grpc.StatusCode:
    with channel, pytest.raises(grpc.RpcError) as caught:
        _check(channel)
    return caught.value.code()


def _gateway_side(tls: MeshTls, address: str, server_name: str = "") -> grpc.Channel:
    """A channel built as the gateway builds its worker channels (libs.upstream.settings)."""
    settings = UpstreamSettings(
        tls_ca=str(tls.ca), tls_cert=str(tls.gateway_cert), tls_key=str(tls.gateway_key), tls_server_name=server_name
    )
    credentials = channel_credentials(settings)
    assert credentials is not None
    return grpc.secure_channel(address, credentials, options=channel_options(settings))


@pytest.fixture(scope="module")
def other_ca(tmp_path_factory: pytest.TempPathFactory) -> MeshTls:
    """A second CA with its own worker and gateway certificates (same names as the mesh's)."""
    return make_mesh_tls(tmp_path_factory.mktemp("other-ca"))


def test_the_mesh_speaks_over_mutual_tls(mesh: Mesh) -> None:
    assert mesh.secrets is not None
    for worker in ("acoustic", "vocoder"):
        log = mesh.services[worker].log_path.read_text(errors="replace")
        assert f"listening on port {mesh.services[worker].port}, mutual TLS" in log
    spoken = synthesize(mesh.gateway_address, f"Spoken through mutual TLS, take {uuid.uuid4().int % 100000}.")
    assert spoken.duration_s > 1.0 and np.sqrt(np.mean(spoken.samples**2)) > 0.02
    with mesh.worker_channel("acoustic") as channel:
        assert _check(channel) == SERVING


@pytest.mark.parametrize("worker", ["acoustic", "vocoder"])
def test_a_worker_refuses_a_plaintext_client(mesh: Mesh, worker: str) -> None:
    assert _refused(grpc.insecure_channel(mesh.services[worker].address)) == grpc.StatusCode.UNAVAILABLE


@pytest.mark.parametrize("worker", ["acoustic", "vocoder"])
def test_a_worker_refuses_a_client_without_a_certificate_or_with_one_from_another_ca(
    mesh: Mesh, other_ca: MeshTls, worker: str
) -> None:
    assert mesh.secrets is not None
    address = mesh.services[worker].address
    mesh_ca = mesh.secrets.tls.ca.read_bytes()
    no_certificate = grpc.ssl_channel_credentials(root_certificates=mesh_ca)
    foreign_certificate = grpc.ssl_channel_credentials(
        root_certificates=mesh_ca, private_key=other_ca.gateway_key.read_bytes(), certificate_chain=other_ca.gateway_cert.read_bytes()
    )
    assert _refused(grpc.secure_channel(address, no_certificate)) == grpc.StatusCode.UNAVAILABLE
    assert _refused(grpc.secure_channel(address, foreign_certificate)) == grpc.StatusCode.UNAVAILABLE
    with _gateway_side(mesh.secrets.tls, address) as channel:  # the gateway's own certificate: let in
        assert _check(channel) == SERVING


def test_the_gateway_refuses_a_worker_from_another_ca_or_named_otherwise(mesh: Mesh, other_ca: MeshTls) -> None:
    assert mesh.secrets is not None
    port = mesh.services["acoustic"].port
    # Trusting only another CA: the worker's certificate does not verify.
    assert _refused(_gateway_side(other_ca, f"127.0.0.1:{port}")) == grpc.StatusCode.UNAVAILABLE
    # The certificate names 127.0.0.1, ::1 and localhost; a Kubernetes name is not among them.
    assert _refused(_gateway_side(mesh.secrets.tls, f"127.0.0.1:{port}", "acoustic-zone-a")) == grpc.StatusCode.UNAVAILABLE
    with _gateway_side(mesh.secrets.tls, f"localhost:{port}") as channel:
        assert _check(channel) == SERVING


def _serve_health(credentials: grpc.ServerCredentials) -> tuple[grpc.Server, str]:
    server = sync_server(ThreadPoolExecutor(max_workers=4))
    servicer = health.HealthServicer()
    servicer.set("", SERVING)
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    port = server.add_secure_port("127.0.0.1:0", credentials)
    server.start()
    return server, f"127.0.0.1:{port}"


def _copy_set(source: MeshTls, target: MeshTls) -> None:
    for name in ("worker.pem", "worker-key.pem", "ca.pem"):
        temporary = target.directory / f"{name}.new"
        shutil.copyfile(source.directory / name, temporary)
        temporary.replace(target.directory / name)  # a whole file at once, as a Secret volume update is


def _reaches(tls: MeshTls, address: str) -> bool:
    try:
        with _gateway_side(tls, address) as channel:
            return _check(channel) == SERVING
    except grpc.RpcError:
        return False


def test_a_server_serves_renewed_certificate_files_without_a_restart_and_keeps_them_over_broken_ones(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    first, renewed = make_mesh_tls(tmp_path / "first"), make_mesh_tls(tmp_path / "renewed")
    served = make_mesh_tls(tmp_path / "served")
    _copy_set(first, served)
    server, address = _serve_health(server_credentials(str(served.worker_cert), str(served.worker_key), str(served.ca)))
    try:
        assert _reaches(first, address) and not _reaches(renewed, address)
        _copy_set(renewed, served)
        wait_for(lambda: _reaches(renewed, address), timeout_s=60, what="the renewed certificate served")
        assert not _reaches(first, address)
        with caplog.at_level(logging.ERROR, logger="libs.serving.tls"):
            served.worker_key.write_text("not a key\n")
            time.sleep(2 * RELOAD_CHECK_S)  # let a check fall due, then make handshakes that run it
            for _ in range(3):
                assert _reaches(renewed, address)
        assert any("keeping the previous certificate" in record.message for record in caplog.records)
    finally:
        server.stop(0)


def test_certificate_files_that_do_not_fit_are_refused_naming_the_flag(tmp_path: Path) -> None:
    tls = make_mesh_tls(tmp_path / "tls")
    with pytest.raises(TlsFileError, match=r"--tls-key .* is not the key of the certificate in --tls-cert"):
        server_credentials(str(tls.worker_cert), str(tls.gateway_key))
    with pytest.raises(TlsFileError, match=r"--tls-client-ca .*: not a PEM certificate"):
        server_credentials(str(tls.worker_cert), str(tls.worker_key), str(tls.worker_key))
    with pytest.raises(TlsFileError, match=r"--upstream-ca .*: cannot read it"):
        channel_credentials(UpstreamSettings(tls_ca=str(tmp_path / "missing.pem")))
    with pytest.raises(ValueError, match="--upstream-cert and --upstream-key go together"):
        UpstreamSettings(tls_ca=str(tls.ca), tls_cert=str(tls.gateway_cert))


def test_a_worker_with_a_key_that_is_not_its_certificates_stops_at_start_saying_so(tmp_path: Path) -> None:
    tls = make_mesh_tls(tmp_path / "tls")
    args = ["--port", str(free_port()), "--metrics-port", "0", "--tls-cert", str(tls.worker_cert), "--tls-key", str(tls.gateway_key)]
    result = subprocess.run(service_command("vocoder", args), cwd=REPO_ROOT, capture_output=True, text=True, timeout=240)
    assert result.returncode != 0
    assert f"vocoder: --tls-key {tls.gateway_key} is not the key of the certificate in --tls-cert" in result.stderr
    assert "Traceback" not in result.stderr
