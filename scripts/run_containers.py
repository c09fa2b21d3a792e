"""`make run-containers`: the mesh in containers (Redis, acoustic, vocoder, gateway, the edge), each its own
container on one network, as the Kubernetes base runs them; in the foreground until Ctrl-C or SIGTERM.

    python -m scripts.run_containers [--zones local] [--edge-port 8080] [--gateway-port 50051] [--image tts-mesh:dev]

Needs a container engine (`make container-engine`) and the image (`make image`). The gateway's gRPC
port and the edge are published on 127.0.0.1, so `make say` and the web page work as with `make run`.
With several zones (`--zones zone-a,zone-b`) each zone has its own acoustic and vocoder container and
the gateway is in the first. Stopping sends SIGTERM to the edge and the gateway first (their streams
drain), then the workers and Redis, and removes every container and the network.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time

from scripts.containers.engine import EngineError
from scripts.containers.mesh import DEFAULT_IMAGE, ContainerMesh


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--zones", default="local", help="comma-separated zones, one acoustic and one vocoder container each")
    parser.add_argument("--edge-port", type=int, default=8080, help="the edge's port on 127.0.0.1")
    parser.add_argument("--gateway-port", type=int, default=50051, help="the gateway's gRPC port on 127.0.0.1")
    parser.add_argument("--threads", type=int, default=1, help="TTS_THREADS of each worker (Kubernetes: the CPU limit)")
    parser.add_argument("--image", default=DEFAULT_IMAGE)
    args = parser.parse_args(argv)
    stop_requested = False

    def request_stop(signum: int, frame: object) -> None:
        nonlocal stop_requested
        stop_requested = True

    signal.signal(signal.SIGINT, request_stop)
    signal.signal(signal.SIGTERM, request_stop)
    mesh = ContainerMesh(
        zones=tuple(zone.strip() for zone in args.zones.split(",") if zone.strip()), image=args.image, worker_threads=args.threads,
        fixed_ports={"gateway": args.gateway_port, "edge": args.edge_port},
    )  # fmt: skip
    print(f"[run-containers] {mesh.engine.name}, image {args.image}, network {mesh.network}; starting (model loading takes a while)", flush=True)
    started = time.monotonic()
    try:
        mesh.start()
    except (EngineError, RuntimeError) as error:
        print(f"[run-containers] {error}", flush=True)
        return 1
    print(f"[run-containers] ready in {time.monotonic() - started:.0f} s: gateway gRPC on {mesh.gateway_address}; "
          f"web page, grpc-web, gRPC and HTTP API through the edge at http://127.0.0.1:{args.edge_port}/. "
          'Try: make say TEXT="Hello."', flush=True)  # fmt: skip
    for service in mesh.services():
        print(f"[run-containers]   {service.name:<18} container {service.container}", flush=True)
    try:
        while not stop_requested:
            for service in mesh.services():
                if not mesh.engine.running(service.container):
                    print(f"[run-containers] {service.name} exited; stopping the rest\n{service.log_tail()}", flush=True)
                    return 1
            time.sleep(1.0)
        return 0
    finally:
        print("[run-containers] stopping", flush=True)
        mesh.stop()


if __name__ == "__main__":
    sys.exit(main())
