"""The storage of a job's audio that its settings name (`--job-audio-store`): Redis, with the job, or
an S3 bucket. The S3 client (aiobotocore, with aiohttp) is imported only for a bucket: it was about a
fifth of a gateway's imports (1.9 CPU s with it, 1.6 without)."""

from __future__ import annotations

from libs.jobs.chunks import AudioChunks, InRedis
from libs.jobs.settings import REDIS_AUDIO_STORE, JobSettings


def audio_chunks_for(settings: JobSettings) -> AudioChunks:
    """The audio storage `--job-audio-store` names."""
    if settings.job_audio_store == REDIS_AUDIO_STORE:
        return InRedis()
    from libs.jobs.objects import ObjectStoreChunks  # see the module docstring

    return ObjectStoreChunks.from_url(settings.job_audio_store, settings.job_s3_endpoint_url)
