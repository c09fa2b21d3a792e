"""The gateway's work that no listener waits for: long-form jobs (their API, runners and queue
metrics) and cache prewarming (hot texts, promotion). Built from the gateway's settings next to its
live-stream parts, started after them and stopped before them (services.gateway.__main__)."""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import Executor
from typing import Any

import grpc
from prometheus_client import CollectorRegistry
from starlette.routing import Route

from libs.cache.mel_cache import cluster_mode, redis_client
from libs.cache.sealing import KeyRing
from libs.cache.settings import redacted_url
from libs.jobs.audio_stores import audio_chunks_for
from libs.jobs.metrics import JobMetrics
from libs.jobs.runner import JobRunner
from libs.jobs.store import JobStore
from libs.prewarm.promotion import Promoter
from libs.prewarm.warmer import CacheWarmer
from libs.settings.files import SettingTargetError
from libs.synthesis.synthesizer import Synthesizer
from libs.synthesis.text_side import SentenceListener, TextSide
from libs.text.phonemizer_pool import PhonemizerPool
from libs.upstream.pool import WorkerPool
from libs.voice.registry import VoiceRegistry
from services.gateway.jobs_http import JobsHttpApi
from services.gateway.jobs_servicer import LongFormSynthesisServicer, add_to_server
from services.settings import GatewaySettings

_log = logging.getLogger(__name__)
PREWARM_REDIS_TIMEOUT_S = 5.0


def job_redis_url(settings: GatewaySettings) -> str:
    """The Redis of the long-form jobs: --jobs-redis-url, else the cache's own zone's Redis when it is
    no cluster, else "" (jobs off)."""
    own_url = settings.jobs.jobs_redis_url.strip()
    if own_url:
        return own_url
    cache = settings.cache
    if cache.enabled and not cache.redis_cluster:
        return cache.url_for_zone(settings.server.zone)
    return ""


async def check_redis_kinds(settings: GatewaySettings) -> None:
    """Refuse to start on a Redis of another kind than the settings say (SettingTargetError), asking
    each Redis once: a cache client that does not follow a cluster's slots would fail two keys in three
    with MOVED, a cluster client on one Redis would fail every call, and the job keys cannot live on a
    cluster at all (one script writes the queue, the index and a job's keys, across slots). A Redis
    that does not answer now is no reason to stop: the cache fails open, job calls fail until it is back.
    """
    cache = settings.cache
    if cache.enabled:
        url = cache.url_for_zone(settings.server.zone)
        node_of_cluster = await cluster_mode(url, cache)
        if node_of_cluster is True and not cache.redis_cluster:
            raise SettingTargetError(
                f"--redis-url {redacted_url(url)} is a node of a Redis Cluster: set --redis-cluster (TTS_REDIS_CLUSTER=true) "
                "so the cache follows the cluster's slots"
            )
        if node_of_cluster is False and cache.redis_cluster:
            raise SettingTargetError(f"--redis-cluster is set but --redis-url {redacted_url(url)} is not a Redis Cluster node: drop --redis-cluster")
    jobs_url = job_redis_url(settings)
    if jobs_url and await cluster_mode(jobs_url, cache):
        raise SettingTargetError(
            f"--jobs-redis-url {redacted_url(jobs_url)} is a node of a Redis Cluster: long-form jobs need one Redis (a script "
            "writes the queue, the index and a job's keys at once, which a cluster refuses across slots); give them a Redis "
            "that is not a cluster, or leave --jobs-redis-url empty to turn jobs off"
        )


class BackgroundWork:
    """Jobs (the API whenever there is a Redis, runners when `--job-runners` > 0) and prewarming
    (whenever the cache is on).

    Built in two steps, because the live path and this work feed each other: `from_settings` makes
    what needs only the settings (the job store and its API, prewarming's Redis and promotion
    counter, whose `on_sentence` the live streams' text side is built with), and `speak_with` adds,
    once the synthesizer exists, what speaks through it (job runners, the cache warmer)."""

    def __init__(self, settings: GatewaySettings, jobs: JobStore | None, metrics_registry: CollectorRegistry) -> None:
        self._settings = settings
        self._metrics_registry = metrics_registry
        self.jobs = jobs
        self.job_metrics = JobMetrics(metrics_registry) if jobs is not None else None
        self._servicer: LongFormSynthesisServicer | None = None
        self._http: JobsHttpApi | None = None
        self._runner: JobRunner | None = None
        self._warmer: CacheWarmer | None = None
        self._promoter: Promoter | None = None
        self._prewarm_client: Any = None  # a Redis or RedisCluster client
        self._tasks: list[asyncio.Task[None]] = []

    @classmethod
    def from_settings(
        cls, settings: GatewaySettings, registry: VoiceRegistry, metrics_registry: CollectorRegistry, keyring: KeyRing | None = None
    ) -> BackgroundWork:
        """The job store and its API (with a job Redis), prewarming's Redis client and promotion
        counter (with the cache on); `keyring` is the cache's (promoted texts, job texts and job
        audio are sealed as its values are)."""
        cache = settings.cache
        store = None
        jobs_url = job_redis_url(settings)
        if jobs_url:
            store = JobStore.from_url(jobs_url, settings.jobs.job_ttl_s, cache, chunks=audio_chunks_for(settings.jobs), keyring=keyring)
            sealing = f"sealed with key {keyring.current_id}" if keyring is not None else "plain (no --cache-key-file)"
            _log.info(
                "long-form jobs on Redis at %s, job audio in %s; job text and audio stored %s",
                redacted_url(jobs_url), settings.jobs.job_audio_store, sealing,
            )  # fmt: skip
        else:
            _log.info("long-form jobs are off: give them a Redis that is not a cluster (--jobs-redis-url)")
        work = cls(settings, store, metrics_registry)
        if store is not None and work.job_metrics is not None:
            max_chars = settings.jobs.job_max_text_chars
            work._servicer = LongFormSynthesisServicer(store=store, registry=registry, metrics=work.job_metrics, max_text_chars=max_chars)
            work._http = JobsHttpApi(store, registry, work.job_metrics, max_chars)
        if cache.enabled:
            work._prewarm_client = redis_client(cache.url_for_zone(settings.server.zone), cache, PREWARM_REDIS_TIMEOUT_S)
            prewarm = settings.prewarm
            if prewarm.promote_after:
                work._promoter = Promoter(
                    work._prewarm_client, prewarm.promote_after, prewarm.promote_window_s, prewarm.promoted_keep_s, keyring
                )
        return work

    @property
    def on_sentence(self) -> SentenceListener | None:
        """What the live streams' text side tells of each sentence it hands out: promotion's count
        (None without promotion)."""
        return self._promoter.count if self._promoter is not None else None

    def speak_with(
        self, synthesizer: Synthesizer, text_executor: Executor, phonemizers: PhonemizerPool, registry: VoiceRegistry, pool: WorkerPool
    ) -> None:
        """Add what speaks through `synthesizer`: job runners (`--job-runners` > 0, with a job Redis)
        and the cache warmer (with the cache on). Their text sides share the live streams' text
        thread and processes, and tell nobody of their sentences: only listeners' requests count
        towards promotion."""
        settings = self._settings
        if self.jobs is not None and self.job_metrics is not None and settings.jobs.job_runners:
            # Only the length limit is a job's.
            job_text_side = TextSide(text_executor, settings.jobs.job_max_text_chars, settings.text, phonemizers)
            self._runner = JobRunner(self.jobs, synthesizer, job_text_side, registry, settings.jobs, self.job_metrics)
        if self._prewarm_client is not None:
            warm_text_side = TextSide(text_executor, settings.limits.max_text_chars, settings.text, phonemizers)
            self._warmer = CacheWarmer(
                settings.prewarm, self._prewarm_client, synthesizer, warm_text_side, registry, pool, settings.cache.ttl_s,
                self._promoter, self._metrics_registry,
            )  # fmt: skip

    def add_to_server(self, server: grpc.aio.Server) -> None:
        if self._servicer is not None:
            add_to_server(self._servicer, server)

    def http_routes(self) -> list[Route]:
        return self._http.routes() if self._http is not None else []

    async def start(self) -> None:
        if self.jobs is not None and self.job_metrics is not None:
            self._tasks.append(asyncio.create_task(self.job_metrics.watch_queue(self.jobs)))
        for part in (self._runner, self._promoter, self._warmer):
            if part is not None:
                self._tasks.append(asyncio.create_task(part.run()))

    async def close(self) -> None:
        """Stop everything (a job in hand stays claimed; another runner resumes it)."""
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self.jobs is not None:
            await self.jobs.close()
        if self._prewarm_client is not None:
            await self._prewarm_client.aclose()
