"""A second gateway process on a running mesh's workers and Redis, with settings of its own (gateways
start in seconds; workers take a minute)."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

from libs.devmesh.launcher import service_command, stop_processes, wait_until_serving
from tests.support.mesh import REPO_ROOT, Mesh, ServiceProcess
from tests.support.ports import free_port

START_TIMEOUT_S = 120.0


@contextmanager
def extra_gateway(
    mesh: Mesh, log_path: Path, args: Sequence[str] = (), env: Mapping[str, str] | None = None
) -> Iterator[ServiceProcess]:
    """A gateway on `mesh`'s workers and Redis with the mesh's environment and extra `args` and `env`,
    SERVING for the block, then stopped."""
    assert mesh.redis is not None
    port, metrics_port = free_port(), free_port()
    command = service_command("gateway", [
        "--host", "127.0.0.1",
        "--port", str(port),
        "--metrics-port", str(metrics_port),
        "--zone", mesh.zone,
        "--acoustic", f"{mesh.zone}={mesh.services['acoustic'].address}",
        "--vocoder", f"{mesh.zone}={mesh.services['vocoder'].address}",
        "--redis-url", f"redis://127.0.0.1:{mesh.redis.config.port}/0",
        *mesh.gateway_secret_args(),
        "--http-port", "0",  # no HTTP door on the fixed default port, unless `args` asks for one
        *args,
    ])  # fmt: skip
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            command, cwd=REPO_ROOT, env={**os.environ, "PYTHONUNBUFFERED": "1", **mesh.env, **(env or {})}, stdout=log, stderr=subprocess.STDOUT
        )
    gateway = ServiceProcess("gateway", port, metrics_port, log_path, process)
    try:
        try:
            wait_until_serving(gateway.address, process, time.monotonic() + START_TIMEOUT_S)
        except (RuntimeError, TimeoutError) as error:
            raise RuntimeError(f"extra gateway: {error}\n{gateway.log_tail()}") from None
        yield gateway
    finally:
        stop_processes([process])
