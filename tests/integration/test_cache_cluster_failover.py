"""Every Redis key family on a real Redis Cluster with replicas (tests/support/faults/redis_cluster.py),
through what a cluster lives through: a master killed under load (its replica is promoted), slots
migrated between masters while they are read (ASK, then MOVED).

The mel cache fails open while a master is gone and hits again on the promoted replica; reads never
miss while slots move; prewarm's promoted sentences are read across slots; the job keys, which no
cluster can hold, stop the gateway at start with a message that says what to set instead, and so
does a cache whose cluster setting does not match its Redis.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from redis.cluster import key_slot

from libs.cache.keys import cache_key
from libs.cache.mel_cache import MelCache, redis_client
from libs.cache.settings import CacheSettings
from libs.prewarm.promotion import Promoter
from libs.settings.files import SettingTargetError
from libs.voice.inputs import SynthesisInputs, SynthesisParams
from services.gateway.background_work import check_redis_kinds
from services.settings import load_gateway_settings
from tests.support.faults.redis_cluster import LocalRedisCluster

ROOT = Path(__file__).resolve().parents[2]
STREAMS = 8
"""Concurrent callers, as many as the streams of the cluster target."""


@pytest.fixture()
def cluster() -> Iterator[LocalRedisCluster]:
    with LocalRedisCluster(masters=3, replicas=1) as running:
        yield running


def _key(index: int) -> str:
    params = SynthesisParams(speaker_id=0, speed=1.0, noise_scale=0.667, noise_w=0.8)
    return cache_key(SynthesisInputs("acoustic-v1", "en_US-joe-medium", (1, 0, index + 3, 0, 2), params))


def _mel(frames: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).normal(-5.0, 1.0, size=(80, frames)).astype(np.float32)


def _cache(cluster: LocalRedisCluster, outcomes: list[str]) -> MelCache:
    settings = CacheSettings(redis_url=cluster.url, redis_cluster=True, ttl_s=300, timeout_ms=300)
    return MelCache.from_settings(settings, on_outcome=outcomes.append)


async def test_a_master_killed_under_load_fails_open_and_the_promoted_replica_serves_its_keys(cluster: LocalRedisCluster) -> None:
    outcomes: list[str] = []
    cache = _cache(cluster, outcomes)
    keys = [_key(index) for index in range(48)]
    victim = 0
    on_victim = [key for key in keys if cluster.master_of_slot(key_slot(key.encode())) == victim]
    assert len(on_victim) >= 8
    try:
        for index, key in enumerate(keys):
            assert await cache.put(key, _mel(30, index), [30])
        await asyncio.sleep(0.5)  # replication is asynchronous: let the replicas take the writes
        raised: list[BaseException] = []
        reads: Counter[str] = Counter()
        stop = asyncio.Event()

        async def caller(offset: int) -> None:
            index = offset
            while not stop.is_set():
                try:
                    reads["hit" if await cache.get(keys[index % len(keys)]) is not None else "miss"] += 1
                except BaseException as error:  # the cache must never raise, whatever Redis does
                    raised.append(error)
                index += STREAMS
                await asyncio.sleep(0.01)

        callers = [asyncio.create_task(caller(offset)) for offset in range(STREAMS)]
        await asyncio.sleep(1.0)
        killed_at = time.monotonic()
        cluster.kill(victim)
        promoted = await asyncio.to_thread(cluster.wait_failover, victim)
        failover_s = time.monotonic() - killed_at
        await asyncio.sleep(6.0)  # past the breaker's open time, so it has probed Redis again
        stop.set()
        await asyncio.gather(*callers)
        assert raised == []
        assert outcomes.count("error") >= 1, "no read met the dead master: the fault was not felt"
        assert failover_s < 15
        # After the failover every key is read again, those of the dead master from its promoted replica.
        assert cluster.is_master(promoted)
        after = [await cache.get(key) for key in on_victim]
        assert all(cached is not None for cached in after), f"{sum(c is None for c in after)} of the dead master's keys missed"
        # And new writes to its slots land on the promoted replica.
        assert await cache.put(on_victim[0], _mel(31, 99), [31])
        cached = await cache.get(on_victim[0])
        assert cached is not None and cached.mel.shape == (80, 31)
    finally:
        await cache.close()


async def test_slots_migrated_under_load_never_raise_and_every_key_hits_at_its_new_master(cluster: LocalRedisCluster) -> None:
    """While a slot moves, a read that meets ASK is followed to the importing node; with several
    connections to that node, redis-py 8.1's asyncio cluster client can send ASKING on one and the
    read on another, and the node answers MOVED back until the redirect budget is spent: such a read
    fails open (an error outcome, a miss). Once a slot has moved, MOVED sends every read there."""
    outcomes: list[str] = []
    cache = _cache(cluster, outcomes)
    keys = [_key(index) for index in range(48)]
    target = 2
    moving = sorted({key_slot(key.encode()) for key in keys if cluster.master_of_slot(key_slot(key.encode())) != target})
    try:
        for index, key in enumerate(keys):
            assert await cache.put(key, _mel(30, index), [30])
        raised: list[BaseException] = []
        stop = asyncio.Event()

        async def reader(offset: int) -> None:
            index = offset
            while not stop.is_set():
                try:
                    await cache.get(keys[index % len(keys)])
                except BaseException as error:  # the cache must never raise, whatever Redis does
                    raised.append(error)
                index += STREAMS
                await asyncio.sleep(0.005)

        readers = [asyncio.create_task(reader(offset)) for offset in range(STREAMS)]
        moved = await asyncio.to_thread(cluster.migrate_slots, moving, target, 0.02, 1)
        stop.set()
        await asyncio.gather(*readers)
        assert raised == []
        assert moved == len([key for key in keys if key_slot(key.encode()) in moving])
        assert all(cluster.master_of_slot(slot) == target for slot in moving)
        during = Counter(outcomes)
        assert during["hit"] > len(keys), during
        # Every key hits where it now lives, each read sent there by MOVED or the patched slot map.
        await asyncio.sleep(5.5)  # past the breaker's open time, should the failed reads have opened it
        outcomes.clear()
        assert all([await cache.get(key) is not None for key in keys]), Counter(outcomes)
        assert Counter(outcomes) == {"hit": len(keys)}
    finally:
        await cache.close()


async def test_promoted_sentences_are_read_back_across_slots_on_a_cluster(cluster: LocalRedisCluster) -> None:
    settings = CacheSettings(redis_url=cluster.url, redis_cluster=True)
    client = redis_client(cluster.url, settings, 2.0)
    promoter = Promoter(client, promote_after=2, window_s=60, keep_s=600)
    sentences = [f"Hot sentence number {index}." for index in range(12)]
    try:
        for _ in range(2):
            for sentence in sentences:
                promoter.count("en_US-joe-medium", sentence)
        promoted = await promoter.flush()
        assert len(promoted) == len(sentences)
        read = await promoter.promoted()
        assert sorted(text for _, text in read) == sorted(sentences)
        # The texts' keys really are spread over the masters (one MGET of them fails CROSSSLOT).
        text_keys = [key for index in range(3) for key in cluster.node(index).keys("tts:hot:text:*")]
        assert len({cluster.master_of_slot(key_slot(key)) for key in text_keys}) == 3
    finally:
        await client.aclose()


async def test_job_keys_on_a_cluster_and_a_cache_setting_that_does_not_match_its_redis_stop_the_gateway(cluster: LocalRedisCluster) -> None:
    node = cluster.url
    with pytest.raises(SettingTargetError, match=r"--jobs-redis-url .* is a node of a Redis Cluster: long-form jobs need one Redis"):
        await check_redis_kinds(load_gateway_settings(["--redis-url", node, "--redis-cluster", "true", "--jobs-redis-url", node], {}))
    with pytest.raises(SettingTargetError, match=r"is a node of a Redis Cluster: set --redis-cluster"):
        await check_redis_kinds(load_gateway_settings(["--redis-url", node], {}))
    # A cluster cache with jobs off (no --jobs-redis-url) is fine.
    await check_redis_kinds(load_gateway_settings(["--redis-url", node, "--redis-cluster", "true"], {}))


def test_a_gateway_given_a_cluster_for_its_jobs_exits_at_start_saying_what_to_set(cluster: LocalRedisCluster) -> None:
    node = cluster.url
    done = subprocess.run(
        [sys.executable, "-m", "services.gateway", "--port", "0", "--metrics-port", "0", "--http-port", "0",
         "--acoustic", "local=127.0.0.1:1", "--vocoder", "local=127.0.0.1:1",
         "--redis-url", node, "--redis-cluster", "true", "--jobs-redis-url", node],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode != 0
    assert "gateway: --jobs-redis-url" in done.stderr and "give them a Redis that is not a cluster" in done.stderr
    assert "Traceback" not in done.stderr


async def test_a_cluster_setting_on_a_single_redis_stops_the_gateway(redis_server) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(SettingTargetError, match="is not a Redis Cluster node: drop --redis-cluster"):
        await check_redis_kinds(load_gateway_settings(["--redis-url", redis_server.url, "--redis-cluster", "true"], {}))
    await check_redis_kinds(load_gateway_settings(["--redis-url", redis_server.url], {}))
