"""The two doors of long-form jobs give each verb one meaning, on a real Redis: cancel (HTTP
`POST /v1/audio/jobs/{id}/cancel`, gRPC CancelJob) stops a job and keeps it; delete (HTTP `DELETE
/v1/audio/jobs/{id}`, gRPC DeleteJob) cancels it if it has not ended and removes it and its audio.
A job body follows the speech body's rules, and every refusal is OpenAI-shaped with the status of
the one table."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import grpc
import httpx
import pytest
import redis.asyncio as aioredis
from prometheus_client import CollectorRegistry

from libs.devmesh.embedded_redis import EmbeddedRedis
from libs.jobs.metrics import JobMetrics
from libs.jobs.store import CANCELLED, QUEUED, SUCCEEDED, JobSpec, JobStore, job_key, pcm_key, text_key
from libs.pb.tts.v1 import jobs_pb2, jobs_pb2_grpc, tts_pb2
from libs.serving.http_errors import openai_shaped_app
from libs.voice.registry import default_registry
from services.gateway.jobs_http import JOBS_PATH, JobsHttpApi
from services.gateway.jobs_servicer import LongFormSynthesisServicer, add_to_server
from tests.support.servers import aio_server

MAX_TEXT_CHARS = 10_000
SPEC = JobSpec(voice="en_US-joe-medium", speed=1.0, encoding=tts_pb2.LINEAR_PCM, sample_rate_hz=22050, speaker_id=0)


@dataclass
class Doors:
    redis_url: str
    store: JobStore
    http: httpx.AsyncClient
    grpc: jobs_pb2_grpc.LongFormSynthesisStub


@asynccontextmanager
async def doors(redis_server: EmbeddedRedis) -> AsyncIterator[Doors]:
    """Both doors over one job store on `redis_server`, as the gateway serves them (no runners)."""
    store = JobStore.from_url(redis_server.url, ttl_s=3600)
    registry, metrics = default_registry(), JobMetrics(CollectorRegistry())
    api = JobsHttpApi(store, registry, metrics, MAX_TEXT_CHARS)
    app = openai_shaped_app(api.routes())
    server = aio_server()
    add_to_server(LongFormSynthesisServicer(store=store, registry=registry, metrics=metrics, max_text_chars=MAX_TEXT_CHARS), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with (
            grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel,
            httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gateway") as http,
        ):
            yield Doors(redis_server.url, store, http, jobs_pb2_grpc.LongFormSynthesisStub(channel))
    finally:
        await server.stop(None)
        await store.close()


def run(redis_server: EmbeddedRedis, test: Callable[[Doors], Awaitable[None]]) -> None:
    async def body() -> None:
        async with doors(redis_server) as both:
            await test(both)

    asyncio.run(body())


async def finished_with_audio(store: JobStore, text: str) -> str:
    """A job that a runner has spoken: one sentence of PCM committed, then succeeded."""
    record, _ = await store.create(text, SPEC)
    assert await store.take(record.job_id, "runner") == "running"
    assert await store.commit_sentence(record.job_id, 0, "runner", b"\x01\x00\x02\x00", chars_done=len(text), samples=2)
    assert await store.finish(record.job_id, "runner", SUCCEEDED)
    return record.job_id


async def stored_keys(redis_url: str, job_id: str) -> int:
    """How many of the job's record, text and audio keys its Redis holds."""
    client = aioredis.from_url(redis_url)
    try:
        return int(await client.exists(job_key(job_id), text_key(job_id), pcm_key(job_id, 0)))
    finally:
        await client.aclose()


def openai_error(response: httpx.Response) -> dict[str, Any]:
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}
    return body["error"]


def test_cancel_stops_a_job_and_keeps_it_on_both_doors(redis_server: EmbeddedRedis) -> None:
    async def test(both: Doors) -> None:
        created = await both.http.post(JOBS_PATH, json={"model": "tts-1", "voice": "alloy", "input": "Cancel me over HTTP."})
        assert created.status_code == 202 and created.json()["status"] == QUEUED
        job_id = created.json()["id"]
        cancelled = await both.http.post(f"{JOBS_PATH}/{job_id}/cancel")
        assert cancelled.status_code == 200 and cancelled.json()["status"] == CANCELLED
        kept = await both.grpc.GetJob(jobs_pb2.GetJobRequest(id=job_id))
        assert kept.state == jobs_pb2.JOB_STATE_CANCELLED

        over_grpc = await both.grpc.CreateJob(jobs_pb2.CreateJobRequest(text="Cancel me over gRPC."))
        stopped = await both.grpc.CancelJob(jobs_pb2.CancelJobRequest(id=over_grpc.id))
        assert stopped.state == jobs_pb2.JOB_STATE_CANCELLED
        seen = await both.http.get(f"{JOBS_PATH}/{over_grpc.id}")
        assert seen.status_code == 200 and seen.json()["status"] == CANCELLED

        # An ended job is returned as it is, on both doors.
        done = await finished_with_audio(both.store, "Already spoken.")
        assert (await both.http.post(f"{JOBS_PATH}/{done}/cancel")).json()["status"] == SUCCEEDED
        assert (await both.grpc.CancelJob(jobs_pb2.CancelJobRequest(id=done))).state == jobs_pb2.JOB_STATE_SUCCEEDED
        assert (await both.http.get(f"{JOBS_PATH}/{done}/audio")).content == b"\x01\x00\x02\x00"

    run(redis_server, test)


def test_delete_removes_a_job_and_its_audio_on_both_doors(redis_server: EmbeddedRedis) -> None:
    async def test(both: Doors) -> None:
        over_http = await finished_with_audio(both.store, "Delete me over HTTP.")
        assert await stored_keys(both.redis_url, over_http) == 3
        deleted = await both.http.delete(f"{JOBS_PATH}/{over_http}")
        assert deleted.status_code == 200
        assert deleted.json() == {"id": over_http, "object": "audio.job", "deleted": True}
        assert await stored_keys(both.redis_url, over_http) == 0
        gone = await both.http.get(f"{JOBS_PATH}/{over_http}")
        assert gone.status_code == 404 and openai_error(gone)["code"] == "not_found"
        with pytest.raises(grpc.aio.AioRpcError) as missing:
            await both.grpc.GetJob(jobs_pb2.GetJobRequest(id=over_http))
        assert missing.value.code() == grpc.StatusCode.NOT_FOUND

        over_grpc = await finished_with_audio(both.store, "Delete me over gRPC.")
        assert await both.grpc.DeleteJob(jobs_pb2.DeleteJobRequest(id=over_grpc)) == jobs_pb2.DeleteJobResponse()
        assert await stored_keys(both.redis_url, over_grpc) == 0
        assert (await both.http.get(f"{JOBS_PATH}/{over_grpc}")).status_code == 404

        # A job that has not ended is cancelled and removed; a job that does not exist is NOT_FOUND on both doors.
        queued = (await both.http.post(JOBS_PATH, json={"input": "Nobody runs this one."})).json()["id"]
        assert (await both.http.delete(f"{JOBS_PATH}/{queued}")).status_code == 200
        assert (await both.http.get(f"{JOBS_PATH}/{queued}")).status_code == 404
        assert queued not in [job["id"] for job in (await both.http.get(JOBS_PATH)).json()["data"]]
        again = await both.http.delete(f"{JOBS_PATH}/{queued}")
        assert again.status_code == 404 and openai_error(again)["code"] == "not_found"
        with pytest.raises(grpc.aio.AioRpcError) as twice:
            await both.grpc.DeleteJob(jobs_pb2.DeleteJobRequest(id=queued))
        assert twice.value.code() == grpc.StatusCode.NOT_FOUND

    run(redis_server, test)


def test_job_requests_are_refused_as_speech_requests_are(redis_server: EmbeddedRedis) -> None:
    async def test(both: Doors) -> None:
        async def refused(body: Any) -> tuple[int, str | None, str]:
            response = await both.http.post(JOBS_PATH, json=body)
            error = openai_error(response)
            return response.status_code, error["param"], error["code"]

        assert await refused({"voice": "alloy"}) == (400, "input", "missing_required_parameter")
        assert await refused({"input": "Hi.", "model": "whisper-1"}) == (404, "model", "model_not_found")
        assert await refused({"input": "Hi.", "voice": "nobody"}) == (404, "voice", "not_found")
        assert await refused({"input": "Hi.", "speed": "fast"}) == (400, "speed", "invalid_type")
        assert await refused({"input": "Hi.", "speed": 9}) == (400, "speed", "invalid_argument")
        assert await refused({"input": "Hi.", "lexicon": {"go": "ɡoʊ"}}) == (400, "lexicon", "unknown_parameter")
        assert await refused({"input": " "}) == (400, "input", "invalid_argument")
        assert await refused({"input": "x" * (MAX_TEXT_CHARS + 1)}) == (400, "input", "invalid_argument")

        queued = (await both.http.post(JOBS_PATH, json={"input": "Not spoken yet."})).json()["id"]
        unfinished = await both.http.get(f"{JOBS_PATH}/{queued}/audio")
        assert unfinished.status_code == 409 and openai_error(unfinished)["code"] == "failed_precondition"
        bad_format = await both.http.get(f"{JOBS_PATH}/{queued}/audio", params={"format": "ogg"})
        assert bad_format.status_code == 400 and openai_error(bad_format)["param"] == "format"
        too_many = await both.http.get(JOBS_PATH, params={"limit": 5000})
        assert too_many.status_code == 400 and openai_error(too_many)["param"] == "limit"
        assert openai_error(too_many)["message"].startswith("limit 5000 is out of range")
        bad_after = await both.http.get(JOBS_PATH, params={"after": "abc"})
        assert bad_after.status_code == 400 and openai_error(bad_after)["param"] == "after"
        assert "send the next of the previous page" in openai_error(bad_after)["message"]
        wrong_verb = await both.http.get(f"{JOBS_PATH}/{queued}/cancel")
        assert wrong_verb.status_code == 405 and openai_error(wrong_verb)["code"] == "method_not_allowed"

    run(redis_server, test)
