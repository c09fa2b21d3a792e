"""Audio heads: their value layout, how they are gathered from vocoder pieces, and Redis round trips."""

from __future__ import annotations

import numpy as np
import pytest
import redis

from libs.cache.codec import AudioHead, CacheFormatError, decode_head, encode_head
from libs.cache.head_collector import HeadCollector
from libs.cache.keys import cache_key, head_key
from libs.cache.mel_cache import MelCache
from libs.cache.settings import CacheSettings
from libs.devmesh.embedded_redis import EmbeddedRedis
from libs.voice.inputs import SynthesisInputs

# What these tests store and read back, not how fast the cache gives up: a loaded machine can take
# longer than the production timeout to open the first connection, which would read as an error.
UNHURRIED_MS = 2000

RATE = 22050


def _key() -> str:
    return cache_key(SynthesisInputs("m1", "v", (1, 2, 3)))


def _head(count: int = 300, version: str = "vocoder-1") -> AudioHead:
    return AudioHead(version, RATE, np.sin(np.arange(count, dtype=np.float32) / 7.0).astype(np.float32))


def test_head_round_trips_exactly() -> None:
    head = _head()
    decoded = decode_head(encode_head(head))
    assert decoded.model_version == "vocoder-1" and decoded.sample_rate_hz == RATE
    np.testing.assert_array_equal(decoded.samples, head.samples)


@pytest.mark.parametrize("damage", ["truncate", "flip", "magic"])
def test_damaged_heads_are_rejected(damage: str) -> None:
    value = bytearray(encode_head(_head()))
    if damage == "truncate":
        value = value[:-3]
    elif damage == "flip":
        value[-1] ^= 0x40
    else:
        value[0:4] = b"TMEL"
    with pytest.raises(CacheFormatError):
        decode_head(bytes(value))


def test_head_key_is_derived_from_the_mel_key_only() -> None:
    key = _key()
    assert head_key(key) != key and head_key(key).endswith(key.rsplit(":", 1)[-1])
    with pytest.raises(ValueError, match="not a mel cache key"):
        head_key("something-else")


def test_collector_takes_the_first_samples_across_pieces() -> None:
    collector = HeadCollector(100, RATE, "vocoder-1")
    samples = np.arange(250, dtype=np.float32)
    assert collector.add(samples[:60], RATE, "vocoder-1", is_last=False) is None
    head = collector.add(samples[60:180], RATE, "vocoder-1", is_last=False)
    assert head is not None and head.model_version == "vocoder-1"
    np.testing.assert_array_equal(head.samples, samples[:100])
    assert collector.add(samples[180:], RATE, "vocoder-1", is_last=True) is None  # given once


def test_collector_keeps_a_short_sentence_whole_and_drops_a_mixed_one() -> None:
    short = HeadCollector(100, RATE, "vocoder-1")
    head = short.add(np.ones(40, dtype=np.float32), RATE, "vocoder-1", is_last=True)
    assert head is not None and len(head.samples) == 40
    mixed = HeadCollector(100, RATE, "vocoder-1")
    assert mixed.add(np.ones(40, dtype=np.float32), RATE, "vocoder-1", is_last=False) is None
    # A failover to another model mid-head: the samples are not one model's, so none are kept.
    assert mixed.add(np.ones(80, dtype=np.float32), RATE, "vocoder-2", is_last=False) is None
    assert mixed.spoiled


async def test_a_hit_brings_its_head_in_the_same_lookup(redis_server: EmbeddedRedis) -> None:
    outcomes: list[str] = []
    cache = MelCache.from_settings(CacheSettings(redis_url=redis_server.url, ttl_s=300, timeout_ms=UNHURRIED_MS, audio_head_ms=200), on_outcome=outcomes.append)
    key = _key()
    mel = np.linspace(-8, 1, 80 * 12, dtype=np.float32).reshape(80, 12)
    assert await cache.put_head(key, _head())  # a head alone is no hit: the mel is what is cached
    assert await cache.get(key) is None
    assert await cache.put(key, mel, [12])
    cached = await cache.get(key)
    assert cached is not None and cached.head is not None
    np.testing.assert_array_equal(cached.head.samples, _head().samples)
    assert outcomes == ["head_written", "miss", "written", "hit", "head_hit"]
    assert 0 < redis.Redis.from_url(redis_server.url).ttl(head_key(key)) <= 300
    await cache.close()


async def test_a_corrupt_head_still_leaves_the_mel_hit(redis_server: EmbeddedRedis) -> None:
    outcomes: list[str] = []
    cache = MelCache.from_settings(CacheSettings(redis_url=redis_server.url, ttl_s=300, timeout_ms=UNHURRIED_MS, audio_head_ms=200), on_outcome=outcomes.append)
    key = _key()
    await cache.put(key, np.zeros((80, 4), dtype=np.float32))
    redis.Redis.from_url(redis_server.url).set(head_key(key), b"THED-not-really")
    cached = await cache.get(key)
    assert cached is not None and cached.head is None
    assert outcomes[-2:] == ["hit", "corrupt"]
    await cache.close()


async def test_heads_off_reads_and_writes_mel_only(redis_server: EmbeddedRedis) -> None:
    cache = MelCache.from_settings(CacheSettings(redis_url=redis_server.url, ttl_s=300, timeout_ms=UNHURRIED_MS, audio_head_ms=0))
    key = _key()
    await cache.put(key, np.zeros((80, 4), dtype=np.float32))
    assert not await cache.put_head(key, _head())
    redis.Redis.from_url(redis_server.url).set(head_key(key), encode_head(_head()))
    cached = await cache.get(key)
    assert cached is not None and cached.head is None
    await cache.close()
