"""A second vocoder started on ports a running one holds stops at once with one line that names the
port and what to do, and a non-zero exit code: no traceback, and no silent sharing of the gRPC port
(gRPC's default SO_REUSEPORT would have let it bind and take half of the connections)."""

from __future__ import annotations

import os
import socket
import subprocess

import pytest

from libs.devmesh.launcher import service_command
from tests.support.mesh import REPO_ROOT, Mesh
from tests.support.ports import free_port

EXIT_TIMEOUT_S = 120.0  # importing torch on two busy cores; the ports are taken before any model loads


def _second_vocoder(port: int, metrics_port: int) -> subprocess.CompletedProcess[str]:
    command = service_command("vocoder", ["--host", "127.0.0.1", "--port", str(port), "--metrics-port", str(metrics_port)])
    return subprocess.run(
        command, cwd=REPO_ROOT, env=dict(os.environ, PYTHONUNBUFFERED="1"), capture_output=True, text=True, timeout=EXIT_TIMEOUT_S
    )


@pytest.mark.parametrize("taken", ["grpc", "metrics"])
def test_a_port_in_use_is_one_clear_line_and_a_nonzero_exit(mesh: Mesh, taken: str) -> None:
    running = mesh.services["vocoder"]
    if taken == "grpc":
        finished = _second_vocoder(running.port, free_port())
        expected = f"cannot listen on gRPC port 127.0.0.1:{running.port}: another process listens there"
        flag = "--port (TTS_PORT)"
    else:
        finished = _second_vocoder(free_port(), running.metrics_port)
        expected = f"cannot serve /metrics on port {running.metrics_port}: another process listens there"
        flag = "--metrics-port (TTS_METRICS_PORT"
    output = finished.stdout + finished.stderr
    assert finished.returncode != 0, output
    errors = [line for line in output.splitlines() if " ERROR " in line or line.startswith("E")]
    assert len(errors) == 1, output
    assert expected in errors[0] and flag in errors[0], errors[0]
    assert "Traceback" not in output and "Event loop is closed" not in output, output


@pytest.mark.parametrize(
    "flag, message",
    [
        ("--health-port", "cannot listen on health port 127.0.0.1:{port}: another process listens there"),
        ("--http-port", "cannot serve HTTP on port {port}: another process listens there"),
    ],
)
def test_a_gateway_whose_health_or_http_port_is_taken_says_so_in_one_line_and_exits_nonzero(flag: str, message: str) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        command = service_command("gateway", [
            "--host", "127.0.0.1", "--port", str(free_port()), "--metrics-port", str(free_port()), "--http-port", "0",
            "--redis-url", "none", flag, str(port),
        ])  # fmt: skip
        finished = subprocess.run(
            command, cwd=REPO_ROOT, env=dict(os.environ, PYTHONUNBUFFERED="1"), capture_output=True, text=True, timeout=EXIT_TIMEOUT_S
        )
    output = finished.stdout + finished.stderr
    assert finished.returncode != 0, output
    errors = [line for line in output.splitlines() if " ERROR " in line or line.startswith("E")]
    assert len(errors) == 1, output
    assert message.format(port=port) in errors[0] and f"{flag} (TTS_" in errors[0], errors[0]
    assert "Traceback" not in output, output
