"""`make run`: Redis and the three services in the foreground; Ctrl-C or SIGTERM stops them all.

    python -m scripts.run_mesh [--redis-port 6379]

Each service runs with its defaults (gateway 50051, acoustic 50052, vocoder 50053, zone "local",
metrics 9101-9103). With REDIS_URL set, that Redis is used and none is started.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from libs.mesh.embedded_redis import DEFAULT_REDIS_PORT, EmbeddedRedis, EmbeddedRedisConfig
from libs.mesh.launcher import service_command, stop_processes, wait_until_serving
from libs.mesh.settings import DEFAULT_PORTS

REPO_ROOT = Path(__file__).resolve().parent.parent
START_TIMEOUT_S = 300.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--redis-port", type=int, default=DEFAULT_REDIS_PORT, help="port of the embedded Redis")
    args = parser.parse_args(argv)

    stop_requested = False

    def request_stop(signum: int, frame: object) -> None:
        nonlocal stop_requested
        stop_requested = True

    signal.signal(signal.SIGINT, request_stop)
    signal.signal(signal.SIGTERM, request_stop)

    redis: EmbeddedRedis | None = None
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    if not env.get("REDIS_URL"):
        redis = EmbeddedRedis(EmbeddedRedisConfig(port=args.redis_port)).start()
        env["REDIS_URL"] = redis.url
        print(f"[run] redis at {redis.url} (maxmemory {redis.config.maxmemory_mb} MiB, allkeys-lru)", flush=True)
    processes: dict[str, subprocess.Popen[bytes]] = {}
    try:
        for name in ("acoustic", "vocoder", "gateway"):
            # The children ignore the terminal's Ctrl-C (own process group); this launcher stops them in order.
            processes[name] = subprocess.Popen(service_command(name), cwd=REPO_ROOT, env=env, start_new_session=True)
        deadline = time.monotonic() + START_TIMEOUT_S
        for name in ("acoustic", "vocoder", "gateway"):
            while not stop_requested:  # wait in 1 s steps so Ctrl-C during start-up is honoured
                try:
                    wait_until_serving(f"127.0.0.1:{DEFAULT_PORTS[name]}", processes[name], min(deadline, time.monotonic() + 1.0))
                    break
                except TimeoutError:
                    if time.monotonic() > deadline:
                        raise
        if not stop_requested:
            print(f"[run] ready: gateway on 127.0.0.1:{DEFAULT_PORTS['gateway']}. Try: make say TEXT=\"Hello.\"", flush=True)
        while not stop_requested:
            for name, process in processes.items():
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
        # Gateway first, so no new work reaches the workers while they drain.
        stop_processes([processes[name] for name in ("gateway", "vocoder", "acoustic") if name in processes])
        if redis is not None:
            redis.stop()


if __name__ == "__main__":
    sys.exit(main())
