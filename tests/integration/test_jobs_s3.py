"""Job audio in an S3-compatible object store (--job-audio-store s3://...), against a real S3 server
process over a real socket.

No MinIO server binary installs from the package index, so the server is moto's standalone S3
server (`python -m moto.server`) as a stand-in: the same HTTP API, signatures and errors a client
sees, in a separate process. The store's own tests run on a real Redis next to it; the end-to-end
test runs a real job on the real mesh through a gateway whose audio goes to the bucket, and checks
that its file equals the file of the same text kept in Redis, and that deleting the job deletes its
objects.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import botocore.session
import grpc
import numpy as np
import pytest
from botocore.config import Config

from libs.cache.sealing import KeyRing, new_key_line
from libs.devmesh.embedded_redis import EmbeddedRedis, EmbeddedRedisConfig
from libs.jobs.objects import ObjectStoreChunks
from libs.jobs.requests import job_status_for
from libs.jobs.sealed import TamperedJobDataError
from libs.jobs.store import JobStore, pcm_key
from libs.pb.tts.v1 import jobs_pb2, jobs_pb2_grpc, tts_pb2
from tests.integration.test_jobs_sealed import PCM, SPEC, TEXT, file_of, finished_job, run
from tests.support.gateway_process import extra_gateway
from tests.support.mesh import Mesh
from tests.support.ports import free_port

BUCKET = "tts-job-audio"
PREFIX = "jobs"
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "test-key", "AWS_SECRET_ACCESS_KEY": "test-secret", "AWS_DEFAULT_REGION": "us-east-1"}
KEYRING = KeyRing.parse(new_key_line("jobs-1"))
JOB_TIMEOUT_S = 300.0
JOB_TEXT = "The keeper climbed the stairs at dusk. He polished the great lens. Ships passed far out at sea."


@pytest.fixture(scope="module")
def s3_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The endpoint of a moto S3 server process on a free loopback port, with BUCKET made."""
    port = free_port()
    log = (tmp_path_factory.mktemp("s3") / "moto.log").open("wb")
    server = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)], stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert server.poll() is None and time.monotonic() < deadline, "the S3 server did not start"
                time.sleep(0.1)
        url = f"http://127.0.0.1:{port}"
        s3_client(url).create_bucket(Bucket=BUCKET)
        yield url
    finally:
        server.terminate()
        server.wait(timeout=10)
        log.close()


@pytest.fixture(autouse=True)
def aws_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in CREDENTIALS.items():
        monkeypatch.setenv(name, value)


def s3_client(url: str) -> Any:
    """A plain (blocking) botocore client, to look into the bucket behind the store's back."""
    config = Config(s3={"addressing_style": "path"})
    return botocore.session.get_session().create_client(
        "s3",
        endpoint_url=url,
        region_name="us-east-1",
        aws_access_key_id="test-key",
        aws_secret_access_key="test-secret",
        config=config,
    )


def objects_of(url: str, job_id: str) -> dict[str, bytes]:
    client = s3_client(url)
    listed = client.list_objects_v2(Bucket=BUCKET, Prefix=f"{PREFIX}/{job_id}/").get("Contents", [])
    return {item["Key"]: client.get_object(Bucket=BUCKET, Key=item["Key"])["Body"].read() for item in listed}


def test_sealed_audio_goes_to_the_bucket_reads_back_as_in_redis_and_delete_removes_it(
    redis_server: EmbeddedRedis, s3_url: str
) -> None:
    async def test(raw: Any) -> None:
        in_s3 = JobStore.from_url(redis_server.url, 3600, chunks=ObjectStoreChunks(BUCKET, f"{PREFIX}/", s3_url), keyring=KEYRING)
        in_redis = JobStore.from_url(redis_server.url, 3600, keyring=KEYRING)
        try:
            s3_id, redis_id = await finished_job(in_s3), await finished_job(in_redis)
            stored = objects_of(s3_url, s3_id)
            assert sorted(name.encode() for name in stored) == [await raw.get(pcm_key(s3_id, n)) for n in range(3)]
            assert all(value[:4] == b"TSEA" and pcm[:64] not in value for value, pcm in zip(stored.values(), PCM, strict=False))
            assert await in_s3.audio(s3_id, 0, 3) == PCM
            for encoding in (tts_pb2.LINEAR_PCM, tts_pb2.MP3):
                assert await file_of(in_s3, s3_id, encoding) == await file_of(in_redis, redis_id, encoding)
            await in_s3.delete(s3_id)
            assert objects_of(s3_url, s3_id) == {}
        finally:
            await in_s3.close()
            await in_redis.close()

    run(redis_server, test)


def test_a_commit_refused_by_the_owner_fence_leaves_no_object(redis_server: EmbeddedRedis, s3_url: str) -> None:
    async def test(raw: Any) -> None:
        store = JobStore.from_url(redis_server.url, 3600, chunks=ObjectStoreChunks(BUCKET, f"{PREFIX}/", s3_url))
        try:
            record, _ = await store.create(TEXT, SPEC)
            await store.take(record.job_id, "runner-a")
            assert await store.commit_sentence(record.job_id, 0, "runner-a", PCM[0], chars_done=10, samples=1)
            await store.take(record.job_id, "runner-b")  # a takeover: runner-a may write nothing more
            assert not await store.commit_sentence(record.job_id, 1, "runner-a", PCM[2], chars_done=20, samples=1)
            assert await store.commit_sentence(record.job_id, 1, "runner-b", PCM[1], chars_done=20, samples=1)
            assert sorted(objects_of(s3_url, record.job_id).values()) == sorted(PCM[:2])
            assert await store.audio(record.job_id, 0, 2) == PCM[:2]
        finally:
            await store.close()

    run(redis_server, test)


def test_a_tampered_object_or_a_reference_outside_the_job_is_refused(redis_server: EmbeddedRedis, s3_url: str) -> None:
    async def test(raw: Any) -> None:
        store = JobStore.from_url(redis_server.url, 3600, chunks=ObjectStoreChunks(BUCKET, f"{PREFIX}/", s3_url), keyring=KEYRING)
        try:
            job_id = await finished_job(store)
            name = (await raw.get(pcm_key(job_id, 1))).decode()
            value = bytearray(objects_of(s3_url, job_id)[name])
            value[-1] ^= 0x01
            s3_client(s3_url).put_object(Bucket=BUCKET, Key=name, Body=bytes(value))
            with pytest.raises(TamperedJobDataError, match=f"job {job_id}'s audio of sentence 1 does not open"):
                await file_of(store, job_id, tts_pb2.LINEAR_PCM)
            other_id = await finished_job(store)
            await raw.set(pcm_key(job_id, 1), await raw.get(pcm_key(other_id, 1)))  # another job's object
            with pytest.raises(TamperedJobDataError, match="is not one of its objects"):
                await store.audio(job_id, 0, 3)
        finally:
            await store.close()

    run(redis_server, test)


def test_a_missing_bucket_is_a_transient_error_that_names_no_bucket_to_the_client(
    redis_server: EmbeddedRedis, s3_url: str
) -> None:
    async def test(raw: Any) -> None:
        store = JobStore.from_url(redis_server.url, 3600, chunks=ObjectStoreChunks("no-such-bucket", "", s3_url))
        try:
            record, _ = await store.create(TEXT, SPEC)
            await store.take(record.job_id, "runner-a")
            with pytest.raises(Exception) as failed:
                await store.commit_sentence(record.job_id, 0, "runner-a", PCM[0], chars_done=10, samples=1)
            assert "NoSuchBucket" in str(failed.value)
            code, message = job_status_for(failed.value)
            assert code == grpc.StatusCode.UNAVAILABLE and "no-such-bucket" not in message
            assert (await store.get(record.job_id)).sentences_done == 0
        finally:
            await store.close()

    run(redis_server, test)


def wait_succeeded(stub: jobs_pb2_grpc.LongFormSynthesisStub, job_id: str) -> jobs_pb2.Job:
    deadline = time.monotonic() + JOB_TIMEOUT_S
    while True:
        job = stub.GetJob(jobs_pb2.GetJobRequest(id=job_id))
        if job.state == jobs_pb2.JOB_STATE_SUCCEEDED:
            return job
        assert job.state in (jobs_pb2.JOB_STATE_QUEUED, jobs_pb2.JOB_STATE_RUNNING), job
        assert time.monotonic() < deadline, f"job still {job} after {JOB_TIMEOUT_S} s"
        time.sleep(0.1)


def job_file(address: str, text: str) -> tuple[str, bytes]:
    """Create a job of `text` at the gateway `address`, wait for it, and fetch its PCM file."""
    with grpc.insecure_channel(address) as channel:
        stub = jobs_pb2_grpc.LongFormSynthesisStub(channel)
        job = stub.CreateJob(jobs_pb2.CreateJobRequest(text=text, encoding=tts_pb2.LINEAR_PCM))
        done = wait_succeeded(stub, job.id)
        assert done.sentences_done == 3
        return job.id, b"".join(chunk.audio for chunk in stub.GetJobAudio(jobs_pb2.GetJobAudioRequest(id=job.id)))


def test_a_real_job_through_the_bucket_gives_the_redis_file_and_delete_removes_its_objects(
    mesh: Mesh, s3_url: str, tmp_path: Path
) -> None:
    # The mesh's own gateway runs the reference job with its audio in Redis. The S3 gateway gets a
    # job Redis of its own: gateways that share a queue must share one audio store.
    with EmbeddedRedis(EmbeddedRedisConfig(port=free_port(), maxmemory_mb=64)) as jobs_redis:
        args = [
            "--jobs-redis-url", jobs_redis.url, "--job-runners", "1",
            "--job-audio-store", f"s3://{BUCKET}/{PREFIX}", "--job-s3-endpoint-url", s3_url,
        ]  # fmt: skip
        with extra_gateway(mesh, tmp_path / "s3-gateway.log", args, env=CREDENTIALS) as gateway:
            s3_id, from_s3 = job_file(gateway.address, JOB_TEXT)
            _, from_redis = job_file(mesh.gateway_address, JOB_TEXT)
            stored = objects_of(s3_url, s3_id)
            with grpc.insecure_channel(gateway.address) as channel:
                jobs_pb2_grpc.LongFormSynthesisStub(channel).DeleteJob(jobs_pb2.DeleteJobRequest(id=s3_id))
    assert len(from_s3) > 2 * SPEC.sample_rate_hz and np.array_equal(
        np.frombuffer(from_s3, "<i2"), np.frombuffer(from_redis, "<i2")
    )
    assert len(stored) == 3 and all(value[:4] == b"TSEA" for value in stored.values())  # the mesh seals its cache, so jobs too
    assert objects_of(s3_url, s3_id) == {}
