"""Starting services as child processes and waiting for them to be SERVING (used by `make run` and tests)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Sequence

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc


def service_command(service: str, args: Sequence[str] = ()) -> list[str]:
    """The command line that runs `service` with this interpreter."""
    return [sys.executable, "-m", f"services.{service}", *args]


def wait_until_serving(
    address: str,
    process: subprocess.Popen[bytes],
    deadline: float,
    poll_s: float = 0.2,
    credentials: grpc.ChannelCredentials | None = None,
) -> None:
    """Poll grpc.health.v1 at `address` until SERVING; RuntimeError if the process dies, TimeoutError past `deadline`.

    `credentials` for a TLS port (a worker with mutual TLS wants the gateway's certificate); None: plaintext.
    """
    channel = grpc.insecure_channel(address) if credentials is None else grpc.secure_channel(address, credentials)
    with channel:
        stub = health_pb2_grpc.HealthStub(channel)
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"the process serving {address} exited with code {process.returncode}")
            try:
                reply = stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=1.0)
                if reply.status == health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.RpcError:
                pass  # not listening yet
            if time.monotonic() > deadline:
                raise TimeoutError(f"{address} was not SERVING in time")
            time.sleep(poll_s)


def stop_processes(processes: Sequence[subprocess.Popen[bytes]], timeout_s: float = 15.0) -> None:
    """SIGTERM all (graceful shutdown), then SIGKILL whatever is still alive after `timeout_s`."""
    for process in processes:
        if process.poll() is None:
            process.terminate()
    deadline = time.monotonic() + timeout_s
    for process in processes:
        try:
            process.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
