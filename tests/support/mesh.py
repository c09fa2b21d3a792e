"""Start Redis and the three services as real processes on free loopback ports; stop them cleanly.

Secured by default as `make run` is (libs.devmesh.local_secrets, made in the log folder): mutual
TLS between the gateway and the workers, a Redis with a password, sealed cache values. The
gateway's public port is plaintext.
"""

from __future__ import annotations

import os
import subprocess
import time
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from prometheus_client.parser import text_string_to_metric_families

from libs.devmesh.embedded_redis import EmbeddedRedis, EmbeddedRedisConfig
from libs.devmesh.launcher import service_command, stop_processes, wait_until_serving
from libs.devmesh.local_secrets import LocalSecrets, ensure_local_secrets
from libs.upstream.loads import LOAD_POLL_S
from tests.support.ports import free_port

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_START_TIMEOUT_S = 240.0  # model loading and warm-up on two shared cores

NO_REALTIME_ADMISSION: Mapping[str, str] = {"TTS_REALTIME_HEADROOM": "0", "TTS_ADMISSION_HEADROOM": "0"}
"""Real-time admission off, on the workers and the gateway. What it admits depends on the machine:
at a quarter of a fast machine's speed a mesh plays one or two listeners in real time, and rightly
refuses a third. Meshes of tests about anything else (failover, cancels, limits, caches) run without
it, so they hold on any machine; admission is tested on meshes of its own."""


@dataclass
class ServiceProcess:
    """One running service."""

    name: str
    port: int
    metrics_port: int
    log_path: Path
    process: subprocess.Popen[bytes]

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def log_tail(self, lines: int = 40) -> str:
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])


@dataclass
class Mesh:
    """A running mesh: Redis, acoustic, vocoder and gateway, each a separate process."""

    log_dir: Path
    zone: str = "local"
    redis: EmbeddedRedis | None = None
    services: dict[str, ServiceProcess] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    """Extra environment variables for every service process (e.g. OTEL_* settings)."""

    http_port: int = 0
    """The gateway's HTTP API port (a free one, chosen at start)."""
    secure: bool = True
    """Mutual TLS to the workers, a Redis password and sealed cache values (False: all plaintext)."""
    secrets: LocalSecrets | None = None
    """The secrets in use (made at start when `secure`)."""
    admission_headroom: float | None = None
    """The gateway's --admission-headroom (None: its default; 0: no real-time admission)."""
    preexec: Callable[[], None] | None = None
    """Run in each service process before it starts (e.g. joining a CPU quota's cgroup)."""
    redis_url: str = ""
    """A Redis of the caller's for the gateway (a cluster, say); empty: an embedded one is started."""
    gateway_args: list[str] = field(default_factory=list)
    """Extra flags for the gateway (`--redis-cluster true` with a cluster's `redis_url`)."""
    workers_of: Mesh | None = None
    """A running mesh whose acoustic and vocoder workers this one's gateway uses, with its secrets,
    instead of starting workers of its own: a mesh that differs from it only in its gateway or its
    Redis then costs a gateway's start, not three services' (a worker's start is most of what a mesh
    costs). `stop` leaves them running. `env` reaches this mesh's gateway only."""

    @property
    def gateway_address(self) -> str:
        return self.services["gateway"].address

    @property
    def http_url(self) -> str:
        """Base URL of the gateway's HTTP API."""
        return f"http://127.0.0.1:{self.http_port}"

    def start(self, timeout_s: float = DEFAULT_START_TIMEOUT_S) -> Mesh:
        """Start everything and wait until each service reports SERVING."""
        if self.workers_of is not None:
            self.secure, self.secrets = self.workers_of.secure, self.workers_of.secrets
        else:
            self.secrets = ensure_local_secrets(self.log_dir / "secrets") if self.secure else None
        password = self.secrets.redis_password if self.secrets else ""
        if not self.redis_url:
            self.redis = EmbeddedRedis(EmbeddedRedisConfig(port=free_port(), maxmemory_mb=64, password=password)).start()
        try:
            if self.workers_of is not None:
                acoustic, vocoder = (self.workers_of.services[name] for name in ("acoustic", "vocoder"))
                self.services.update(acoustic=acoustic, vocoder=vocoder)
            else:
                acoustic = self._spawn("acoustic", self.secrets.service_args("acoustic") if self.secrets else [])
                vocoder = self._spawn("vocoder", self.secrets.service_args("vocoder") if self.secrets else [])
            self.http_port = free_port()
            self._spawn(
                "gateway",
                [
                    "--acoustic", f"{self.zone}={acoustic.address}",
                    "--vocoder", f"{self.zone}={vocoder.address}",
                    "--redis-url", self.redis_url or f"redis://127.0.0.1:{self.redis.config.port}/0",  # type: ignore[union-attr]
                    "--http-port", str(self.http_port),
                    *(["--admission-headroom", str(self.admission_headroom)] if self.admission_headroom is not None else []),
                    *self.gateway_args,
                    *self.gateway_secret_args(),
                ],
            )  # fmt: skip
            deadline = time.monotonic() + timeout_s
            for name in ("acoustic", "vocoder", "gateway"):
                self._wait_serving(self.services[name], deadline)
        except BaseException:
            self.stop()
            raise
        return self

    def gateway_secret_args(self) -> list[str]:
        """A gateway's flags for this mesh's secrets: worker TLS, cache key, and the password file of the
        mesh's own Redis (a caller's `redis_url` brings its own credentials, if any)."""
        if self.secrets is None:
            return []
        password = [] if self.redis_url else ["--redis-password-file", str(self.secrets.redis_password_file)]
        return [*self.secrets.service_args("gateway"), *password]

    def worker_channel(self, name: str) -> grpc.Channel:
        """A channel to worker `name` as the gateway dials it (with its client certificate when secure)."""
        address = self.services[name].address
        if self.secrets is None:
            return grpc.insecure_channel(address)
        return grpc.secure_channel(address, self.secrets.tls.client_credentials())

    def stop(self) -> None:
        """SIGTERM every service it started (then SIGKILL after 15 s) and stop Redis."""
        borrowed = self.workers_of.services.values() if self.workers_of is not None else ()
        stop_processes([service.process for service in self.services.values() if service not in borrowed])
        self.services.clear()
        if self.redis is not None:
            self.redis.stop()
            self.redis = None

    def metrics(self, name: str) -> dict[str, float]:
        """Current samples of a service's /metrics, keyed as `name{label="v",...}`."""
        url = f"http://127.0.0.1:{self.services[name].metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as reply:
            text = reply.read().decode()
        samples: dict[str, float] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
                samples[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
        return samples

    def metric(self, name: str, key: str) -> float:
        """One sample's value (0 when the series does not exist yet)."""
        return self.metrics(name).get(key, 0.0)

    def wait_idle(self, timeout_s: float = 60.0) -> None:
        """Wait until no stream is open anywhere in the mesh (an earlier test's may still be winding
        down on a slow machine), and then for the gateway to have heard that from the workers."""
        deadline = time.monotonic() + timeout_s
        while any(self.metric(name, f"tts_{name}_inflight_streams") > 0 for name in ("acoustic", "vocoder")) or (
            self.metric("gateway", "tts_gateway_realtime_listeners") > 0
        ):
            assert time.monotonic() < deadline, "the mesh still has streams open"
            time.sleep(0.1)
        time.sleep(2 * LOAD_POLL_S)  # the gateway asks the workers' loads this often

    def _spawn(self, name: str, extra_args: list[str]) -> ServiceProcess:
        port, metrics_port = free_port(), free_port()
        log_path = self.log_dir / f"{name}.log"
        env = dict(os.environ, PYTHONUNBUFFERED="1", **self.env)
        args = service_command(name, [
            "--host", "127.0.0.1",
            "--port", str(port),
            "--metrics-port", str(metrics_port),
            "--zone", self.zone,
            *(["--threads", "1"] if name != "gateway" else []),
            *extra_args,
        ])  # fmt: skip
        with log_path.open("wb") as log:
            process = subprocess.Popen(args, cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, preexec_fn=self.preexec)
        service = ServiceProcess(name, port, metrics_port, log_path, process)
        self.services[name] = service
        return service

    def _wait_serving(self, service: ServiceProcess, deadline: float) -> None:
        credentials = self.secrets.health_credentials(service.name) if self.secrets else None
        try:
            wait_until_serving(service.address, service.process, deadline, credentials=credentials)
        except (RuntimeError, TimeoutError) as error:
            raise RuntimeError(f"{service.name}: {error}\n{service.log_tail()}") from None
