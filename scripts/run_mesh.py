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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port-offset", type=int, default=0, help="move every port below by this much (default 0)")
    parser.add_argument("--redis-port", type=int, help=f"port of the embedded Redis (default {DEFAULT_REDIS_PORT})")
    parser.add_argument("--edge-port", type=int, help=f"the edge's one public port (default {DEFAULT_EDGE_PORT})")
    parser.add_argument(
        "--grpc-port", type=int,
        help=f"the gateway's gRPC port (default {DEFAULT_PORTS['gateway']}); the acoustic and vocoder workers listen on the next two",
    )  # fmt: skip
    parser.add_argument("--no-edge", action="store_true", help="run without the edge (the gateway's own ports only)")
    args = parser.parse_args(argv)
    offset = args.port_offset
    redis_port = DEFAULT_REDIS_PORT + offset if args.redis_port is None else args.redis_port
    edge_port = DEFAULT_EDGE_PORT + offset if args.edge_port is None else args.edge_port
    grpc_port = DEFAULT_PORTS["gateway"] + offset if args.grpc_port is None else args.grpc_port
    http_port, wyoming_port = DEFAULT_HTTP_PORT + offset, DEFAULT_WYOMING_PORT_CONVENTION + offset
    every_port = [redis_port, edge_port, grpc_port, grpc_port + 2, http_port, wyoming_port, DEFAULT_ADMIN_PORT + offset,
                  *(port + offset for port in DEFAULT_METRICS_PORTS.values())]  # fmt: skip
    if not all(1 <= port <= 65535 for port in every_port):
        parser.error(f"ports must lie in 1..65535; with these flags they span {min(every_port)}..{max(every_port)}")
    secrets = ensure_local_secrets()
    print(f"[run] mutual TLS between gateway and workers, sealed cache values; secrets in {secrets.tls.directory.parent}", flush=True)
    # Behind the edge every request comes from 127.0.0.1: the gateway counts per-client limits by
    # the address the edge forwarded for instead (libs/serving/clients.py).
    behind_edge = [] if args.no_edge else ["--trusted-proxies=127.0.0.1,::1"]
    # Home Assistant's Wyoming door, on this host only (it has no authentication of its own).
    wyoming = [f"--wyoming-port={wyoming_port}", "--wyoming-host=127.0.0.1"]
    ports = {"gateway": grpc_port, "acoustic": grpc_port + 1, "vocoder": grpc_port + 2}
    gateway = [*behind_edge, *wyoming, f"--http-port={http_port}"]
    gateway += [f"--{kind}={DEFAULT_ZONE}=127.0.0.1:{ports[kind]}" for kind in ("acoustic", "vocoder")]
    specs = [
        ServiceSpec(
            name, name, ports[name],
            [f"--port={ports[name]}", f"--metrics-port={DEFAULT_METRICS_PORTS[name] + offset}", *secrets.service_args(name),
             *(gateway if name == "gateway" else [])],
            credentials=secrets.health_credentials(name),
        )
        for name in ("acoustic", "vocoder", "gateway")
    ]  # fmt: skip
    ready = f"[run] ready: gateway on 127.0.0.1:{grpc_port} (HTTP {http_port}), Wyoming on 127.0.0.1:{wyoming_port}"
    if not args.no_edge:
        ready += f"; web page, grpc-web, gRPC and HTTP API through the edge at http://127.0.0.1:{edge_port}/"
    moved = "" if grpc_port == DEFAULT_PORTS["gateway"] else f" TTS_MESH_ADDRESS=127.0.0.1:{grpc_port}"
    ready += f'. Try: make say TEXT="Hello."{moved}'
    with contextlib.ExitStack() as stack:
        env = stack.enter_context(redis_unless_configured(redis_port, secrets.redis_password))
        companions = {}
        if not args.no_edge:
            edge = stack.enter_context(EdgeProcess(_edge_settings(edge_port, DEFAULT_ADMIN_PORT + offset, grpc_port, http_port)))
            print(f"[run] edge (Envoy) on 127.0.0.1:{edge_port}, admin on 127.0.0.1:{edge.settings.admin_port}", flush=True)
            companions["edge"] = edge.process
        return run_foreground(specs, REPO_ROOT, env, ready, companions=companions)


def _edge_settings(port: int, admin_port: int, gateway_grpc_port: int, gateway_http_port: int) -> EdgeSettings:
    return EdgeSettings(
        port=port,
        admin_port=admin_port,
        gateway_grpc_port=gateway_grpc_port,
        gateway_http_port=gateway_http_port,
        cors_origins=(f"http://localhost:{port}", f"http://127.0.0.1:{port}"),
    )


if __name__ == "__main__":
    sys.exit(main())
