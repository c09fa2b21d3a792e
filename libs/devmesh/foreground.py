"""Run a set of services in the foreground until Ctrl-C or SIGTERM, then stop them in order.

Used by the launch scripts (`make run`, `make run-zones`). Children run in their own process group, so the
terminal's Ctrl-C reaches only this supervisor, which then stops them gracefully (SIGTERM, grace
period, SIGKILL), gateways first so no new work reaches workers that are draining.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from libs.devmesh.embedded_redis import EmbeddedRedis, EmbeddedRedisConfig
from libs.devmesh.launcher import service_command, stop_processes, wait_until_serving

DEFAULT_START_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class ServiceSpec:
    """One service process to run."""

    name: str
    """Label in messages, e.g. "acoustic@zone-a"."""
    service: str
    """Which service: "gateway", "acoustic" or "vocoder"."""
    port: int
    """Its gRPC port on 127.0.0.1 (waited on until SERVING)."""
    args: Sequence[str] = ()
    """Command-line flags."""
    env: Mapping[str, str] = field(default_factory=dict)
    """Extra environment variables."""
    credentials: grpc.ChannelCredentials | None = None
    """What its health check needs on a TLS port (a worker with mutual TLS); None: plaintext."""


def run_foreground(specs: Sequence[ServiceSpec], cwd: Path, env: Mapping[str, str], ready_message: str,
                   start_timeout_s: float = DEFAULT_START_TIMEOUT_S,
                   companions: Mapping[str, subprocess.Popen[bytes]] | None = None) -> int:  # fmt: skip
    """Start `specs` in order, wait until each is SERVING, print `ready_message`, supervise until a
    signal or a child's exit; returns the exit status for the launcher. `companions` are processes
    started by the caller (the edge) whose exit also stops the mesh; the caller stops them."""
    stop_requested = False

    def request_stop(signum: int, frame: object) -> None:
        nonlocal stop_requested
        stop_requested = True

    signal.signal(signal.SIGINT, request_stop)
    signal.signal(signal.SIGTERM, request_stop)
    processes: dict[str, subprocess.Popen[bytes]] = {}
    try:
        for spec in specs:
            child_env = {**os.environ, **env, **spec.env, "PYTHONUNBUFFERED": "1"}
            processes[spec.name] = subprocess.Popen(
                service_command(spec.service, spec.args), cwd=cwd, env=child_env, start_new_session=True
            )
        deadline = time.monotonic() + start_timeout_s
        for spec in specs:
            while not stop_requested:  # wait in 1 s steps so Ctrl-C during start-up is honoured
                try:
                    step_deadline = min(deadline, time.monotonic() + 1.0)
                    wait_until_serving(f"127.0.0.1:{spec.port}", processes[spec.name], step_deadline, credentials=spec.credentials)
                    break
                except TimeoutError:
                    if time.monotonic() > deadline:
                        raise
        if not stop_requested:
            print(ready_message, flush=True)
        while not stop_requested:
            for name, process in {**processes, **(companions or {})}.items():
                if process.poll() is not None:
                    print(f"[run] {name} exited with code {process.returncode}; stopping the rest", flush=True)
                    return 1
            time.sleep(0.2)
        return 0
    except (RuntimeError, TimeoutError) as error:
        print(f"[run] {error}; stopping", flush=True)
        return 1
    finally:
        print("[run] stopping services", flush=True)
        order = [spec for spec in specs if spec.service == "gateway"] + [spec for spec in specs if spec.service != "gateway"]
        stop_processes([processes[spec.name] for spec in order if spec.name in processes])


@contextmanager
def redis_unless_configured(port: int, password: str = "") -> Iterator[dict[str, str]]:
    """The environment the services need for their cache: REDIS_URL as given, or else an embedded
    Redis started on `port` (asking for `password`, when given) for the duration of the block."""
    if os.environ.get("REDIS_URL"):
        yield {}
        return
    redis = EmbeddedRedis(EmbeddedRedisConfig(port=port, password=password)).start()
    print(f"[run] redis at {redis.display_url} (maxmemory {redis.config.maxmemory_mb} MiB, allkeys-lru)", flush=True)
    try:
        yield {"REDIS_URL": redis.url}  # in the environment, not on a command line `ps` shows
    finally:
        redis.stop()

