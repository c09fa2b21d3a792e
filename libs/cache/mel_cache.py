"""The Redis mel cache, failing open (docs/ARCHITECTURE.md, "Cache").

Every Redis problem (down, slow, full, a corrupt value) becomes a miss: the request is synthesised
and the outcome is counted, never raised. Calls use short socket timeouts and no client retries,
and a circuit breaker skips Redis entirely for a while after repeated failures. Every lookup and
write is a span (`tts.cache.lookup`, `tts.cache.write`), so a trace shows what Redis cost.

With a cache key (`--cache-key-file`) every value is sealed on its way in and opened on its way out
(libs.cache.sealing), right around the value layout (libs.cache.codec): a value that does not open
is a miss, so Redis holds nothing the gateway trusts without checking.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Final, TypeVar
from urllib.parse import urlsplit

import numpy as np
import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisClusterException, RedisError

from libs.cache.circuit_breaker import BreakerConfig, CircuitBreaker
from libs.cache.codec import AudioHead, CachedMel, CacheFormatError, decode_head, decode_mel, encode_head, encode_mel
from libs.cache.keys import head_key, head_keys
from libs.cache.sealing import KeyRing, SealError
from libs.cache.settings import CacheSettings, redacted_url
from libs.settings.files import SettingFileError
from libs.telemetry.tracing import ATTR_CACHE_HIT, SPAN_CACHE_LOOKUP, SPAN_CACHE_WRITE, step_span

_log = logging.getLogger(__name__)
_Value = TypeVar("_Value")

REDIS_FAILURES: Final = (RedisError, RedisClusterException, OSError, TimeoutError, AttributeError, TypeError)
"""Everything a Redis (or Redis Cluster) call can fail with; each one is a miss, never raised.
(A cluster client that reaches no node raises RedisClusterException, which is no RedisError; a
command on a connection that another task's call closed under it, as the cluster client does when it
rebuilds its map of the slots, fails inside redis-py with AttributeError or TypeError on the
connection's emptied reader or writer.)"""

CacheOutcomeHook = Callable[[str], None]
"""Called with one of the OUTCOME_* words after every cache operation (for metrics)."""

OUTCOME_HIT: Final = "hit"
OUTCOME_MISS: Final = "miss"
OUTCOME_ERROR: Final = "error"
"""Redis failed or timed out; the lookup counted as a miss."""
OUTCOME_CORRUPT: Final = "corrupt"
"""A value failed its header or checksum checks; counted as a miss."""
OUTCOME_UNAUTHENTIC: Final = "unauthentic"
"""With a cache key: a value that is not sealed by one of this gateway's keys for the Redis key it
sits under (written by someone else, altered, copied from another key); counted as a miss."""
OUTCOME_SKIPPED: Final = "skipped"
"""The breaker is open, so Redis was not asked."""
OUTCOME_WRITTEN: Final = "written"
OUTCOME_WRITE_ERROR: Final = "write_error"
OUTCOME_HEAD_HIT: Final = "head_hit"
"""A mel hit came with the sentence's audio head (counted on top of the hit)."""
OUTCOME_HEAD_WRITTEN: Final = "head_written"
OUTCOME_DELETED: Final = "deleted"
"""An entry (or just its head) was removed because it did not suit the model reading it."""



def _ignore(outcome: str) -> None:
    """The default outcome hook: does nothing."""


def _password(path: str) -> str | None:
    """The Redis password in the file at `path` (surrounding whitespace dropped), or None without a path."""
    if not path:
        return None
    try:
        password = Path(path).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as error:
        raise SettingFileError(f"--redis-password-file {path}: cannot read it ({getattr(error, 'strerror', None) or error})") from None
    if not password:
        raise SettingFileError(f"--redis-password-file {path} is empty")
    return password


def redis_client(
    url: str, settings: CacheSettings, timeout_s: float, *, cluster: bool | None = None
) -> aioredis.Redis | RedisCluster:
    """An asyncio client of the Redis at `url` (the cache's, or the job Redis) with the connection
    options of `settings`: TLS checked against `redis_ca_file` for rediss://, the password from
    `redis_password_file` (an ACL user comes in the URL), socket timeouts of `timeout_s`, no
    client-side retries (a miss is cheaper than a retry storm on a sick Redis; the job runners back
    off themselves). A cluster client with `cluster`, which defaults to `redis_cluster`.

    SettingFileError when the password file cannot be read, or when `url` holds a password too."""
    if settings.redis_password_file and urlsplit(url).password:
        raise SettingFileError(f"{redacted_url(url)} already has a password: give it there or in --redis-password-file, not both")
    options: dict[str, object] = {
        "password": _password(settings.redis_password_file),
        "socket_timeout": timeout_s,
        "socket_connect_timeout": timeout_s,
        "health_check_interval": 30,
    }
    if settings.redis_ca_file and url.startswith("rediss://"):
        options["ssl_ca_certs"] = settings.redis_ca_file
    if options["password"] is None:
        del options["password"]  # a password in the URL stays in force
    if settings.redis_cluster if cluster is None else cluster:
        # One try per command: a slot that moved is still followed. On MOVED the client patches that
        # slot in its map (reinitialize_steps=0) instead of, every fifth MOVED, closing every node's
        # connections to rebuild the map, which fails the other tasks' commands in flight on them
        # (a slot migration under load). A node that stops answering still rebuilds the map.
        return RedisCluster.from_url(url, retry=Retry(NoBackoff(), 0), reinitialize_steps=0, **options)  # type: ignore[arg-type]
    return aioredis.Redis.from_url(url, retry=Retry(NoBackoff(), 0), **options)  # type: ignore[arg-type]


async def cluster_mode(url: str, settings: CacheSettings, timeout_s: float = 2.0) -> bool | None:
    """Whether the Redis at `url` runs in cluster mode, asked once with a plain client and the
    connection options of `settings` (None: it did not answer, and the caller fails open as ever)."""
    client = redis_client(url, settings, timeout_s, cluster=False)
    try:
        info = await client.info("cluster")
    except REDIS_FAILURES:
        return None
    finally:
        await client.aclose()
    return bool(info.get("cluster_enabled"))


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
        head_ms: float = 0.0,
        keyring: KeyRing | None = None,
    ) -> None:
        """`head_ms` > 0 also keeps that much of each sentence's first audio (its audio head, libs.cache.codec).
        With `keyring` every value is sealed (libs.cache.sealing) and only values it opens are used."""
        if head_ms < 0:
            raise ValueError(f"head_ms must be >= 0, got {head_ms}")
        self._client = client
        self.head_ms = head_ms
        self._ttl_s = ttl_s
        self._timeout_s = timeout_s
        self._breaker = breaker or CircuitBreaker(BreakerConfig())
        self._on_outcome = on_outcome
        self._keyring = keyring

    @classmethod
    def from_settings(cls, settings: CacheSettings, on_outcome: CacheOutcomeHook = _ignore, zone: str = "") -> MelCache:
        """A cache on the Redis `settings` name (its "{zone}" being `zone`); with the cache switched
        off, one that always misses.

        Reads the key file and the password file now: SettingFileError if either cannot be used.
        """
        timeout_s = settings.timeout_ms / 1000.0
        client = None
        keyring = KeyRing.from_file(settings.key_file) if settings.key_file and settings.enabled else None
        if settings.enabled:
            url = settings.url_for_zone(zone)
            client = redis_client(url, settings, timeout_s)
            sealing = f"values sealed with key {keyring.current_id}" if keyring else "values stored plain (no --cache-key-file)"
            kind = "Redis Cluster" if settings.redis_cluster else "Redis"
            _log.info("mel cache on %s at %s, %s", kind, redacted_url(url), sealing)
        return cls(
            client, ttl_s=settings.ttl_s, timeout_s=timeout_s, on_outcome=on_outcome, head_ms=settings.audio_head_ms, keyring=keyring
        )

    @property
    def keyring(self) -> KeyRing | None:
        """The keys values are sealed with (None: stored plain); others that store client text in
        the same Redis seal it with these too."""
        return self._keyring

    @property
    def sealed(self) -> bool:
        """Whether values are encrypted and authenticated (a cache key is configured)."""
        return self._keyring is not None

    @property
    def enabled(self) -> bool:
        """Whether a Redis is configured at all."""
        return self._client is not None

    async def get(self, key: str, tier: str = "") -> CachedMel | None:
        """The cached mel for `key`, or None on a miss, an error, a corrupt value or an open breaker.

        With heads on, the sentence's audio head as `tier` speaks it ("": quality) comes in the same
        round trip, as `head` (None when it is absent or corrupt: the mel alone is still a hit).
        """
        with step_span(SPAN_CACHE_LOOKUP) as span:
            cached = await self._get(key, tier)
            span.set_attribute(ATTR_CACHE_HIT, cached is not None)
            return cached

    async def _get(self, key: str, tier: str) -> CachedMel | None:
        if self._client is None:
            return None
        if not self._breaker.allow():
            self._on_outcome(OUTCOME_SKIPPED)
            return None
        head_value = None
        try:
            async with asyncio.timeout(self._timeout_s * 2):
                if self.head_ms > 0:
                    value, head_value = await self._client.mget([key, head_key(key, tier)])
                else:
                    value = await self._client.get(key)
        except REDIS_FAILURES as error:
            self._fail(OUTCOME_ERROR, "get", error)
            return None
        self._breaker.record_success()
        if value is None:
            self._on_outcome(OUTCOME_MISS)
            return None
        cached = self._decoded(decode_mel, value, "cache entry", key)
        if cached is None:
            return None
        self._on_outcome(OUTCOME_HIT)
        head = None if head_value is None else self._decoded(decode_head, head_value, "audio head", head_key(key, tier))
        if head is None:
            return cached
        self._on_outcome(OUTCOME_HEAD_HIT)
        return replace(cached, head=head)

    def _decoded(self, decode: Callable[[bytes], _Value], value: bytes, what: str, key: str) -> _Value | None:
        """`decode(value)` of the value stored at `key`, opened first when sealed; None (logged and
        counted as unauthentic or corrupt) when it fails its checks."""
        if self._keyring is not None:
            try:
                value = self._keyring.unseal(key, value)
            except SealError as error:
                _log.warning("ignoring %s of %s: %s", what, key, error)
                self._on_outcome(OUTCOME_UNAUTHENTIC)
                return None
        try:
            return decode(value)
        except CacheFormatError as error:
            _log.warning("ignoring corrupt %s of %s: %s", what, key, error)
            self._on_outcome(OUTCOME_CORRUPT)
            return None

    async def put(self, key: str, mel: np.ndarray, phoneme_frames: Sequence[int] = ()) -> bool:
        """Store a complete sentence's mel with the TTL; returns whether Redis took it."""
        if self._client is None or not self._breaker.allow():
            return False
        with step_span(SPAN_CACHE_WRITE, {"tts.cache.frames": int(mel.shape[-1])}) as span:
            stored = await self._set(key, self._sealed(key, encode_mel(mel, phoneme_frames)), OUTCOME_WRITTEN)
            span.set_attribute("tts.cache.stored", stored)
            return stored

    async def put_head(self, key: str, head: AudioHead, tier: str = "") -> bool:
        """Store the audio head, as `tier` speaks it ("": quality), of the sentence whose mel key is
        `key`, with the TTL; returns whether Redis took it."""
        if self._client is None or self.head_ms <= 0 or not self._breaker.allow():
            return False
        return await self._set(head_key(key, tier), self._sealed(head_key(key, tier), encode_head(head)), OUTCOME_HEAD_WRITTEN)

    def _sealed(self, key: str, plain: bytes) -> bytes:
        """The value to store at `key`: `plain`, sealed when a cache key is configured."""
        return plain if self._keyring is None else self._keyring.seal(key, plain)

    async def _set(self, key: str, value: bytes, outcome: str) -> bool:
        assert self._client is not None
        try:
            async with asyncio.timeout(self._timeout_s * 2):
                await self._client.set(key, value, ex=self._ttl_s)
        except REDIS_FAILURES as error:
            self._fail(OUTCOME_WRITE_ERROR, "set", error)
            return False
        self._breaker.record_success()
        self._on_outcome(outcome)
        return True

    async def delete(self, key: str, *, head_only: bool = False, tier: str = "") -> bool:
        """Remove the entry at `key`, its mel and every tier's audio head (only `tier`'s head with
        `head_only`), e.g. one that does not suit the model reading it; returns whether Redis took the command."""
        if self._client is None or not self._breaker.allow():
            return False
        keys = [head_key(key, tier)] if head_only else [key, *head_keys(key)]
        try:
            async with asyncio.timeout(self._timeout_s * 2):
                await self._client.delete(*keys)
        except REDIS_FAILURES as error:
            self._fail(OUTCOME_WRITE_ERROR, "delete", error)
            return False
        self._breaker.record_success()
        self._on_outcome(OUTCOME_DELETED)
        return True

    async def close(self) -> None:
        """Close the Redis connections."""
        if self._client is not None:
            await self._client.aclose()

    def _fail(self, outcome: str, operation: str, error: BaseException) -> None:
        self._breaker.record_failure()
        self._on_outcome(outcome)
        _log.warning("redis %s failed, continuing without the cache: %s", operation, str(error) or type(error).__name__)
