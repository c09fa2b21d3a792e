"""A job's audio as a file in any supported encoding, made from the PCM it keeps per sentence.

A job keeps 16-bit PCM at the rate chosen when it was created (libs.jobs.store); a download runs it
through one encoder (libs.encoding), resampled as one stream when the encoding cannot carry that
rate. Making the file from stored PCM on each download is what lets a job resumed by another runner
give the same file as an uninterrupted one: no encoder state has to survive the runner.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Final

import numpy as np

from libs.audio.resample import SentenceResampler
from libs.encoding.encoders import ENCODINGS, encoder_for
from libs.jobs.store import SUCCEEDED, JobRecord, JobStore

SENTENCES_PER_READ: Final = 32
"""Sentences of a job's audio read from the store in one round trip: a download holds at most this many in memory."""
PCM_SCALE: Final = 32767.0
"""The scale libs.encoding.pcm uses for float -> int16, so int16 -> float -> int16 gives the same samples."""


class JobAudioUnavailableError(Exception):
    """The job has no complete audio to give (not finished, failed, or expired)."""


def output_rate_for(record: JobRecord, encoding: int) -> int:
    """The rate a download in `encoding` has: the job's own when the encoding carries it, else the encoding's default."""
    spec = ENCODINGS[encoding]
    rate = record.spec.sample_rate_hz
    if spec.sample_rates_hz is None or rate in spec.sample_rates_hz:
        return rate
    return spec.default_rate_hz or spec.sample_rates_hz[-1]


async def job_audio(store: JobStore, record: JobRecord, encoding: int) -> AsyncIterator[bytes]:
    """The bytes of the finished job's file in `encoding` (an ENCODINGS key), as they are made."""
    if record.state != SUCCEEDED:
        raise JobAudioUnavailableError(
            f"job {record.job_id} is {record.state}; its audio exists once it has succeeded (GET the job for its progress)"
        )
    rate_hz = output_rate_for(record, encoding)
    return _encoded(store, record, encoding, rate_hz)


async def _encoded(store: JobStore, record: JobRecord, encoding: int, rate_hz: int) -> AsyncIterator[bytes]:
    encoder = encoder_for(encoding, rate_hz)
    resampler = SentenceResampler(record.spec.sample_rate_hz, rate_hz)
    total = record.sentences_done
    for start in range(0, total, SENTENCES_PER_READ):
        values = await store.audio(record.job_id, start, min(SENTENCES_PER_READ, total - start))
        for offset, pcm in enumerate(values):
            if not pcm:
                raise JobAudioUnavailableError(f"job {record.job_id}'s audio of sentence {start + offset} has expired")
            samples = np.frombuffer(pcm, dtype="<i2").astype(np.float32) / PCM_SCALE
            last = start + offset == total - 1
            data = encoder.encode(resampler.push(samples, last=last))
            if data:
                yield data
    tail = encoder.finish()
    if tail:
        yield tail
