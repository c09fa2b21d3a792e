"""The mel cache on a real Redis Cluster of three masters (tests/faults/redis_cluster.py).

A sentence's mel and audio head share a hash tag, so the one-round-trip MGET works on a cluster;
sentences spread over every master; an ACL user with its password from a file is used as given.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import redis
from redis.cluster import key_slot

from libs.cache.codec import AudioHead
from libs.cache.keys import cache_key, head_key
from libs.cache.mel_cache import MelCache
from libs.cache.settings import CacheSettings
from libs.voice.inputs import SynthesisInputs, SynthesisParams
from tests.support.faults.redis_cluster import LocalRedisCluster


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalRedisCluster]:
    with LocalRedisCluster(masters=3) as running:
        yield running


def _key(index: int) -> str:
    params = SynthesisParams(speaker_id=0, speed=1.0, noise_scale=0.667, noise_w=0.8)
    return cache_key(SynthesisInputs("acoustic-v1", "en_US-joe-medium", (1, 0, index + 3, 0, 2), params))


def _mel(frames: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).normal(-5.0, 1.0, size=(80, frames)).astype(np.float32)


def test_a_sentences_keys_share_one_slot_and_sentences_spread_over_slots() -> None:
    keys = [_key(index) for index in range(50)]
    assert all(key_slot(key.encode()) == key_slot(head_key(key).encode()) for key in keys)
    assert len({key_slot(key.encode()) for key in keys}) > 40


async def test_mel_and_head_round_trip_in_one_mget_on_a_three_master_cluster(cluster: LocalRedisCluster) -> None:
    outcomes: list[str] = []
    settings = CacheSettings(redis_url=cluster.url, redis_cluster=True, ttl_s=300, timeout_ms=500, audio_head_ms=200)
    cache = MelCache.from_settings(settings, on_outcome=outcomes.append)
    keys = [_key(index) for index in range(12)]
    head = AudioHead("vocoder-v1", 22050, np.linspace(-0.5, 0.5, 4410, dtype=np.float32))
    try:
        for index, key in enumerate(keys):
            assert await cache.get(key) is None
            assert await cache.put(key, _mel(40 + index, index), [40 + index])
            assert await cache.put_head(key, head)
        for index, key in enumerate(keys):
            cached = await cache.get(key)
            assert cached is not None and cached.head is not None, outcomes
            np.testing.assert_allclose(cached.mel, _mel(40 + index, index), atol=0.01)
            np.testing.assert_array_equal(cached.head.samples, head.samples)
        assert "error" not in outcomes and outcomes.count("head_hit") == len(keys)
        # The entries really are spread: every master holds some of them.
        held = [cluster.node(index).dbsize() for index in range(3)]
        assert all(count > 0 for count in held) and sum(held) == 2 * len(keys)
        assert await cache.delete(keys[0])
        assert await cache.get(keys[0]) is None
    finally:
        await cache.close()


async def test_without_hash_tags_the_same_mget_fails_crossslot_so_the_tags_are_what_make_it_work(cluster: LocalRedisCluster) -> None:
    client = redis.RedisCluster.from_url(cluster.url)
    try:
        untagged = ["tts:mel:v1:" + "ab" * 32, "tts:head:v1:" + "ab" * 32]
        assert key_slot(untagged[0].encode()) != key_slot(untagged[1].encode())
        with pytest.raises(redis.RedisClusterException):
            client.mget(untagged)
        tagged = [_key(99), head_key(_key(99))]
        assert client.mget(tagged) == [None, None]
    finally:
        client.close()


async def test_acl_user_and_password_from_a_file_reach_a_cluster(tmp_path: Path) -> None:
    with LocalRedisCluster(masters=3, password="admin-secret") as cluster:
        for index in range(3):
            cluster.node(index).acl_setuser(
                "tts-gateway", enabled=True, passwords=["+gateway-secret"], keys=["tts:*"],
                commands=["+get", "+mget", "+set", "+del", "+ping", "+cluster|slots", "+cluster|shards", "+command", "+info"],
            )  # fmt: skip
        password_file = tmp_path / "password"
        password_file.write_text("gateway-secret\n")
        url = f"redis://tts-gateway@127.0.0.1:{cluster.ports[0]}/0"
        settings = CacheSettings(redis_url=url, redis_cluster=True, redis_password_file=str(password_file), ttl_s=60, timeout_ms=500)
        outcomes: list[str] = []
        cache = MelCache.from_settings(settings, on_outcome=outcomes.append)
        try:
            assert await cache.put(_key(7), _mel(30, 7), [30])
            assert (await cache.get(_key(7))) is not None
            assert outcomes[-1] == "hit" or outcomes[-2:] == ["hit", "head_hit"]
        finally:
            await cache.close()
        wrong = tmp_path / "wrong"
        wrong.write_text("not-the-password")
        refused = MelCache.from_settings(
            CacheSettings(redis_url=url, redis_cluster=True, redis_password_file=str(wrong), ttl_s=60, timeout_ms=300), on_outcome=outcomes.append
        )
        try:
            assert await refused.get(_key(7)) is None  # fails open: counted as an error, never raised
            assert outcomes[-1] == "error"
        finally:
            await refused.close()


def test_redis_url_names_the_gateways_zone() -> None:
    settings = CacheSettings(redis_url="rediss://redis-{zone}.tts.svc:6379/0")
    assert settings.url_for_zone("zone-b") == "rediss://redis-zone-b.tts.svc:6379/0"
