"""Prewarming: the hot texts (a file, reloaded when it changes) and the promoted sentences
(libs.prewarm.promotion) are put in the mel cache at start-up and kept there.

Every `refresh_s` (half the cache TTL) the warmer looks at each warm sentence's cache key: one still
there gets its TTL renewed (EXPIRE on its mel and its audio head, no synthesis), one that is gone is
synthesised again through the synthesis API, as a stream would (libs.synthesis.synthesizer), so the
pipeline writes its mel and head exactly as for a listener. Missing sentences are spoken one small
utterance at a time, with no deadline: the lowest priority the mesh has, one stream of the gateway.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import redis.asyncio as aioredis
from prometheus_client import CollectorRegistry, Counter
from redis.exceptions import RedisError

from libs.cache.keys import cache_key, head_key
from libs.pb.tts.v1 import tts_pb2
from libs.prewarm.promotion import Promoter
from libs.prewarm.settings import PrewarmSettings
from libs.synthesis.options import resolve_options
from libs.synthesis.synthesizer import Synthesizer
from libs.synthesis.text_side import TextSide
from libs.text.frontend import Sentence
from libs.upstream.pool import WorkerPool
from libs.voice.inputs import SynthesisInputs, SynthesisParams
from libs.voice.registry import VoiceRegistry

_log = logging.getLogger(__name__)

SENTENCES_PER_UTTERANCE: Final = 16
TICK_S: Final = 1.0


def read_hot_texts(path: Path) -> list[str]:
    """The texts of a hot-text file: one a line, blank lines and lines starting with # skipped."""
    lines = path.read_text(encoding="utf-8").splitlines()
    return [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]


@dataclass
class WarmStats:
    """What the warmer has done (for logs, tests and the benchmark)."""

    renewed: int = 0
    """Sentences whose cache entry was still there and got its TTL renewed."""
    synthesised: int = 0
    """Sentences synthesised into the cache."""
    cycles: int = 0
    warm_sentences: int = 0
    """Sentences in the warm set at the last refresh."""
    last_refresh_s: float = 0.0
    errors: list[str] = field(default_factory=list)


def prewarm_sentences_counter(registry: CollectorRegistry | None) -> Counter:
    """The warmer's one metric (libs/telemetry/CATALOG.md)."""
    return Counter(
        "tts_prewarm_sentences_total",
        "Warm sentences looked after, by action: renewed (still cached, TTL renewed) or synthesised (each was also a "
        "cache miss in tts_gateway_cache_operations_total, so subtract them for the live hit rate)",
        ["action"], registry=registry,
    )  # fmt: skip


class CacheWarmer:
    """Keeps the hot texts and the promoted sentences in the mel cache."""

    def __init__(
        self,
        settings: PrewarmSettings,
        client: aioredis.Redis,
        synthesizer: Synthesizer,
        text_side: TextSide,
        registry: VoiceRegistry,
        pool: WorkerPool,
        cache_ttl_s: float,
        promoter: Promoter | None,
        metrics_registry: CollectorRegistry | None = None,
    ) -> None:
        """`text_side` is one that does not count sentences for promotion (the warmer's own requests must not)."""
        self._sentences_total = prewarm_sentences_counter(metrics_registry)
        self._settings = settings
        self._client = client
        self._synthesizer = synthesizer
        self._text_side = text_side
        self._registry = registry
        self._pool = pool
        self._ttl_s = int(cache_ttl_s)
        self.refresh_s = max(1.0, cache_ttl_s / 2)
        self._promoter = promoter
        self._file = Path(settings.hot_texts_file) if settings.hot_texts_file else None
        self._file_mtime_ns: int | None = None
        self._hot_texts: list[str] = []
        self._sentences: dict[tuple[str, str], list[Sentence]] = {}
        self.stats = WarmStats()

    async def run(self) -> None:
        """Warm at start-up (once the workers have reported their model), then keep warm until cancelled."""
        while self._pool.model_info() is None:
            await self._pool.changed.wait()  # pulsed when a worker reports its model
        next_check_s = 0.0
        known: set[tuple[str, str]] = set()
        while True:
            now = time.monotonic()
            changed = False
            if now >= next_check_s:
                changed = self._reload()
                next_check_s = now + self._settings.hot_texts_reload_s
            try:
                wanted = await self._wanted()
                due = now - self.stats.last_refresh_s >= self.refresh_s or self.stats.cycles == 0
                if changed or due or not set(wanted) <= known:
                    await self.refresh(wanted)
                    known = set(wanted)
            except RedisError as error:
                _log.warning("prewarm: Redis failed (%s); trying again in %.0f s", error, TICK_S)
            except Exception as error:  # a text that cannot be spoken, no workers: logged, retried next cycle
                _log.warning("prewarm: %s", error)
                self.stats.errors.append(str(error))
            await asyncio.sleep(TICK_S)

    def _reload(self) -> bool:
        """Read the hot-text file again if it changed; whether it did."""
        if self._file is None:
            return False
        try:
            mtime_ns = os.stat(self._file).st_mtime_ns
            if mtime_ns == self._file_mtime_ns:
                return False
            self._hot_texts = read_hot_texts(self._file)
            self._file_mtime_ns = mtime_ns
        except (OSError, UnicodeDecodeError) as error:
            _log.warning("prewarm: cannot read the hot-text file %s: %s (keeping the last list)", self._file, error)
            return False
        _log.info("prewarm: %d hot texts from %s", len(self._hot_texts), self._file)
        return True

    async def _wanted(self) -> list[tuple[str, str]]:
        """(voice, text) to keep warm: the hot texts in the default voice, then the promoted sentences."""
        default = self._registry.default.name
        wanted = [(default, text) for text in self._hot_texts]
        if self._promoter is not None:
            wanted += [entry for entry in await self._promoter.promoted() if entry not in wanted]
        return wanted

    async def refresh(self, wanted: Sequence[tuple[str, str]]) -> None:
        """Renew what is cached of `wanted`, synthesise what is not (up to `max_hot_sentences` sentences)."""
        info = self._pool.model_info()
        if info is None:
            return
        budget = self._settings.max_hot_sentences
        missing: dict[str, list[Sentence]] = {}
        renewed = 0
        for voice_name, text in wanted:
            if budget <= 0:
                break
            voice = self._registry.get(voice_name)
            sentences = (await self._sentences_of(voice_name, text))[:budget]
            budget -= len(sentences)
            params = SynthesisParams(0, 1.0, voice.noise_scale, voice.noise_w)
            keys = [cache_key(SynthesisInputs(info.model_version, voice.name, s.phoneme_ids, params)) for s in sentences]
            async with self._client.pipeline(transaction=False) as pipe:
                for key in keys:
                    pipe.expire(key, self._ttl_s)
                    pipe.expire(head_key(key), self._ttl_s)
                kept = (await pipe.execute())[::2]
            renewed += sum(1 for still in kept if still)
            missing.setdefault(voice_name, []).extend(s for s, still in zip(sentences, kept, strict=False) if not still)
        for stale in set(self._sentences) - set(wanted):  # no longer hot: forget its sentences
            del self._sentences[stale]
        for voice_name, sentences in missing.items():
            for start in range(0, len(sentences), SENTENCES_PER_UTTERANCE):
                await self._speak(voice_name, sentences[start : start + SENTENCES_PER_UTTERANCE])
        synthesised = sum(len(sentences) for sentences in missing.values())
        self.stats.renewed += renewed
        self.stats.synthesised += synthesised
        self._sentences_total.labels(action="renewed").inc(renewed)
        self._sentences_total.labels(action="synthesised").inc(synthesised)
        self.stats.cycles += 1
        self.stats.warm_sentences = self._settings.max_hot_sentences - budget
        self.stats.last_refresh_s = time.monotonic()

    async def _sentences_of(self, voice: str, text: str) -> list[Sentence]:
        sentences = self._sentences.get((voice, text))
        if sentences is None:
            sentences = [sentence async for sentence in await self._text_side.sentences(self._registry.get(voice), text)]
            self._sentences[(voice, text)] = sentences
        return sentences

    async def _speak(self, voice: str, sentences: Sequence[Sentence]) -> None:
        options = resolve_options(
            self._registry, voice=voice, speed=1.0, encoding=tts_pb2.LINEAR_PCM, sample_rate_hz=0,
            speaker_id=0, request_id="", include_alignment=False,
        )  # fmt: skip
        async for _ in self._synthesizer.speak(_iterate(sentences), options, None, listened=False):
            pass  # the pipeline writes each sentence's mel and audio head to the cache


async def _iterate(sentences: Sequence[Sentence]) -> AsyncIterator[Sentence]:
    for sentence in sentences:
        yield sentence
