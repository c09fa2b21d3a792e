"""Long-form jobs under measurement: one job of `--chars` characters of new text (every sentence a
cache miss) on a mesh of one acoustic and one vocoder worker, alone and then next to `--live-streams`
clients that stream short texts without pause; the job's file compared sample for sample with
streaming the same text.

    python -m bench.jobs --chars 100000 --live-streams 8 --compare --out bench/jobs.md

Reports the job's wall time (create to succeeded), its audio seconds per second, the Redis memory the
job's audio takes per hour, and whether the job's PCM equals the streamed PCM; then the live streams'
first-audio p50/p95 over `--window-s` without a job and over `--window-s` with a second such job
running (its audio seconds per second measured from its progress; it is cancelled after the window).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import redis

from bench.mesh import BenchMesh
from bench.report import run_heading
from bench.texts import LONG, PARAGRAPH, unique_variants
from libs.devmesh.embedded_redis import EmbeddedRedis, EmbeddedRedisConfig
from libs.pb.tts.v1 import tts_pb2, tts_pb2_grpc
from tests.support.mesh import free_port

JOBS_REDIS_MB = 3072
STREAM_PIECE_CHARS = 2000


def job_text(chars: int, first_number: int) -> str:
    """At most `chars` characters of sentences no cache has seen, cut after a sentence."""
    parts: list[str] = []
    total = 0
    number = first_number
    while total < chars:
        variant = unique_variants(LONG, 1, number)[0]
        number += 9
        for sentence in variant.split(". "):
            sentence = sentence if sentence.endswith(".") else sentence + "."
            if total + len(sentence) + 1 > chars:
                return " ".join(parts)
            parts.append(sentence)
            total += len(sentence) + 1
    return " ".join(parts)


def http_json(url: str, method: str = "GET", body: Any = None) -> Any:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as reply:
        payload = reply.read()
        return json.loads(payload) if reply.headers.get("Content-Type", "").startswith("application/json") else payload


def run_job(mesh: BenchMesh, text: str) -> dict[str, Any]:
    """Create a PCM job, wait for it; wall time and the job as last seen."""
    started = time.monotonic()
    job = http_json(mesh.http_url + "/v1/audio/jobs", "POST", {"input": text, "response_format": "pcm", "sample_rate_hz": 22050})
    while job["status"] not in ("succeeded", "failed", "cancelled"):
        time.sleep(0.5)
        job = http_json(f"{mesh.http_url}/v1/audio/jobs/{job['id']}")
    wall_s = time.monotonic() - started
    if job["status"] != "succeeded":
        raise RuntimeError(f"job ended {job}")
    return {"job": job, "wall_s": wall_s, "audio_s": job["progress"]["audio_seconds"]}


class LiveStreams:
    """`count` clients, each streaming new paragraphs one after another, recording first audio."""

    def __init__(self, address: str, count: int, first_number: int) -> None:
        self._address = address
        self._count = count
        self._next = first_number
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.first_audio_s: list[tuple[float, float]] = []  # (when, first audio s)
        self.errors: list[str] = []
        self._threads = [threading.Thread(target=self._client, daemon=True) for _ in range(count)]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join()

    def _text(self) -> str:
        with self._lock:
            number, self._next = self._next, self._next + 3
        return unique_variants(PARAGRAPH, 1, number)[0]

    def _client(self) -> None:
        with grpc.insecure_channel(self._address) as channel:
            stub = tts_pb2_grpc.TextToSpeechStub(channel)
            while not self._stop.is_set():
                started = time.monotonic()
                first: float | None = None
                try:
                    for response in stub.Synthesize(tts_pb2.SynthesizeRequest(text=self._text()), timeout=120):
                        if response.audio and first is None:
                            first = time.monotonic() - started
                except grpc.RpcError as error:
                    self.errors.append(error.code().name)
                    time.sleep(0.2)
                    continue
                if first is not None:
                    self.first_audio_s.append((started, first))

    def window(self, start: float, end: float) -> list[float]:
        return [first for when, first in self.first_audio_s if start <= when < end]


def measure_with_live(mesh: BenchMesh, args: argparse.Namespace) -> dict[str, Any]:
    """Live streams' first audio over a window without the job, then over a window with it running
    (its audio seconds per second measured from its progress over that window); then it is cancelled."""
    live = LiveStreams(mesh.gateway_address, args.live_streams, first_number=400_000)
    live.start()
    time.sleep(5)  # every client has its first request behind it
    base_start = time.monotonic()
    time.sleep(args.window_s)
    base_end = time.monotonic()
    job = http_json(mesh.http_url + "/v1/audio/jobs", "POST", {"input": job_text(args.chars, 200_000), "response_format": "pcm", "sample_rate_hz": 22050})
    time.sleep(10)  # the job is under way
    url = f"{mesh.http_url}/v1/audio/jobs/{job['id']}"
    before, loaded_start = http_json(url)["progress"]["audio_seconds"], time.monotonic()
    time.sleep(args.window_s)
    after, loaded_end = http_json(url)["progress"]["audio_seconds"], time.monotonic()
    http_json(url + "/cancel", "POST")
    live.stop()
    baseline, during = live.window(base_start, base_end), live.window(loaded_start, loaded_end)
    rate = (after - before) / (loaded_end - loaded_start)
    return {
        "streams": args.live_streams, "window_s": args.window_s, "job_audio_s_per_s": rate,
        "first_audio_p50_ms_alone": 1000 * percentile(baseline, 50), "first_audio_p95_ms_alone": 1000 * percentile(baseline, 95),
        "first_audio_p50_ms_with_job": 1000 * percentile(during, 50), "first_audio_p95_ms_with_job": 1000 * percentile(during, 95),
        "requests_alone": len(baseline), "requests_with_job": len(during), "errors": len(live.errors),
    }  # fmt: skip


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else float("nan")


def sentence_pieces(text: str, limit: int) -> list[str]:
    """`text` in pieces of at most `limit` characters, each ending after a sentence (". ")."""
    pieces: list[str] = []
    start = 0
    while start < len(text):
        end = len(text) if len(text) - start <= limit else text.rindex(". ", start, start + limit) + 2
        pieces.append(text[start:end])
        start = end
    return pieces


def streamed_pcm(address: str, text: str) -> bytes:
    """The text through StreamingSynthesize, as 22,050 Hz PCM. Pieces end at sentence ends: a piece
    cut mid-sentence may be spoken before the rest of its sentence arrives (`--sentence-wait-s`),
    which is streaming's own choice and would not compare the job with anything."""

    def requests() -> Any:
        yield tts_pb2.StreamingSynthesizeRequest(config=tts_pb2.StreamingSynthesizeConfig(encoding=tts_pb2.LINEAR_PCM))
        for piece in sentence_pieces(text, STREAM_PIECE_CHARS):
            # A trailing space completes the last sentence at once; without it the last sentence waits
            # for the half-close, and a gateway more than --sentence-wait-s behind speaks it in two.
            yield tts_pb2.StreamingSynthesizeRequest(text=piece + " " if piece.endswith(".") else piece)

    with grpc.insecure_channel(address, options=[("grpc.max_receive_message_length", 64 << 20)]) as channel:
        stub = tts_pb2_grpc.TextToSpeechStub(channel)
        return b"".join(response.audio for response in stub.StreamingSynthesize(requests(), timeout=7200))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chars", type=int, default=100_000)
    parser.add_argument("--live-streams", type=int, default=0, help="also run the job next to this many live streams (0: alone only)")
    parser.add_argument("--window-s", type=float, default=90.0, help="live streams are measured this long without the job, then with it")
    parser.add_argument("--live-only", action="store_true", help="skip the job alone (and the comparison)")
    parser.add_argument("--compare", action="store_true", help="stream the same text and compare the PCM")
    parser.add_argument("--out", type=Path, default=None, help="write the results as markdown here")
    args = parser.parse_args(argv)

    results: dict[str, Any] = {"chars": args.chars}
    with tempfile.TemporaryDirectory() as logs, EmbeddedRedis(EmbeddedRedisConfig(port=free_port(), maxmemory_mb=JOBS_REDIS_MB)) as jobs_redis:
        env = {"TTS_JOBS_REDIS_URL": jobs_redis.url, "TTS_JOB_RUNNERS": "1"}
        mesh = BenchMesh(log_dir=Path(logs), env=env, secure=False).start()
        try:
            text = job_text(args.chars, first_number=100_000)
            if not args.live_only:
                alone = run_job(mesh, text)
                results["alone"] = {"wall_s": alone["wall_s"], "audio_s": alone["audio_s"], "audio_s_per_s": alone["audio_s"] / alone["wall_s"]}
                print(f"alone: {json.dumps(results['alone'])}", flush=True)
                client = redis.Redis.from_url(jobs_redis.url)
                used = client.info("memory")["used_memory"]
                results["jobs_redis_mb_per_audio_hour"] = used / 2**20 / (alone["audio_s"] / 3600)
            if args.compare and not args.live_only:
                job_pcm = http_json(f"{mesh.http_url}/v1/audio/jobs/{alone['job']['id']}/audio?format=pcm")
                streamed = streamed_pcm(mesh.gateway_address, text)
                job_samples, stream_samples = np.frombuffer(job_pcm, "<i2"), np.frombuffer(streamed, "<i2")
                results["compare"] = {
                    "job_samples": len(job_samples), "streamed_samples": len(stream_samples),
                    "identical": bool(len(job_samples) == len(stream_samples) and np.array_equal(job_samples, stream_samples)),
                }  # fmt: skip
                print(f"compare: {json.dumps(results['compare'])}", flush=True)
            if args.live_streams:
                results["with_live"] = measure_with_live(mesh, args)
                print(f"with_live: {json.dumps(results['with_live'])}", flush=True)
        finally:
            mesh.stop()
    print(json.dumps(results, indent=2))
    if args.out is not None:
        args.out.write_text(f"{run_heading('Long-form jobs', 'make bench-jobs')}\n\n{markdown(results)}", encoding="utf-8")
    return 0


def markdown(results: dict[str, Any]) -> str:
    lines = [f"| job of {results['chars']:,} characters | value |", "|---|---|"]
    if "alone" in results:
        alone = results["alone"]
        lines += [
            f"| wall time, alone | {alone['wall_s']:.0f} s |",
            f"| audio made | {alone['audio_s']:.0f} s ({alone['audio_s'] / 3600:.2f} h) |",
            f"| audio seconds per second, alone | {alone['audio_s_per_s']:.1f} |",
            f"| job Redis memory per hour of audio (22,050 Hz PCM) | {results['jobs_redis_mb_per_audio_hour']:.0f} MiB |",
        ]  # fmt: skip
    if "compare" in results:
        compare = results["compare"]
        lines.append(f"| job PCM vs StreamingSynthesize PCM | {'identical' if compare['identical'] else 'DIFFERENT'} ({compare['job_samples']:,} samples) |")
    if "with_live" in results:
        live = results["with_live"]
        lines += [
            f"| job audio seconds per second next to {live['streams']} live streams | {live['job_audio_s_per_s']:.2f} (over {live['window_s']:.0f} s) |",
            f"| live first audio p50 / p95, no job | {live['first_audio_p50_ms_alone']:.0f} / {live['first_audio_p95_ms_alone']:.0f} ms ({live['requests_alone']} requests) |",
            f"| live first audio p50 / p95, with the job | {live['first_audio_p50_ms_with_job']:.0f} / {live['first_audio_p95_ms_with_job']:.0f} ms ({live['requests_with_job']} requests) |",
        ]  # fmt: skip
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
