"""Long-form jobs on a real mesh: runners are real gateway processes on the mesh's workers and Redis,
the API is the mesh's own gateway (which runs no jobs itself here), over HTTP and gRPC.

The job's file is compared sample for sample with streaming the same text; a runner killed with
SIGKILL mid-job is replaced by another that takes the job over and resumes after the last sentence
done, and the file is still the streamed one; a cancel stops the runner's work.
"""

from __future__ import annotations

import json
import re
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest

from libs.jobs.audio import SENTENCES_PER_READ
from libs.pb.tts.v1 import jobs_pb2, jobs_pb2_grpc, tts_pb2
from tests.support.client import synthesize
from tests.support.gateway_process import extra_gateway
from tests.support.mesh import NO_REALTIME_ADMISSION, Mesh, ServiceProcess

SENTENCES = [
    "The lighthouse keeper climbed the stairs every evening at dusk.",
    "He trimmed the wick and polished the great lens until it shone.",
    "Ships passed far out at sea, their lights small and steady.",
    "In winter the storms came from the north without warning.",
    "The keeper wrote each one down in a heavy leather book.",
    "Nobody read the book, but he kept writing all the same.",
    "One spring a letter arrived asking for his records.",
    "He sent the book away and started a new one that night.",
    "The new book filled more slowly than the old one had.",
    "Years later the light was automated and the keeper retired.",
]
TEXT = " ".join(SENTENCES)
ANIMALS = ("badger", "heron", "otter", "falcon", "beetle", "walrus", "gecko", "magpie", "puffin", "lemur", "newt", "raven")
COLOURS = ("amber", "silver", "olive", "scarlet", "golden", "ivory", "violet", "copper", "indigo", "coral", "russet", "teal")
MANY_SENTENCES = [f"The {colour} {animal} waits." for colour in COLOURS for animal in ANIMALS][: SENTENCES_PER_READ + 6]
"""More sentences than one of the reads that assemble a job's file holds: a full read, then a short one."""
KILLED_SENTENCES = [f"A {colour} {animal} sleeps by the river tonight." for animal in ANIMALS for colour in COLOURS[:3]]
"""Sentences no other test speaks, enough that a runner killed after two has most of them left (36,
over a minute of audio)."""
CLAIM_IDLE_S = 2.0
RUNNER_ARGS = ["--job-runners", "1", "--job-claim-idle-s", str(CLAIM_IDLE_S)]
JOB_TIMEOUT_S = 300.0
STREAM_TIMEOUT_S = 600.0
"""A stream of one of these texts is minutes of audio: at a quarter of a fast machine's speed, shared
with another test process, it takes minutes to make."""

# Each test speaks minutes of audio, some twice (as a job, then streamed): hang guards with room for a slow machine.
pytestmark = pytest.mark.timeout(1200)


@pytest.fixture(scope="module")
def job_mesh(mesh: Mesh, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mesh]:
    """A gateway on the session's workers and a Redis of its own, serving the job API but running no
    jobs: runners are started by each test (the session's gateway, on another Redis, sees none)."""
    # Admission by measured real-time capacity is not under test, and on a shared machine it refuses at random.
    env = {"TTS_JOB_RUNNERS": "0", **NO_REALTIME_ADMISSION}
    running = Mesh(log_dir=tmp_path_factory.mktemp("jobs-mesh"), env=env, workers_of=mesh).start()
    try:
        yield running
    finally:
        running.stop()


@contextmanager
def runner(mesh: Mesh, log_path: Path) -> Iterator[ServiceProcess]:
    with extra_gateway(mesh, log_path, RUNNER_ARGS) as process:
        yield process


def http(mesh: Mesh, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None) -> tuple[int, Any]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(mesh.http_url + path, data=data, method=method, headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=60) as reply:
            payload = reply.read()
            kind = reply.headers.get("Content-Type", "")
            return reply.status, json.loads(payload) if kind.startswith("application/json") else payload
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def wait_for(mesh: Mesh, job_id: str, done: Any, timeout_s: float = JOB_TIMEOUT_S) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        status, job = http(mesh, "GET", f"/v1/audio/jobs/{job_id}")
        assert status == 200, job
        if done(job):
            return job
        assert job["status"] not in ("failed", "cancelled"), job
        assert time.monotonic() < deadline, f"job still {job} after {timeout_s} s"
        time.sleep(0.1)


def pcm(data: bytes) -> np.ndarray:
    return np.frombuffer(data, dtype="<i2")


def streamed_pcm(mesh: Mesh, text: str = TEXT, **fields: Any) -> np.ndarray:
    spoken = synthesize(mesh.gateway_address, text, timeout_s=STREAM_TIMEOUT_S, encoding=tts_pb2.LINEAR_PCM, **fields)
    return pcm(b"".join(response.audio for response in spoken.responses))


def test_job_file_equals_streaming_the_same_text_sample_for_sample(job_mesh: Mesh, tmp_path: Path) -> None:
    text = " ".join(MANY_SENTENCES)
    with runner(job_mesh, tmp_path / "runner.log"):
        status, job = http(job_mesh, "POST", "/v1/audio/jobs", {"model": "tts-1", "input": text, "voice": "alloy", "response_format": "pcm"})
        assert status == 202, job
        assert job["status"] == "queued" and job["sample_rate_hz"] == 24000
        finished = wait_for(job_mesh, job["id"], lambda j: j["status"] == "succeeded")
        status, audio = http(job_mesh, "GET", f"/v1/audio/jobs/{job['id']}/audio")
        status_mp3, mp3 = http(job_mesh, "GET", f"/v1/audio/jobs/{job['id']}/audio?format=mp3")
    assert status == 200 and status_mp3 == 200
    spoken = synthesize(job_mesh.gateway_address, text, timeout_s=STREAM_TIMEOUT_S, encoding=tts_pb2.LINEAR_PCM, sample_rate_hz=24000)
    streamed = pcm(b"".join(response.audio for response in spoken.responses))
    assert len(pcm(audio)) == len(streamed) and np.array_equal(pcm(audio), streamed)
    assert finished["progress"]["audio_seconds"] == pytest.approx(len(streamed) / 24000, abs=1e-3)
    assert finished["progress"]["characters_done"] == len(text)
    assert finished["progress"]["sentences_done"] == len(MANY_SENTENCES)
    assert mp3[:2] in (b"\xff\xfb", b"\xff\xf3", b"\xff\xf2") and len(mp3) > 1000  # MPEG audio frames
    # Its captions are those of streaming the same text: each sentence's cue and each word's time, to the millisecond.
    status_vtt, vtt = http(job_mesh, "GET", f"/v1/audio/jobs/{job['id']}/captions")
    status_srt, srt = http(job_mesh, "GET", f"/v1/audio/jobs/{job['id']}/captions?format=srt")
    assert status_vtt == 200 and status_srt == 200
    sentences = [response.sentence for response in spoken.responses if response.HasField("sentence")]
    expected = [[s.audio_offset_s, s.audio_offset_s + s.audio_duration_s, *(w.start_s for w in s.words)] for s in sentences]
    cues = _vtt_times(vtt.decode())
    assert [len(cue) for cue in cues] == [len(cue) for cue in expected]
    assert [t for cue in cues for t in cue] == pytest.approx([t for cue in expected for t in cue], abs=1.5e-3)
    assert srt.decode().count(" --> ") == len(sentences) and sentences[-1].text in srt.decode()


def _vtt_times(vtt: str) -> list[list[float]]:
    """Each cue's start, end and word times (seconds) of a WebVTT file."""
    def seconds(stamp: str) -> float:
        hours, minutes, rest = stamp.split(":")
        return int(hours) * 3600 + int(minutes) * 60 + float(rest)

    lines = vtt.splitlines()
    cues = []
    for index, line in enumerate(lines):
        if " --> " in line:
            start, end = line.split(" --> ")
            words = [seconds(stamp) for stamp in re.findall(r"<([0-9:.]+)>", lines[index + 1])]
            cues.append([seconds(start), seconds(end), *words])
    return cues


def test_runner_killed_mid_job_is_replaced_and_the_file_is_unchanged(job_mesh: Mesh, tmp_path: Path) -> None:
    # Not in the cache yet, and long enough that the kill lands mid-job on any machine (a lone
    # runner here speaks a short sentence in well under the poll's interval).
    text = " ".join(KILLED_SENTENCES)
    with grpc.insecure_channel(job_mesh.gateway_address) as channel:
        stub = jobs_pb2_grpc.LongFormSynthesisStub(channel)
        job = stub.CreateJob(jobs_pb2.CreateJobRequest(text=text, encoding=tts_pb2.LINEAR_PCM))
        with runner(job_mesh, tmp_path / "first.log") as first:
            wait_for(job_mesh, job.id, lambda j: j["progress"]["sentences_done"] >= 2)
            first.process.kill()  # SIGKILL: no shutdown, the job stays claimed by a dead consumer
            first.process.wait()
        at_kill = stub.GetJob(jobs_pb2.GetJobRequest(id=job.id))
        assert at_kill.state == jobs_pb2.JOB_STATE_RUNNING and 2 <= at_kill.sentences_done < len(KILLED_SENTENCES)
        with runner(job_mesh, tmp_path / "second.log") as second:
            wait_for(job_mesh, job.id, lambda j: j["status"] == "succeeded")
            metrics = second_metrics(job_mesh, second)
        done = stub.GetJob(jobs_pb2.GetJobRequest(id=job.id))
        audio = b"".join(chunk.audio for chunk in stub.GetJobAudio(jobs_pb2.GetJobAudioRequest(id=job.id)))
    assert done.attempts == 2
    assert metrics["tts_jobs_resumed_total"] == 1
    # The second runner spoke only what the first had not: resumed at the first unfinished sentence.
    assert metrics["tts_jobs_audio_seconds_total"] == pytest.approx(done.audio_s - at_kill.audio_s, abs=1e-6)
    assert np.array_equal(pcm(audio), streamed_pcm(job_mesh, text))


def second_metrics(mesh: Mesh, process: ServiceProcess) -> dict[str, float]:
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://127.0.0.1:{process.metrics_port}/metrics", timeout=5) as reply:
        text = reply.read().decode()
    return {sample.name: sample.value for family in text_string_to_metric_families(text) for sample in family.samples if not sample.labels}


def test_cancel_stops_the_runner_and_frees_it_for_the_next_job(job_mesh: Mesh, tmp_path: Path) -> None:
    long_text = " ".join([TEXT] * 4)
    with runner(job_mesh, tmp_path / "runner.log") as process:
        _, job = http(job_mesh, "POST", "/v1/audio/jobs", {"input": long_text, "response_format": "wav"})
        wait_for(job_mesh, job["id"], lambda j: j["progress"]["sentences_done"] >= 1)
        status, cancelled = http(job_mesh, "POST", f"/v1/audio/jobs/{job['id']}/cancel")
        cancelled_at = time.monotonic()
        assert status == 200 and cancelled["status"] == "cancelled"
        while finished_cancelled(process) < 1:
            assert time.monotonic() - cancelled_at < 2.0, "the runner still works on a cancelled job"
            time.sleep(0.02)
        stopped_after = http(job_mesh, "GET", f"/v1/audio/jobs/{job['id']}")[1]["progress"]["sentences_done"]
        _, follow = http(job_mesh, "POST", "/v1/audio/jobs", {"input": SENTENCES[0], "response_format": "flac"})
        wait_for(job_mesh, follow["id"], lambda j: j["status"] == "succeeded", timeout_s=60)
        status, audio = http(job_mesh, "GET", f"/v1/audio/jobs/{job['id']}/audio")
    assert stopped_after < len(SENTENCES) * 4
    assert status == 409 and "cancelled" in audio["error"]["message"]
    deleted = http(job_mesh, "DELETE", f"/v1/audio/jobs/{job['id']}")
    assert deleted == (200, {"id": job["id"], "object": "audio.job", "deleted": True})
    assert http(job_mesh, "GET", f"/v1/audio/jobs/{job['id']}")[0] == 404


def finished_cancelled(process: ServiceProcess) -> float:
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://127.0.0.1:{process.metrics_port}/metrics", timeout=5) as reply:
        text = reply.read().decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "tts_jobs_finished_total" and sample.labels.get("outcome") == "cancelled":
                return sample.value
    return 0.0


SSML_DOCUMENT = (
    '<speak><p>The keeper lit the lamp at dusk.</p><break time="700ms"/>'
    '<p>Ships passed <prosody rate="slow">far out at sea</prosody>, on the <say-as interpret-as="ordinal">3</say-as> night.</p></speak>'
)


def test_an_ssml_job_is_spoken_as_ssml_as_a_stream_speaks_it(job_mesh: Mesh, tmp_path: Path) -> None:
    with runner(job_mesh, tmp_path / "runner.log"):
        status, job = http(job_mesh, "POST", "/v1/audio/jobs", {"input": SSML_DOCUMENT, "response_format": "pcm"})
        assert status == 202, job
        finished = wait_for(job_mesh, job["id"], lambda j: j["status"] == "succeeded")
        status, audio = http(job_mesh, "GET", f"/v1/audio/jobs/{job['id']}/audio")
    assert status == 200
    rate = finished["sample_rate_hz"]
    streamed = streamed_pcm(job_mesh, SSML_DOCUMENT, sample_rate_hz=rate)
    assert np.array_equal(pcm(audio), streamed)  # the markup is not read aloud: the stream reads it as SSML
    assert finished["progress"]["characters_done"] == len(SSML_DOCUMENT)
    assert len(streamed) / rate < 8.0  # two short sentences and 0.7 s of silence, not the markup spelled out
    silent = np.flatnonzero(np.abs(pcm(audio)) > 64)
    gaps = np.diff(silent) / rate
    assert gaps.max() >= 0.7  # the break is in the file


@pytest.mark.parametrize(
    ("document", "named"),
    [
        ("<speak>Hi <audio src='x.wav'/> there.</speak>", "<audio>"),
        ("<speak>" + "<s>" * 40 + "Deep." + "</s>" * 40 + "</speak>", "nest"),
        ("<speak>unclosed", "well-formed"),
    ],
)
def test_ssml_a_job_cannot_speak_is_refused_at_create_naming_it(job_mesh: Mesh, document: str, named: str) -> None:
    status, refused = http(job_mesh, "POST", "/v1/audio/jobs", {"input": document})
    assert status == 400 and named in refused["error"]["message"], refused
    with grpc.insecure_channel(job_mesh.gateway_address) as channel, pytest.raises(grpc.RpcError) as caught:
        jobs_pb2_grpc.LongFormSynthesisStub(channel).CreateJob(jobs_pb2.CreateJobRequest(text=document))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT and named in caught.value.details()


def test_create_is_idempotent_and_checked(job_mesh: Mesh) -> None:
    body = {"input": "A short note.", "response_format": "mp3"}
    first = http(job_mesh, "POST", "/v1/audio/jobs", body, {"Idempotency-Key": "retry-me"})
    again = http(job_mesh, "POST", "/v1/audio/jobs", body, {"Idempotency-Key": "retry-me"})
    other = http(job_mesh, "POST", "/v1/audio/jobs", {**body, "input": "Another note."}, {"Idempotency-Key": "retry-me"})
    too_long = http(job_mesh, "POST", "/v1/audio/jobs", {"input": "a" * 1_000_001})
    assert first[0] == again[0] == 202 and first[1]["id"] == again[1]["id"]
    assert other[0] == 409 and first[1]["id"] in other[1]["error"]["message"]
    assert too_long[0] == 400 and "1000000" in too_long[1]["error"]["message"]
    with grpc.insecure_channel(job_mesh.gateway_address) as channel:
        stub = jobs_pb2_grpc.LongFormSynthesisStub(channel)
        with pytest.raises(grpc.RpcError) as missing:
            stub.GetJob(jobs_pb2.GetJobRequest(id="no-such-job"))
        listed = stub.ListJobs(jobs_pb2.ListJobsRequest(page_size=1000))
        retried = stub.CreateJob(jobs_pb2.CreateJobRequest(text="A short note.", encoding=tts_pb2.MP3, idempotency_key="retry-me"))
        page = stub.ListJobs(jobs_pb2.ListJobsRequest(page_size=1))
        cancelled = stub.CancelJob(jobs_pb2.CancelJobRequest(id=retried.id))
        stub.DeleteJob(jobs_pb2.DeleteJobRequest(id=retried.id))
        with pytest.raises(grpc.RpcError) as deleted:
            stub.GetJob(jobs_pb2.GetJobRequest(id=retried.id))
        queued = stub.CreateJob(jobs_pb2.CreateJobRequest(text="Nobody runs this one."))  # no runner in this test
        with pytest.raises(grpc.RpcError) as unfinished:
            list(stub.GetJobAudio(jobs_pb2.GetJobAudioRequest(id=queued.id)))
        stub.DeleteJob(jobs_pb2.DeleteJobRequest(id=queued.id))
    assert missing.value.code() == grpc.StatusCode.NOT_FOUND
    assert first[1]["id"] in [job.id for job in listed.jobs]
    assert retried.id == first[1]["id"]
    assert len(page.jobs) == 1 and page.next_page_token == "1"
    assert cancelled.state == jobs_pb2.JOB_STATE_CANCELLED
    assert deleted.value.code() == grpc.StatusCode.NOT_FOUND
    assert unfinished.value.code() == grpc.StatusCode.FAILED_PRECONDITION
