"""The mesh on a Redis Cluster with replicas (tests/support/faults/redis_cluster.py): eight client
streams at a time through a master killed (its replica elected) and a reshard that moves every
sentence's slot, with no client error; the cache fails open while the master is gone and hits
again after, on the promoted replica and on the slots' new master.

The gateway speaks to the cluster as in production (`--redis-cluster true`), without a password (the
test cluster has none), and to the session mesh's workers, the real ones, over mutual TLS.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import grpc
import pytest
from redis.cluster import key_slot

from libs.voice.assets import default_voice_assets
from tests.support.faults.redis_cluster import LocalRedisCluster
from tests.support.faults.scenarios import unique
from tests.support.faults.zone_mesh import metric_sum, speak, wait_for
from tests.support.mesh import NO_REALTIME_ADMISSION, Mesh

pytestmark = [
    pytest.mark.timeout(900),
    pytest.mark.skipif(
        not default_voice_assets().mel_head_path.exists(),
        reason="the default voice's trained weights (assets/voices/en_US-joe-medium) are not built yet",
    ),
]
STREAMS = 8
PHASE_TIMEOUT_S = 240.0
SENTENCES = [f"Sentence {index} of the cluster test is short." for index in range(16)]


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalRedisCluster]:
    with LocalRedisCluster(masters=3, replicas=1) as running:
        yield running


@pytest.fixture(scope="module")
def cluster_mesh(mesh: Mesh, cluster: LocalRedisCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mesh]:
    # Admission by real-time capacity off, at the workers and at the gateway: on a busy machine either
    # may refuse some of eight streams, which is the mesh's answer to its load, not the cache's; here
    # every stream is taken, at whatever pace, so each client error would be one the cluster caused.
    running = Mesh(
        log_dir=tmp_path_factory.mktemp("cluster-mesh"), redis_url=cluster.url, gateway_args=["--redis-cluster", "true"],
        env=dict(NO_REALTIME_ADMISSION), workers_of=mesh,
    )
    running.start()
    try:
        yield running
    finally:
        running.stop()


class Load:
    """`STREAMS` client threads, each speaking the test's sentences in turn until stopped."""

    def __init__(self, address: str, texts: list[str]) -> None:
        self.address = address
        self.texts = texts
        self.completed = 0
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._run, args=(offset,)) for offset in range(STREAMS)]

    def __enter__(self) -> Load:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join()

    def _run(self, offset: int) -> None:
        index = offset
        while not self._stop.is_set():
            try:
                spoken = speak(self.address, self.texts[index % len(self.texts)], timeout_s=60)
                error = "" if spoken.samples.size else "no audio"
            except grpc.RpcError as failure:
                error = f"{failure.code().name}: {failure.details()}"  # type: ignore[attr-defined]
            with self._lock:
                if error:
                    self.errors.append(error)
                else:
                    self.completed += 1
            index += STREAMS


def _cache_outcomes(mesh: Mesh) -> dict[str, float]:
    samples = mesh.metrics("gateway")
    return {outcome: metric_sum(samples, "tts_gateway_cache_operations_total", outcome=outcome) for outcome in ("hit", "miss", "error", "skipped")}


def test_eight_streams_see_no_error_through_a_master_failover_and_a_reshard(cluster: LocalRedisCluster, cluster_mesh: Mesh) -> None:
    # Each phase lasts until what it waits for has happened, not a fixed time: a slow machine speaks
    # fewer sentences a second.
    texts = [unique(text) for text in SENTENCES]
    with Load(cluster_mesh.gateway_address, texts) as load:
        wait_for(
            lambda: load.completed >= len(texts) and _cache_outcomes(cluster_mesh)["hit"] >= 1,
            PHASE_TIMEOUT_S,
            what="every sentence spoken and cached once, and the cache in use",
        )
        before_kill = _cache_outcomes(cluster_mesh)
        cluster.kill(0)
        promoted = cluster.wait_failover(0)

        def failover_felt_and_over() -> bool:
            now = _cache_outcomes(cluster_mesh)
            return now["error"] + now["skipped"] > before_kill["error"] + before_kill["skipped"] and now["hit"] > before_kill["hit"] + STREAMS

        # The cache failed open while the master was gone, and hits again on the promoted replica.
        wait_for(failover_felt_and_over, PHASE_TIMEOUT_S, what="the failover felt, then cache hits again")
        after_failover = _cache_outcomes(cluster_mesh)
        # Move every slot that holds cache entries now and is not on master 2 there, while they are read.
        slots = {key_slot(key) for index in range(len(cluster.ports)) if cluster.alive(index) and cluster.is_master(index)
                 for key in cluster.node(index).keys("tts:*")}  # fmt: skip
        moving = sorted(slot for slot in slots if cluster.master_of_slot(slot) != 2)
        moved = cluster.migrate_slots(moving, 2, pause_s=0.02)
        completed_at_reshard = load.completed
        wait_for(
            lambda: _cache_outcomes(cluster_mesh)["hit"] > after_failover["hit"] + STREAMS and load.completed >= completed_at_reshard + STREAMS,
            PHASE_TIMEOUT_S,
            what="cache hits and whole streams after the reshard",
        )
    assert load.errors == [], load.errors[:5]
    assert cluster.is_master(promoted) and moved >= 1
    assert all(cluster.master_of_slot(slot) == 2 for slot in moving)
