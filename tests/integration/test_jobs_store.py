"""The job store on a real Redis: idempotent creates, the owner fence on every write, cancel, the
queue's claims (XAUTOCLAIM takes over an entry whose runner stopped renewing), and the queue stats."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from libs.devmesh.embedded_redis import EmbeddedRedis
from libs.jobs.store import (
    CANCELLED,
    RUNNING,
    SUCCEEDED,
    IdempotencyConflictError,
    JobNotFoundError,
    JobSpec,
    JobStore,
)  # fmt: skip
from libs.pb.tts.v1 import tts_pb2

SPEC = JobSpec(voice="joe", speed=1.0, encoding=tts_pb2.LINEAR_PCM, sample_rate_hz=22050, speaker_id=0)


def run(redis_server: EmbeddedRedis, test: Callable[[JobStore], Awaitable[Any]]) -> Any:
    async def body() -> Any:
        store = JobStore.from_url(redis_server.url, ttl_s=3600)
        try:
            return await test(store)
        finally:
            await store.close()

    return asyncio.run(body())


def test_retried_create_with_the_same_key_returns_the_first_job(redis_server: EmbeddedRedis) -> None:
    async def test(store: JobStore) -> None:
        first, first_new = await store.create("Hello there.", SPEC, "key-1")
        again, again_new = await store.create("Hello there.", SPEC, "key-1")
        other, _ = await store.create("Hello there.", SPEC, "key-2")
        assert (first_new, again_new) == (True, False)
        assert again.job_id == first.job_id != other.job_id
        assert (await store.queue_stats()).waiting == 2  # the retry queued nothing
        with pytest.raises(IdempotencyConflictError):
            await store.create("Another text.", SPEC, "key-1")

    run(redis_server, test)


def test_only_the_owner_commits_and_only_the_next_sentence(redis_server: EmbeddedRedis) -> None:
    async def test(store: JobStore) -> None:
        record, _ = await store.create("One. Two.", SPEC)
        assert await store.take(record.job_id, "runner-a") == RUNNING
        assert await store.commit_sentence(record.job_id, 0, "runner-a", b"\x01\x00", chars_done=4, samples=1)
        assert not await store.commit_sentence(record.job_id, 0, "runner-a", b"\x02\x00", chars_done=4, samples=1)  # done already
        assert await store.take(record.job_id, "runner-b") == RUNNING  # a takeover moves the fence
        assert not await store.commit_sentence(record.job_id, 1, "runner-a", b"\x03\x00", chars_done=9, samples=1)
        assert await store.commit_sentence(record.job_id, 1, "runner-b", b"\x04\x00", chars_done=9, samples=1)
        assert not await store.finish(record.job_id, "runner-a", SUCCEEDED)
        assert await store.finish(record.job_id, "runner-b", SUCCEEDED)
        done = await store.get(record.job_id)
        assert (done.state, done.sentences_done, done.audio_samples, done.chars_done, done.attempts) == (SUCCEEDED, 2, 2, 9, 2)
        assert await store.audio(record.job_id, 0, 2) == [b"\x01\x00", b"\x04\x00"]

    run(redis_server, test)


def test_cancel_ends_a_queued_or_running_job_and_leaves_an_ended_one(redis_server: EmbeddedRedis) -> None:
    async def test(store: JobStore) -> None:
        queued, _ = await store.create("Queued.", SPEC)
        running, _ = await store.create("Running.", SPEC)
        await store.take(running.job_id, "runner-a")
        assert (await store.cancel(queued.job_id)).state == CANCELLED
        assert (await store.cancel(running.job_id)).state == CANCELLED
        assert not await store.commit_sentence(running.job_id, 0, "runner-a", b"\x00\x00", chars_done=1, samples=1)
        assert await store.take(queued.job_id, "runner-b") == CANCELLED  # a runner that reads it later skips it
        finished, _ = await store.create("Finished.", SPEC)
        await store.take(finished.job_id, "runner-a")
        await store.finish(finished.job_id, "runner-a", SUCCEEDED)
        assert (await store.cancel(finished.job_id)).state == SUCCEEDED
        await store.delete(finished.job_id)
        with pytest.raises(JobNotFoundError):
            await store.get(finished.job_id)
        assert [record.job_id for record in await store.list(10)] == [running.job_id, queued.job_id]

    run(redis_server, test)


def test_an_entry_not_renewed_is_claimed_by_another_runner_and_a_renewed_one_is_not(redis_server: EmbeddedRedis) -> None:
    async def test(store: JobStore) -> None:
        kept, _ = await store.create("Kept.", SPEC)
        dropped, _ = await store.create("Dropped.", SPEC)
        first = await store.read_new("runner-a", 100)
        second = await store.read_new("runner-a", 100)
        assert first is not None and second is not None and first.job_id == kept.job_id and not first.claimed
        stats = await store.queue_stats()
        assert (stats.waiting, stats.in_progress) == (0, 2)
        await asyncio.sleep(0.6)
        assert await store.renew("runner-a", first.entry_id)
        claimed = await store.claim_abandoned("runner-b", 0.5)
        assert claimed is not None and claimed.claimed and claimed.job_id == dropped.job_id
        assert await store.claim_abandoned("runner-b", 0.5) is None
        assert not await store.renew("runner-a", second.entry_id)  # runner-b holds it now
        await store.release(first.entry_id)
        assert (await store.queue_stats()).in_progress == 1

    run(redis_server, test)


def test_queue_lag_is_the_age_of_the_oldest_job_not_taken(redis_server: EmbeddedRedis) -> None:
    async def test(store: JobStore) -> None:
        assert (await store.queue_stats()).lag_s == 0.0
        await store.create("First.", SPEC)
        await asyncio.sleep(0.3)
        await store.create("Second.", SPEC)
        stats = await store.queue_stats()
        assert stats.waiting == 2 and 0.3 <= stats.lag_s < 5
        await store.read_new("runner-a", 100)
        after = await store.queue_stats()
        assert after.waiting == 1 and after.lag_s < stats.lag_s

    run(redis_server, test)


def test_a_cancelled_queued_job_leaves_the_queue_at_once(redis_server: EmbeddedRedis) -> None:
    async def test(store: JobStore) -> None:
        first, _ = await store.create("First.", SPEC)
        await store.create("Second.", SPEC)
        await store.cancel(first.job_id)
        assert (await store.queue_stats()).waiting == 1
        entry = await store.read_new("runner-a", 100)
        assert entry is not None and entry.job_id != first.job_id

    run(redis_server, test)
