"""`make run-zones`: two zones (one acoustic and one vocoder worker each), Redis, and a gateway in the
first zone, in the foreground; Ctrl-C or SIGTERM stops them all.

    python -m scripts.run_zones [--redis-port 6379]

Ports: gateway 50051 (metrics 9101); zone-a acoustic 50052, vocoder 50053 (metrics 9102, 9103);
zone-b acoustic 50062, vocoder 50063 (metrics 9112, 9113). The gateway prefers zone-a and fails
over to zone-b: stop a zone-a worker (`kill -9 <pid>`) while `make say` runs and the audio goes on.
Secured as `make run` is (scripts/run_mesh.py). With REDIS_URL set, that Redis is used and none is started.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from libs.devmesh.embedded_redis import DEFAULT_REDIS_PORT
from libs.devmesh.foreground import ServiceSpec, redis_unless_configured, run_foreground
from libs.devmesh.local_secrets import LocalSecrets, ensure_local_secrets
from libs.serving.server import DEFAULT_METRICS_PORTS, DEFAULT_PORTS

REPO_ROOT = Path(__file__).resolve().parent.parent
ZONES = ("zone-a", "zone-b")
ZONE_PORT_STEP = 10
"""Zone i's workers listen on the default worker ports plus i * 10 (gRPC and metrics alike)."""


def zone_specs(secrets: LocalSecrets | None = None) -> list[ServiceSpec]:
    """The workers of every zone, then the gateway in the first zone, wired to all of them; secured
    with `secrets` (None: plaintext)."""
    specs: list[ServiceSpec] = []
    gateway_args = ["--zone", ZONES[0]]
    for index, zone in enumerate(ZONES):
        for kind in ("acoustic", "vocoder"):
            port = DEFAULT_PORTS[kind] + index * ZONE_PORT_STEP
            metrics_port = DEFAULT_METRICS_PORTS[kind] + index * ZONE_PORT_STEP
            args = ["--zone", zone, "--port", str(port), "--metrics-port", str(metrics_port)]
            credentials = None
            if secrets is not None:
                args += secrets.service_args(kind)
                credentials = secrets.health_credentials(kind)
            specs.append(ServiceSpec(f"{kind}@{zone}", kind, port, args, credentials=credentials))
            gateway_args += [f"--{kind}", f"{zone}=127.0.0.1:{port}"]
    if secrets is not None:
        gateway_args += secrets.service_args("gateway")
    specs.append(ServiceSpec(f"gateway@{ZONES[0]}", "gateway", DEFAULT_PORTS["gateway"], gateway_args))
    return specs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--redis-port", type=int, default=DEFAULT_REDIS_PORT, help="port of the embedded Redis")
    args = parser.parse_args(argv)
    ready = (
        f"[run] ready: gateway ({ZONES[0]}) on 127.0.0.1:{DEFAULT_PORTS['gateway']}, workers in {', '.join(ZONES)}. "
        'Try: make say TEXT="Hello."'
    )
    secrets = ensure_local_secrets()
    with redis_unless_configured(args.redis_port, secrets.redis_password) as env:
        return run_foreground(zone_specs(secrets), REPO_ROOT, env, ready)

if __name__ == "__main__":
    sys.exit(main())
