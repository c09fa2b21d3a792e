"""Job text and audio sealed at rest with the cache's key ring, on a real Redis: nothing readable is
stored, a sealed job gives the file an unsealed one gives, and an altered, moved or foreign value is
refused with a clear error (DATA_LOSS), never served or spoken."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
import numpy as np
import pytest
import redis.asyncio as aioredis
from prometheus_client import CollectorRegistry

from libs.cache.sealing import KeyRing, new_key_line
from libs.devmesh.embedded_redis import EmbeddedRedis
from libs.jobs.audio import job_audio
from libs.jobs.metrics import JobMetrics
from libs.jobs.requests import job_status_for
from libs.jobs.runner import JobRunner
from libs.jobs.sealed import TamperedJobDataError
from libs.jobs.settings import JobSettings
from libs.jobs.store import FAILED, SUCCEEDED, IdempotencyConflictError, JobSpec, JobStore, pcm_key, text_key
from libs.pb.tts.v1 import tts_pb2

SPEC = JobSpec(voice="joe", speed=1.0, encoding=tts_pb2.LINEAR_PCM, sample_rate_hz=22050, speaker_id=0)
TEXT = "The keeper wrote each storm down. Nobody read the book."
KEY_LINE = new_key_line("jobs-1")
KEYRING = KeyRing.parse(KEY_LINE)


def sentence_pcm(seed: int, samples: int = 2205) -> bytes:
    """A tenth of a second of a tone, as 16-bit PCM (a different one per sentence)."""
    t = np.arange(samples) / SPEC.sample_rate_hz
    return (np.sin(2 * np.pi * (220 + 110 * seed) * t) * 12000).astype("<i2").tobytes()


PCM = [sentence_pcm(n) for n in range(3)]


def run(redis_server: EmbeddedRedis, test: Callable[[aioredis.Redis], Awaitable[Any]]) -> Any:
    async def body() -> Any:
        raw = aioredis.Redis.from_url(redis_server.url)
        try:
            return await test(raw)
        finally:
            await raw.aclose()

    return asyncio.run(body())


async def finished_job(store: JobStore) -> str:
    """A succeeded job of TEXT whose three sentences are PCM."""
    record, _ = await store.create(TEXT, SPEC)
    await store.take(record.job_id, "runner-a")
    for sentence, pcm in enumerate(PCM):
        assert await store.commit_sentence(
            record.job_id, sentence, "runner-a", pcm, chars_done=10 * (sentence + 1), samples=len(pcm) // 2
        )
    assert await store.finish(record.job_id, "runner-a", SUCCEEDED)
    return record.job_id


async def file_of(store: JobStore, job_id: str, encoding: int) -> bytes:
    return b"".join([piece async for piece in await job_audio(store, await store.get(job_id), encoding)])


def test_sealed_job_stores_nothing_readable_and_gives_the_unsealed_file(redis_server: EmbeddedRedis) -> None:
    async def test(raw: aioredis.Redis) -> None:
        sealed = JobStore.from_url(redis_server.url, 3600, keyring=KEYRING)
        plain = JobStore.from_url(redis_server.url, 3600)
        try:
            sealed_id, plain_id = await finished_job(sealed), await finished_job(plain)
            stored_text = await raw.get(text_key(sealed_id))
            stored_pcm = await raw.get(pcm_key(sealed_id, 1))
            assert stored_text[:4] == b"TSEA" and b"keeper" not in stored_text
            assert stored_pcm[:4] == b"TSEA" and PCM[1][:64] not in stored_pcm
            assert await raw.get(pcm_key(plain_id, 1)) == PCM[1]  # without a key ring nothing changes
            assert await sealed.text(sealed_id) == TEXT
            assert await sealed.audio(sealed_id, 0, 3) == PCM
            for encoding in (tts_pb2.LINEAR_PCM, tts_pb2.FLAC):
                assert await file_of(sealed, sealed_id, encoding) == await file_of(plain, plain_id, encoding)
        finally:
            await sealed.close()
            await plain.close()

    run(redis_server, test)


def test_a_tampered_audio_chunk_is_refused_with_a_clear_error(redis_server: EmbeddedRedis) -> None:
    async def test(raw: aioredis.Redis) -> None:
        store = JobStore.from_url(redis_server.url, 3600, keyring=KEYRING)
        try:
            job_id = await finished_job(store)
            value = bytearray(await raw.get(pcm_key(job_id, 2)))
            value[-20] ^= 0x01  # one bit of the ciphertext
            await raw.set(pcm_key(job_id, 2), bytes(value))
            with pytest.raises(TamperedJobDataError) as refused:
                await file_of(store, job_id, tts_pb2.LINEAR_PCM)
            assert f"job {job_id}'s audio of sentence 2 does not open" in str(refused.value)
            assert "fails authentication" in str(refused.value)
            assert job_status_for(refused.value) == (grpc.StatusCode.DATA_LOSS, str(refused.value))
        finally:
            await store.close()

    run(redis_server, test)


def test_audio_moved_to_another_sentence_or_sealed_by_another_key_is_refused(redis_server: EmbeddedRedis) -> None:
    async def test(raw: aioredis.Redis) -> None:
        store = JobStore.from_url(redis_server.url, 3600, keyring=KEYRING)
        other = JobStore.from_url(redis_server.url, 3600, keyring=KeyRing.parse(new_key_line("elsewhere")))
        try:
            job_id = await finished_job(store)
            await raw.set(pcm_key(job_id, 1), await raw.get(pcm_key(job_id, 0)))  # valid bytes, wrong place
            with pytest.raises(TamperedJobDataError, match="sentence 1 does not open"):
                await store.audio(job_id, 0, 3)
            with pytest.raises(TamperedJobDataError, match="which this gateway does not have"):
                await other.text(job_id)
        finally:
            await store.close()
            await other.close()

    run(redis_server, test)


def test_a_runner_fails_a_job_whose_text_was_tampered_instead_of_speaking_it(redis_server: EmbeddedRedis) -> None:
    async def test(raw: aioredis.Redis) -> None:
        store = JobStore.from_url(redis_server.url, 3600, keyring=KEYRING)
        settings = JobSettings(job_runners=1, job_claim_idle_s=5.0)
        # The text is read before anything is synthesised: a runner that refuses it needs no mesh.
        runner = JobRunner(store, None, None, None, settings, JobMetrics(CollectorRegistry()))  # type: ignore[arg-type]
        record, _ = await store.create(TEXT, SPEC)
        value = bytearray(await raw.get(text_key(record.job_id)))
        value[-1] ^= 0x80
        await raw.set(text_key(record.job_id), bytes(value), keepttl=True)
        running = asyncio.create_task(runner.run())
        try:
            for _ in range(100):
                record = await store.get(record.job_id)
                if record.finished:
                    break
                await asyncio.sleep(0.1)
            assert record.state == FAILED and record.attempts == 1  # failed at once, not retried
            assert f"job {record.job_id}'s text does not open" in record.error
            assert record.sentences_done == 0
        finally:
            running.cancel()
            await asyncio.gather(running, return_exceptions=True)
            await store.close()

    run(redis_server, test)


def test_an_idempotency_record_confirms_no_guessed_text_and_outlives_a_key_rotation(redis_server: EmbeddedRedis) -> None:
    async def test(raw: aioredis.Redis) -> None:
        store = JobStore.from_url(redis_server.url, 3600, keyring=KEYRING)
        rotated = JobStore.from_url(redis_server.url, 3600, keyring=KeyRing.parse(f"{new_key_line('jobs-2')}\n{KEY_LINE}"))
        try:
            record, made = await store.create(TEXT, SPEC, idempotency_key="retry-1")
            held = (await raw.get("tts:jobs:idem:retry-1")).decode()
            # Not the plain digest a reader of Redis could recompute from a guessed text: a keyed one.
            assert hashlib.sha256(SPEC.request_bytes(TEXT)).hexdigest()[:32] not in held
            assert held.startswith(f"{record.job_id} jobs-1:")
            # The same request retried after a new key came first is still the same request.
            again, made_again = await rotated.create(TEXT, SPEC, idempotency_key="retry-1")
            assert made and not made_again and again.job_id == record.job_id
            with pytest.raises(IdempotencyConflictError):
                await rotated.create("Another text altogether.", SPEC, idempotency_key="retry-1")
        finally:
            await store.close()
            await rotated.close()

    run(redis_server, test)
