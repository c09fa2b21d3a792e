"""The mel cache against a real redis-server: hits, TTL, and failing open when Redis dies."""

from __future__ import annotations

import time

import numpy as np
import redis

from libs.cache.mel_cache import MelCache
from libs.cache.settings import CacheSettings
from libs.devmesh.embedded_redis import EmbeddedRedis

# What these tests store and read back, not how fast the cache gives up: a loaded machine can take
# longer than the production timeout to open the first connection, which would read as an error.
UNHURRIED_MS = 2000


def test_embedded_redis_runs_as_an_lru_cache(redis_server: EmbeddedRedis) -> None:
    client = redis.Redis.from_url(redis_server.url)
    assert client.config_get("maxmemory-policy") == {"maxmemory-policy": "allkeys-lru"}
    assert client.config_get("maxmemory") == {"maxmemory": str(16 * 1024 * 1024)}
    client.close()


async def test_put_then_get_is_a_hit_with_ttl(redis_server: EmbeddedRedis) -> None:
    outcomes: list[str] = []
    cache = MelCache.from_settings(CacheSettings(redis_url=redis_server.url, ttl_s=300, timeout_ms=UNHURRIED_MS, audio_head_ms=0), on_outcome=outcomes.append)
    mel = np.linspace(-8, 1, 80 * 12, dtype=np.float32).reshape(80, 12)
    assert await cache.get("k") is None
    assert await cache.put("k", mel, [12])
    cached = await cache.get("k")
    assert cached is not None and cached.phoneme_frames == (12,)
    np.testing.assert_allclose(cached.mel, mel, atol=0.01)
    assert 295 <= redis.Redis.from_url(redis_server.url).ttl("k") <= 300
    assert outcomes == ["miss", "written", "hit"]
    await cache.close()


async def test_dead_redis_fails_open_fast_and_the_breaker_stops_asking(redis_server: EmbeddedRedis) -> None:
    outcomes: list[str] = []
    cache = MelCache.from_settings(CacheSettings(redis_url=redis_server.url, ttl_s=300, timeout_ms=100, audio_head_ms=0), on_outcome=outcomes.append)
    assert await cache.get("k") is None
    redis_server.stop()
    started = time.monotonic()
    for _ in range(5):
        assert await cache.get("k") is None
    assert not await cache.put("k", np.zeros((80, 2), dtype=np.float32))
    assert time.monotonic() - started < 2.0
    assert outcomes == ["miss", "error", "error", "error", "skipped", "skipped"]
    await cache.close()


async def test_disabled_cache_always_misses_without_a_server() -> None:
    cache = MelCache.from_settings(CacheSettings(redis_url="", ttl_s=300, timeout_ms=100, audio_head_ms=0))
    assert not cache.enabled
    assert await cache.get("k") is None
    assert not await cache.put("k", np.zeros((80, 2), dtype=np.float32))
