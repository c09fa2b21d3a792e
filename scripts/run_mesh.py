"""`make run`: Redis, the three services and the edge in the foreground; Ctrl-C or SIGTERM stops them all.

    python -m scripts.run_mesh [--port-offset 0] [--redis-port 6379] [--edge-port 8080] [--grpc-port 50051] [--no-edge]

Each service runs with its defaults (gateway 50051 for gRPC and 8000 for HTTP, acoustic 50052,
vocoder 50053, zone "local", metrics 9101-9103), secured with the local secrets made on first run
(libs.devmesh.local_secrets): mutual TLS between the gateway and the workers, a Redis with a
password, sealed cache values. The gateway's public ports stay plaintext; its Wyoming door (Home
Assistant) listens on 127.0.0.1:10200. In front of it the edge
(Envoy, libs.edge) listens on 8080: the web page at /, grpc-web for browsers, plain gRPC and the
HTTP API, all on one port. With REDIS_URL set, that Redis is used and none is started.
On a host where one of these ports is taken, `--port-offset N` moves every one of them by N (Redis,
gRPC, HTTP, Wyoming, metrics, the edge and its admin port); `--grpc-port` moves the three gRPC ports
alone (gateway on it, acoustic and vocoder on the next two), and `--redis-port` and `--edge-port`
their own.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from libs.devmesh.embedded_redis import DEFAULT_REDIS_PORT
from libs.devmesh.foreground import ServiceSpec, redis_unless_configured, run_foreground
from libs.devmesh.local_secrets import ensure_local_secrets
from libs.edge.envoy import DEFAULT_ADMIN_PORT, DEFAULT_EDGE_PORT, EdgeSettings
from libs.edge.process import EdgeProcess
from libs.serving.http import DEFAULT_HTTP_PORT
from libs.serving.server import DEFAULT_METRICS_PORTS, DEFAULT_PORTS, DEFAULT_ZONE
from libs.serving.wyoming import DEFAULT_WYOMING_PORT_CONVENTION

REPO_ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class MeshPorts:
    """Every port one `make run` mesh listens on."""

    redis: int = DEFAULT_REDIS_PORT
    edge: int = DEFAULT_EDGE_PORT
    edge_admin: int = DEFAULT_ADMIN_PORT
    grpc: int = DEFAULT_PORTS["gateway"]
    """The gateway's gRPC port; the acoustic and vocoder workers listen on the next two."""
    http: int = DEFAULT_HTTP_PORT
    wyoming: int = DEFAULT_WYOMING_PORT_CONVENTION
    metrics: Mapping[str, int] = field(default_factory=lambda: dict(DEFAULT_METRICS_PORTS))

    def moved(self, offset: int) -> MeshPorts:
        """Every port moved by `offset`."""
        return MeshPorts(
            redis=self.redis + offset, edge=self.edge + offset, edge_admin=self.edge_admin + offset, grpc=self.grpc + offset,
            http=self.http + offset, wyoming=self.wyoming + offset,
            metrics={service: port + offset for service, port in self.metrics.items()},
        )  # fmt: skip

    @property
    def grpc_ports(self) -> dict[str, int]:
        """Each service's gRPC port."""
        return {"gateway": self.grpc, "acoustic": self.grpc + 1, "vocoder": self.grpc + 2}

    def all(self) -> list[int]:
        """Every port, each once."""
        return [self.redis, self.edge, self.edge_admin, *self.grpc_ports.values(), self.http, self.wyoming, *self.metrics.values()]


def main(argv: list[str] | None = None) -> int:
    defaults = MeshPorts()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port-offset", type=int, default=0, help="move every port below by this much (default 0)")
    parser.add_argument("--redis-port", type=int, help=f"port of the embedded Redis (default {defaults.redis})")
    parser.add_argument("--edge-port", type=int, help=f"the edge's one public port (default {defaults.edge})")
    parser.add_argument(
        "--grpc-port", type=int, help=f"the gateway's gRPC port (default {defaults.grpc}); the acoustic and vocoder workers listen on the next two"
    )
    parser.add_argument("--no-edge", action="store_true", help="run without the edge (the gateway's own ports only)")
    args = parser.parse_args(argv)
    ports = defaults.moved(args.port_offset)
    chosen = {"redis": args.redis_port, "edge": args.edge_port, "grpc": args.grpc_port}
    ports = replace(ports, **{name: port for name, port in chosen.items() if port is not None})
    if not all(1 <= port <= 65535 for port in ports.all()):
        parser.error(f"ports must lie in 1..65535; with these flags they span {min(ports.all())}..{max(ports.all())}")
    secrets = ensure_local_secrets()
    print(f"[run] mutual TLS between gateway and workers, sealed cache values; secrets in {secrets.tls.directory.parent}", flush=True)
    # Behind the edge every request comes from 127.0.0.1: the gateway counts per-client limits by
    # the address the edge forwarded for instead (libs/serving/clients.py).
    behind_edge = [] if args.no_edge else ["--trusted-proxies=127.0.0.1,::1"]
    # Home Assistant's Wyoming door, on this host only (it has no authentication of its own).
    wyoming = [f"--wyoming-port={ports.wyoming}", "--wyoming-host=127.0.0.1"]
    grpc_ports = ports.grpc_ports
    gateway = [*behind_edge, *wyoming, f"--http-port={ports.http}"]
    gateway += [f"--{kind}={DEFAULT_ZONE}=127.0.0.1:{grpc_ports[kind]}" for kind in ("acoustic", "vocoder")]
    specs = [
        ServiceSpec(
            name, name, grpc_ports[name],
            [f"--port={grpc_ports[name]}", f"--metrics-port={ports.metrics[name]}", *secrets.service_args(name),
             *(gateway if name == "gateway" else [])],
            credentials=secrets.health_credentials(name),
        )
        for name in ("acoustic", "vocoder", "gateway")
    ]  # fmt: skip
    ready = f"[run] ready: gateway on 127.0.0.1:{ports.grpc} (HTTP {ports.http}), Wyoming on 127.0.0.1:{ports.wyoming}"
    if not args.no_edge:
        ready += f"; web page, grpc-web, gRPC and HTTP API through the edge at http://127.0.0.1:{ports.edge}/"
    moved = "" if ports.grpc == defaults.grpc else f" TTS_MESH_ADDRESS=127.0.0.1:{ports.grpc}"
    ready += f'. Try: make say TEXT="Hello."{moved}'
    with contextlib.ExitStack() as stack:
        env = stack.enter_context(redis_unless_configured(ports.redis, secrets.redis_password))
        companions = {}
        if not args.no_edge:
            edge = stack.enter_context(EdgeProcess(_edge_settings(ports)))
            print(f"[run] edge (Envoy) on 127.0.0.1:{ports.edge}, admin on 127.0.0.1:{edge.settings.admin_port}", flush=True)
            companions["edge"] = edge.process
        return run_foreground(specs, REPO_ROOT, env, ready, companions=companions)


def _edge_settings(ports: MeshPorts) -> EdgeSettings:
    return EdgeSettings(
        port=ports.edge,
        admin_port=ports.edge_admin,
        gateway_grpc_port=ports.grpc,
        gateway_http_port=ports.http,
        cors_origins=(f"http://localhost:{ports.edge}", f"http://127.0.0.1:{ports.edge}"),
    )


if __name__ == "__main__":
    sys.exit(main())
