"""How long-form jobs are queued, run, kept and resumed (libs.jobs)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from libs.settings.fields import setting

MAX_JOB_TEXT_CHARS: Final = 1_000_000
"""The longest text a job takes: a long book is ~1,000,000 characters (about 18 hours of speech)."""
DEFAULT_JOB_TTL_S: Final = 24 * 3600
"""A day to fetch a finished book before its audio and record go."""
# A live runner renews its claim every claim_idle_s / 3, so a runner gone for 30 s has certainly
# missed three renewals; a job waits at most that long before another runner picks it up.
DEFAULT_CLAIM_IDLE_S: Final = 30.0
DEFAULT_JOB_RUNNERS: Final = 1
DEFAULT_CANCEL_POLL_S: Final = 0.2
"""How often a running job reads its own state, so a cancel stops it well within a second."""


@dataclass(frozen=True)
class JobSettings:
    """Long-form synthesis jobs: the queue, the runners in this process, how long results are kept."""

    jobs_redis_url: str = setting(
        "", env="TTS_JOBS_REDIS_URL",
        doc="Redis of the job queue and job audio (empty: the cache's --redis-url); use one with maxmemory-policy noeviction",
    )  # fmt: skip
    job_runners: int = setting(
        DEFAULT_JOB_RUNNERS, env="TTS_JOB_RUNNERS", unit="count", minimum=0, maximum=64,
        doc="jobs this process synthesises at once (0: it only accepts and serves jobs); each is one stream of the gateway",
    )  # fmt: skip
    job_ttl_s: int = setting(
        DEFAULT_JOB_TTL_S, env="TTS_JOB_TTL_S", unit="s", minimum=60,
        doc="how long a job's record and audio are kept after its last change",
    )  # fmt: skip
    job_claim_idle_s: float = setting(
        DEFAULT_CLAIM_IDLE_S, env="TTS_JOB_CLAIM_IDLE_S", unit="s", minimum=0.5, maximum=3600,
        doc="a job whose runner has not renewed its claim for this long is taken over by another runner",
    )  # fmt: skip
    job_max_text_chars: int = setting(
        MAX_JOB_TEXT_CHARS, env="TTS_JOB_MAX_TEXT_CHARS", unit="characters", minimum=1, maximum=MAX_JOB_TEXT_CHARS,
        doc="longest text of a long-form job",
    )  # fmt: skip
