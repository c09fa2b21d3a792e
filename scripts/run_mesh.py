"""`make run`: Redis, the three services and the edge in the foreground; Ctrl-C or SIGTERM stops them all.

    python -m scripts.run_mesh [--redis-port 6379] [--edge-port 8080] [--grpc-port 50051] [--no-edge]

Each service runs with its defaults (gateway 50051 for gRPC and 8000 for HTTP, acoustic 50052,
vocoder 50053, zone "local", metrics 9101-9103), secured with the local secrets made on first run
(libs.devmesh.local_secrets): mutual TLS between the gateway and the workers, a Redis with a
password, sealed cache values. The gateway's public ports stay plaintext; its Wyoming door (Home
Assistant) listens on 127.0.0.1:10200. In front of it the edge
(Envoy, libs.edge) listens on 8080: the web page at /, grpc-web for browsers, plain gRPC and the
HTTP API, all on one port. With REDIS_URL set, that Redis is used and none is started.
`--grpc-port` moves the three gRPC ports together (gateway on it, acoustic and vocoder on the next
two), for a host where 50051, the usual port of gRPC examples, is already taken.
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
from libs.serving.server import DEFAULT_PORTS, DEFAULT_ZONE
from libs.serving.wyoming import DEFAULT_WYOMING_PORT_CONVENTION

REPO_ROOT = Path(__file__).resolve().parent.parent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--redis-port", type=int, default=DEFAULT_REDIS_PORT, help="port of the embedded Redis")
    parser.add_argument("--edge-port", type=int, default=DEFAULT_EDGE_PORT, help="the edge's one public port")
    parser.add_argument(
        "--grpc-port", type=int, default=DEFAULT_PORTS["gateway"],
        help="the gateway's gRPC port; the acoustic and vocoder workers listen on the next two",
    )  # fmt: skip
    parser.add_argument("--no-edge", action="store_true", help="run without the edge (the gateway's own ports only)")
    args = parser.parse_args(argv)
    secrets = ensure_local_secrets()
    print(f"[run] mutual TLS between gateway and workers, sealed cache values; secrets in {secrets.tls.directory.parent}", flush=True)
    # Behind the edge every request comes from 127.0.0.1: the gateway counts per-client limits by
    # the address the edge forwarded for instead (libs/serving/clients.py).
    behind_edge = [] if args.no_edge else ["--trusted-proxies=127.0.0.1,::1"]
    # Home Assistant's Wyoming door, on this host only (it has no authentication of its own).
    wyoming = [f"--wyoming-port={DEFAULT_WYOMING_PORT_CONVENTION}", "--wyoming-host=127.0.0.1"]
    ports = {"gateway": args.grpc_port, "acoustic": args.grpc_port + 1, "vocoder": args.grpc_port + 2}
    workers = [f"--{kind}={DEFAULT_ZONE}=127.0.0.1:{ports[kind]}" for kind in ("acoustic", "vocoder")]
    specs = [
        ServiceSpec(
            name, name, ports[name],
            [f"--port={ports[name]}", *secrets.service_args(name), *(behind_edge + wyoming + workers if name == "gateway" else [])],
            credentials=secrets.health_credentials(name),
        )
        for name in ("acoustic", "vocoder", "gateway")
    ]  # fmt: skip
    ready = f"[run] ready: gateway on 127.0.0.1:{args.grpc_port}, Wyoming on 127.0.0.1:{DEFAULT_WYOMING_PORT_CONVENTION}"
    if not args.no_edge:
        ready += f"; web page, grpc-web, gRPC and HTTP API through the edge at http://127.0.0.1:{args.edge_port}/"
    ready += '. Try: make say TEXT="Hello."'
    with contextlib.ExitStack() as stack:
        env = stack.enter_context(redis_unless_configured(args.redis_port, secrets.redis_password))
        companions = {}
        if not args.no_edge:
            edge = stack.enter_context(EdgeProcess(_edge_settings(args.edge_port, args.grpc_port)))
            print(f"[run] edge (Envoy) on 127.0.0.1:{args.edge_port}, admin on 127.0.0.1:{edge.settings.admin_port}", flush=True)
            companions["edge"] = edge.process
        return run_foreground(specs, REPO_ROOT, env, ready, companions=companions)


def _edge_settings(port: int, gateway_grpc_port: int) -> EdgeSettings:
    return EdgeSettings(
        port=port,
        admin_port=DEFAULT_ADMIN_PORT,
        gateway_grpc_port=gateway_grpc_port,
        gateway_http_port=DEFAULT_HTTP_PORT,
        cors_origins=(f"http://localhost:{port}", f"http://127.0.0.1:{port}"),
    )


if __name__ == "__main__":
    sys.exit(main())
