"""The Redis mel cache, failing open (DESIGN §6).

Every Redis problem (down, slow, full, a corrupt value) becomes a miss: the request is synthesised
and the outcome is counted, never raised. Calls use short socket timeouts and no client retries,
and a circuit breaker skips Redis entirely for a while after repeated failures.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Callable, Final, Sequence

import numpy as np
import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError

from libs.mesh.circuit_breaker import BreakerConfig, CircuitBreaker
from libs.mesh.mel_codec import CacheFormatError, CachedMel, decode_mel, encode_mel

_log = logging.getLogger(__name__)

CacheOutcomeHook = Callable[[str], None]
"""Called with one of the OUTCOME_* words after every cache operation (for metrics)."""

OUTCOME_HIT: Final = "hit"
OUTCOME_MISS: Final = "miss"
OUTCOME_ERROR: Final = "error"
"""Redis failed or timed out; the lookup counted as a miss."""
OUTCOME_CORRUPT: Final = "corrupt"
"""A value failed its header or checksum checks; counted as a miss."""
OUTCOME_SKIPPED: Final = "skipped"
"""The breaker is open, so Redis was not asked."""
OUTCOME_WRITTEN: Final = "written"
OUTCOME_WRITE_ERROR: Final = "write_error"

DISABLED_URLS: Final = ("", "none")
"""Redis URLs that switch the cache off."""


def _ignore(outcome: str) -> None:
    """The default outcome hook: does nothing."""


class MelCache:
    """Get and put sentence mels by key; never raises for Redis trouble."""

    def __init__(
        self,
        client: aioredis.Redis | None,
        *,
        ttl_s: int,
        timeout_s: float,
        breaker: CircuitBreaker | None = None,
        on_outcome: CacheOutcomeHook = _ignore,
    ) -> None:
        self._client = client
        self._ttl_s = ttl_s
        self._timeout_s = timeout_s
        self._breaker = breaker or CircuitBreaker(BreakerConfig())
        self._on_outcome = on_outcome

    @classmethod
    def from_url(
        cls, url: str, *, ttl_s: int, timeout_ms: int, on_outcome: CacheOutcomeHook = _ignore
    ) -> "MelCache":
        """A cache on the Redis at `url`; an empty or "none" URL gives a cache that always misses."""
        timeout_s = timeout_ms / 1000.0
        client = None
        if url.strip().lower() not in DISABLED_URLS:
            client = aioredis.Redis.from_url(
                url,
                socket_timeout=timeout_s,
                socket_connect_timeout=timeout_s,
                # No client-side retries: a miss is cheaper than a retry storm on a sick Redis.
                retry=Retry(NoBackoff(), 0),
                health_check_interval=30,
            )
        return cls(client, ttl_s=ttl_s, timeout_s=timeout_s, on_outcome=on_outcome)

    @property
    def enabled(self) -> bool:
        """Whether a Redis is configured at all."""
        return self._client is not None

    async def get(self, key: str) -> CachedMel | None:
        """The cached mel for `key`, or None on a miss, an error, a corrupt value or an open breaker."""
        if self._client is None:
            return None
        if not self._breaker.allow():
            self._on_outcome(OUTCOME_SKIPPED)
            return None
        try:
            async with asyncio.timeout(self._timeout_s * 2):
                value = await self._client.get(key)
        except (RedisError, OSError, TimeoutError) as error:
            self._fail(OUTCOME_ERROR, "get", error)
            return None
        self._breaker.record_success()
        if value is None:
            self._on_outcome(OUTCOME_MISS)
            return None
        try:
            cached = decode_mel(value)
        except CacheFormatError as error:
            _log.warning("ignoring corrupt cache entry %s: %s", key, error)
            self._on_outcome(OUTCOME_CORRUPT)
            return None
        self._on_outcome(OUTCOME_HIT)
        return cached

    async def put(self, key: str, mel: np.ndarray, phoneme_frames: Sequence[int] = ()) -> bool:
        """Store a complete sentence's mel with the TTL; returns whether Redis took it."""
        if self._client is None or not self._breaker.allow():
            return False
        value = encode_mel(mel, phoneme_frames)
        try:
            async with asyncio.timeout(self._timeout_s * 2):
                await self._client.set(key, value, ex=self._ttl_s)
        except (RedisError, OSError, TimeoutError) as error:
            self._fail(OUTCOME_WRITE_ERROR, "set", error)
            return False
        self._breaker.record_success()
        self._on_outcome(OUTCOME_WRITTEN)
        return True

    async def close(self) -> None:
        """Close the Redis connections."""
        if self._client is not None:
            await self._client.aclose()

    def _fail(self, outcome: str, operation: str, error: BaseException) -> None:
        self._breaker.record_failure()
        self._on_outcome(outcome)
        _log.warning("redis %s failed, continuing without the cache: %s", operation, error or type(error).__name__)
