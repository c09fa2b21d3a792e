"""Prometheus metrics of long-form jobs, on the gateway's registry.

Queue depth and lag are read from Redis every `QUEUE_POLL_S` by whichever process serves jobs, so
every gateway reports the same numbers and an autoscaler can read any of them.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Final

from prometheus_client import CollectorRegistry, Counter, Gauge
from redis.exceptions import RedisError

from libs.jobs.store import JobStore

_log = logging.getLogger(__name__)

QUEUE_POLL_S: Final = 5.0
"""How often queue depth and lag are read from Redis: the gauges, and the runners' autoscaling signal, are at most this old."""
OUTCOMES: Final = ("succeeded", "failed", "cancelled", "missing")


class JobMetrics:
    """Jobs by outcome, job audio made, takeovers, and the queue."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.created_total = Counter(
            "tts_jobs_created_total", "Jobs created (a create repeated with the same idempotency key counts once)", registry=registry
        )
        self.finished_total = Counter(
            "tts_jobs_finished_total", "Jobs ended by a runner here, by outcome (missing: deleted while running)", ["outcome"],
            registry=registry,
        )  # fmt: skip
        for outcome in OUTCOMES:
            self.finished_total.labels(outcome=outcome)
        self.audio_seconds_total = Counter(
            "tts_jobs_audio_seconds_total", "Seconds of job audio made here; its rate is the runners' audio seconds per second",
            registry=registry,
        )  # fmt: skip
        self.resumed_total = Counter(
            "tts_jobs_resumed_total", "Jobs taken over from a runner that stopped renewing its claim", registry=registry
        )
        self.queue_waiting = Gauge("tts_jobs_queue_waiting", "Jobs no runner has taken yet (queue depth)", registry=registry)
        self.queue_in_progress = Gauge("tts_jobs_queue_in_progress", "Jobs a runner holds", registry=registry)
        self.queue_lag_seconds = Gauge(
            "tts_jobs_queue_lag_seconds", "Age of the oldest job no runner has taken yet (0: none waits)", registry=registry
        )

    async def watch_queue(self, store: JobStore, interval_s: float = QUEUE_POLL_S) -> None:
        """Keep the queue gauges current until cancelled."""
        while True:
            try:
                stats = await store.queue_stats()
            except RedisError as error:
                _log.warning("job queue unreachable for metrics: %s", error)
            else:
                self.queue_waiting.set(stats.waiting)
                self.queue_in_progress.set(stats.in_progress)
                self.queue_lag_seconds.set(stats.lag_s)
            await asyncio.sleep(interval_s)
