"""`make run`: Redis and the three services in the foreground; Ctrl-C or SIGTERM stops them all.

    python -m scripts.run_mesh [--redis-port 6379]

Each service runs with its defaults (gateway 50051, acoustic 50052, vocoder 50053, zone "local",
metrics 9101-9103), secured with the local secrets made on first run (libs.devmesh.local_secrets):
mutual TLS between the gateway and the workers, a Redis with a password, sealed cache values. The
gateway's public port stays plaintext. With REDIS_URL set, that Redis is used and none is started.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from libs.devmesh.embedded_redis import DEFAULT_REDIS_PORT
from libs.devmesh.foreground import ServiceSpec, redis_unless_configured, run_foreground
from libs.devmesh.local_secrets import ensure_local_secrets
from libs.serving.server import DEFAULT_PORTS

REPO_ROOT = Path(__file__).resolve().parent.parent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--redis-port", type=int, default=DEFAULT_REDIS_PORT, help="port of the embedded Redis")
    args = parser.parse_args(argv)
    secrets = ensure_local_secrets()
    print(f"[run] mutual TLS between gateway and workers, sealed cache values; secrets in {secrets.tls.directory.parent}", flush=True)
    specs = [
        ServiceSpec(name, name, DEFAULT_PORTS[name], secrets.service_args(name), credentials=secrets.health_credentials(name))
        for name in ("acoustic", "vocoder", "gateway")
    ]
    ready = f'[run] ready: gateway on 127.0.0.1:{DEFAULT_PORTS["gateway"]}. Try: make say TEXT="Hello."'
    with redis_unless_configured(args.redis_port, secrets.redis_password) as env:
        return run_foreground(specs, REPO_ROOT, env, ready)


if __name__ == "__main__":
    sys.exit(main())
