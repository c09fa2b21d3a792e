"""Long-form jobs on a Redis of their own (--jobs-redis-url), apart from the mel cache's.

The job Redis asks for a password, the same one as the cache's (one --redis-password-file serves
both URLs). A mesh's gateway takes the job and serves its file, a second gateway process runs it;
both reach the job Redis with the cache's connection options. The job's keys are then in the job
Redis and none in the cache's, which holds only mel cache entries.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest
import redis
from redis.asyncio import Redis as AsyncRedis

from libs.cache.mel_cache import redis_client
from libs.cache.settings import CacheSettings
from libs.devmesh.embedded_redis import EmbeddedRedis, EmbeddedRedisConfig
from libs.jobs.store import INDEX_KEY, QUEUE_KEY, job_key, pcm_key, text_key
from libs.pb.tts.v1 import jobs_pb2, jobs_pb2_grpc, tts_pb2
from libs.settings.files import SettingFileError
from services.gateway.background_work import job_redis_url
from services.settings import load_gateway_settings
from tests.support.client import synthesize
from tests.support.gateway_process import extra_gateway
from tests.support.mesh import NO_REALTIME_ADMISSION, Mesh
from tests.support.ports import free_port

TEXT = "The ferry left the harbour at noon. Gulls followed it out past the breakwater."
JOB_TIMEOUT_S = 300.0


@pytest.fixture(scope="module")
def jobs_redis(mesh: Mesh, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[EmbeddedRedis, Path]]:
    """A job Redis with the password of the session mesh's secrets (which the mesh below takes with its
    workers), and the folder for that mesh's logs."""
    assert mesh.secrets is not None
    log_dir = tmp_path_factory.mktemp("jobs-redis-mesh")
    with EmbeddedRedis(EmbeddedRedisConfig(port=free_port(), maxmemory_mb=64, password=mesh.secrets.redis_password)) as server:
        yield server, log_dir


@pytest.fixture(scope="module")
def mesh(mesh: Mesh, jobs_redis: tuple[EmbeddedRedis, Path]) -> Iterator[Mesh]:
    """A secured gateway on the session's workers and a cache Redis of its own, serving the job API on
    the job Redis and running no jobs itself."""
    server, log_dir = jobs_redis
    env = {"TTS_JOB_RUNNERS": "0", **NO_REALTIME_ADMISSION, "TTS_JOBS_REDIS_URL": plain_url(server)}
    running = Mesh(log_dir=log_dir, env=env, workers_of=mesh).start()
    try:
        yield running
    finally:
        running.stop()


def plain_url(server: EmbeddedRedis) -> str:
    """The server's URL without its password: the gateways read that from --redis-password-file."""
    return f"redis://127.0.0.1:{server.config.port}/0"


def job_keys(client: redis.Redis) -> set[str]:
    return {key.decode() for key in client.scan_iter(match="tts:job*")}


def test_a_job_runs_on_a_password_protected_job_redis_apart_from_the_cache(
    mesh: Mesh, jobs_redis: tuple[EmbeddedRedis, Path], tmp_path: Path
) -> None:
    server, _ = jobs_redis
    assert mesh.redis is not None and mesh.redis.config.port != server.config.port
    with pytest.raises(redis.AuthenticationError):  # the job Redis lets no one in without the password
        redis.Redis.from_url(plain_url(server)).set("probe", b"1")
    runner_args = ["--job-runners", "1", "--job-claim-idle-s", "2", "--jobs-redis-url", plain_url(server)]
    with extra_gateway(mesh, tmp_path / "runner.log", runner_args), grpc.insecure_channel(mesh.gateway_address) as channel:
        stub = jobs_pb2_grpc.LongFormSynthesisStub(channel)
        job = stub.CreateJob(jobs_pb2.CreateJobRequest(text=TEXT, encoding=tts_pb2.LINEAR_PCM))
        deadline = time.monotonic() + JOB_TIMEOUT_S
        while (done := stub.GetJob(jobs_pb2.GetJobRequest(id=job.id))).state != jobs_pb2.JOB_STATE_SUCCEEDED:
            assert done.state not in (jobs_pb2.JOB_STATE_FAILED, jobs_pb2.JOB_STATE_CANCELLED), done
            assert time.monotonic() < deadline, f"job still {done} after {JOB_TIMEOUT_S} s"
            time.sleep(0.1)
        audio = b"".join(chunk.audio for chunk in stub.GetJobAudio(jobs_pb2.GetJobAudioRequest(id=job.id)))
    streamed = synthesize(mesh.gateway_address, TEXT, encoding=tts_pb2.LINEAR_PCM)
    expected = np.frombuffer(b"".join(response.audio for response in streamed.responses), dtype="<i2")
    assert done.sentences_done == 2 and np.array_equal(np.frombuffer(audio, dtype="<i2"), expected)

    in_jobs_redis = job_keys(redis.Redis.from_url(server.url))
    assert {job_key(job.id), text_key(job.id), pcm_key(job.id, 0), pcm_key(job.id, 1), QUEUE_KEY, INDEX_KEY} <= in_jobs_redis
    cache = redis.Redis.from_url(mesh.redis.url)
    assert job_keys(cache) == set()
    assert any(key.startswith(b"tts:mel:") for key in cache.scan_iter(match="tts:*")), "the cache Redis was not used"


def test_the_job_redis_gets_the_caches_password_file_and_ca_but_never_a_cluster_client(tmp_path: Path) -> None:
    password_file = tmp_path / "password"
    password_file.write_text("s3cret\n", encoding="utf-8")
    cache = CacheSettings(redis_cluster=True, redis_ca_file=str(tmp_path / "ca.pem"), redis_password_file=str(password_file))
    client = redis_client("rediss://jobs@redis-jobs:6379/0", cache, 10.0, cluster=False)
    options = client.connection_pool.connection_kwargs
    assert isinstance(client, AsyncRedis)
    assert (options["username"], options["password"], options["ssl_ca_certs"]) == ("jobs", "s3cret", str(tmp_path / "ca.pem"))
    assert options["socket_timeout"] == 10.0
    with pytest.raises(SettingFileError, match="not both"):
        redis_client("redis://:inline@redis-jobs:6379/0", cache, 10.0, cluster=False)


def test_jobs_use_their_own_url_else_the_zones_cache_redis_and_are_off_on_a_cluster_cache() -> None:
    environ = {"TTS_ZONE": "zone-b", "REDIS_URL": "redis://redis-{zone}:6379/0"}
    own = load_gateway_settings([], {**environ, "TTS_JOBS_REDIS_URL": "redis://redis-jobs:6379/0"})
    assert job_redis_url(own) == "redis://redis-jobs:6379/0"
    assert job_redis_url(load_gateway_settings([], environ)) == "redis://redis-zone-b:6379/0"
    assert job_redis_url(load_gateway_settings([], {**environ, "TTS_REDIS_CLUSTER": "true"})) == ""
    assert job_redis_url(load_gateway_settings([], {**environ, "REDIS_URL": "none"})) == ""
