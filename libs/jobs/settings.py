"""How long-form jobs are queued, run, kept and resumed (libs.jobs)."""

from __future__ import annotations

import re
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
REDIS_AUDIO_STORE: Final = "redis"
"""The job audio store that keeps each sentence's audio in the job Redis, next to the job."""
_BUCKET_PATTERN: Final = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")


def parse_audio_store(text: str) -> str:
    """`redis`, or `s3://BUCKET[/PREFIX]` with a valid bucket name (ValueError saying what to write)."""
    if text == REDIS_AUDIO_STORE:
        return text
    bucket, _, prefix = text.removeprefix("s3://").partition("/")
    if not text.startswith("s3://") or not _BUCKET_PATTERN.match(bucket):
        raise ValueError(f"use {REDIS_AUDIO_STORE!r} or s3://BUCKET/PREFIX (a bucket is 3 to 63 of a-z, 0-9, '.', '-')")
    return f"s3://{bucket}/{prefix.strip('/')}" if prefix.strip("/") else f"s3://{bucket}"


@dataclass(frozen=True)
class JobSettings:
    """Long-form synthesis jobs: the queue, the runners in this process, how long results are kept."""

    jobs_redis_url: str = setting(
        "", env="TTS_JOBS_REDIS_URL",
        doc="Redis of the job queue and job audio, one for every zone (empty: the cache's --redis-url); reached with the cache's "
        "--redis-password-file and --redis-ca (one password for both; user in the URL for an ACL user); a single Redis, "
        "not a cluster, with persistence and maxmemory-policy noeviction",
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
    job_audio_store: str = setting(
        REDIS_AUDIO_STORE, env="TTS_JOB_AUDIO_STORE", parse=parse_audio_store,
        doc="where job audio is kept: redis (with the job) or s3://BUCKET/PREFIX, an S3-compatible store (AWS_* credentials; expiry by the bucket's lifecycle rule)",
    )  # fmt: skip
    job_s3_endpoint_url: str = setting(
        "", env="TTS_JOB_S3_ENDPOINT_URL",
        doc="endpoint of the S3-compatible store for s3:// job audio, e.g. http://minio:9000 (empty: AWS S3 in AWS_DEFAULT_REGION)",
    )  # fmt: skip
