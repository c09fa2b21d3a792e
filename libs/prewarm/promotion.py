"""Promotion: sentences that live requests ask for more than `promote_after` times within
`promote_window_s` join the warm set (libs.prewarm.warmer) for `promoted_keep_s`.

Counts are Redis counters per fixed window, shared by every gateway, so a sentence that is hot across
the fleet is promoted even when each gateway sees it rarely. A sentence's total is its count in the
current window and the one before: any `promote_after` requests within `promote_window_s` lie in two
adjacent windows, so none is missed where a window ends (requests up to twice the window apart may
count together, which only promotes a little more). Each gateway adds up its own counts for
a second and sends them in one pipeline, so counting costs Redis one round trip a second, not one a
sentence. Promoted sentences are a sorted set of digests scored by their last promotion time; each
digest's voice and text are a value of their own, sealed like the cache's values when the gateway
has a cache key (libs.cache.sealing), so no sentence a client sent sits in Redis in the clear.
Counters hold only a count under a digest.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections import Counter
from collections.abc import Callable
from typing import Final

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from libs.cache.sealing import KeyRing, SealError

_log = logging.getLogger(__name__)

COUNT_PREFIX: Final = "tts:hot:count:"
PROMOTED_KEY: Final = "tts:hot:promoted"
TEXT_PREFIX: Final = "tts:hot:text:"
FLUSH_S: Final = 1.0
MAX_PENDING_SENTENCES: Final = 100_000
"""Distinct sentences counted between two flushes; beyond it new ones wait for the next second."""


def promoted_member(voice: str, text: str) -> str:
    return f"{voice}\n{text}"


def parse_member(member: str) -> tuple[str, str]:
    voice, _, text = member.partition("\n")
    return voice, text


class Promoter:
    """Counts sentences and promotes those past the threshold."""

    def __init__(
        self,
        client: aioredis.Redis,
        promote_after: int,
        window_s: float,
        keep_s: float,
        keyring: KeyRing | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """`clock` is wall-clock seconds, shared by the fleet's gateways (the windows are numbered by it)."""
        self._client = client
        self._clock = clock
        self._keyring = keyring
        self._promote_after = promote_after
        self._window_s = window_s
        self._keep_s = keep_s
        self._pending: Counter[str] = Counter()

    def count(self, voice: str, text: str) -> None:
        """One live request for the sentence (cheap: counted here, sent to Redis within a second);
        the live streams' text side calls it for each sentence it hands out (its `on_sentence`)."""
        member = promoted_member(voice, text)
        if member in self._pending or len(self._pending) < MAX_PENDING_SENTENCES:
            self._pending[member] += 1

    async def run(self) -> None:
        """Send the counts every second until cancelled."""
        while True:
            await asyncio.sleep(FLUSH_S)
            try:
                await self.flush()
            except RedisError as error:
                _log.warning("promotion counts not sent: %s", error)

    async def flush(self) -> list[str]:
        """Send the counts; returns the members this flush promoted."""
        if not self._pending:
            return []
        pending, self._pending = self._pending, Counter()
        now = self._clock()
        window = int(now // self._window_s)
        members = list(pending)
        async with self._client.pipeline(transaction=False) as pipe:
            for member in members:
                key = f"{COUNT_PREFIX}{window}:{_digest(member)}"
                pipe.incrby(key, pending[member])
                pipe.expire(key, 2 * int(self._window_s) + 1)  # read as the window before for one more window
                pipe.get(f"{COUNT_PREFIX}{window - 1}:{_digest(member)}")
            replies = await pipe.execute()
        totals = [current + int(before or 0) for current, before in zip(replies[::3], replies[2::3], strict=True)]
        promoted = [member for member, total in zip(members, totals, strict=True) if total >= self._promote_after]
        if promoted:
            async with self._client.pipeline(transaction=False) as pipe:
                for member in promoted:
                    text_key = TEXT_PREFIX + _digest(member)
                    pipe.set(text_key, self._sealed(text_key, member.encode("utf-8", "surrogatepass")), ex=int(self._keep_s) + 60)
                pipe.zadd(PROMOTED_KEY, {_digest(member): now for member in promoted})
                await pipe.execute()
        return promoted

    async def promoted(self) -> list[tuple[str, str]]:
        """Sentences promoted within `keep_s`, newest first, as (voice, text); older ones are dropped."""
        now = self._clock()
        await self._client.zremrangebyscore(PROMOTED_KEY, "-inf", now - self._keep_s)
        digests = [digest.decode("ascii") for digest in await self._client.zrevrange(PROMOTED_KEY, 0, -1)]
        if not digests:
            return []
        # One GET each in a pipeline, not one MGET: the texts' keys lie in every slot of a Redis
        # Cluster, which refuses a multi-key command across slots; a cluster pipeline sends each
        # node its own keys (one round trip per node), a single Redis gets one round trip.
        async with self._client.pipeline(transaction=False) as pipe:
            for digest in digests:
                pipe.get(TEXT_PREFIX + digest)
            values = await pipe.execute()
        sentences = []
        for digest, value in zip(digests, values, strict=False):
            if value is None:
                continue  # expired with its promotion
            try:
                plain = self._opened(TEXT_PREFIX + digest, value)
            except SealError as error:
                _log.warning("a promoted sentence does not open (%s); skipped", error)
                continue
            sentences.append(parse_member(plain.decode("utf-8", "surrogatepass")))
        return sentences

    def _sealed(self, redis_key: str, plain: bytes) -> bytes:
        return self._keyring.seal(redis_key, plain) if self._keyring is not None else plain

    def _opened(self, redis_key: str, value: bytes) -> bytes:
        return self._keyring.unseal(redis_key, value) if self._keyring is not None else value


def _digest(member: str) -> str:
    return hashlib.sha256(member.encode("utf-8", "surrogatepass")).hexdigest()[:32]
