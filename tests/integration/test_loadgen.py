"""The load generator against a real grpc.aio server on loopback.

The server is a stand-in for the gateway with exactly known behaviour: the request text says how long
to wait before the first audio, how many chunks of how many bytes to send and how to end. That makes
every number the load generator reports checkable against what the server did.
"""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass

import grpc
import numpy as np
import pytest

from bench.loadgen import LoadConfig, audio_seconds, check_loopback, run_load
from bench.measure import RequestResult, percentile, summarize
from bench.report import Row, render_markdown
from bench.texts import LONG, PARAGRAPH, split_sentences, unique_variants
from libs.pb.tts.v1 import tts_pb2, tts_pb2_grpc
from tests.support.servers import aio_server

SAMPLE_RATE_HZ = 16_000
# Scheduling on a busy 2-core machine can add delay, never remove it: bounds are tight below, loose above.
SLACK_S = 0.15


@dataclass
class Plan:
    """What the stand-in server does for one request, parsed from its text "first_s=0.1 chunks=3 bytes=3200 ..."."""

    first_s: float = 0.0
    gap_s: float = 0.0
    chunks: int = 1
    chunk_bytes: int = 3200
    fail: str = ""
    no_rate: bool = False

    @classmethod
    def parse(cls, text: str) -> Plan:
        plan = cls()
        for item in text.split():
            key, value = item.split("=")
            kind = type(getattr(plan, key))
            setattr(plan, key, value == "1" if kind is bool else kind(value))
        return plan


class StandInTextToSpeech(tts_pb2_grpc.TextToSpeechServicer):
    """Synthesize that streams silence to a plan, and counts how many streams were open at once."""

    def __init__(self) -> None:
        self.open_streams = 0
        self.max_open_streams = 0

    async def Synthesize(self, request, context):
        plan = Plan.parse(request.text)
        self.open_streams += 1
        self.max_open_streams = max(self.max_open_streams, self.open_streams)
        try:
            # A sentence header without audio comes first: it must not count as first audio.
            yield tts_pb2.SynthesizeResponse(request_id=request.request_id, sample_rate_hz=SAMPLE_RATE_HZ)
            await asyncio.sleep(plan.first_s)
            encoding = request.encoding or tts_pb2.LINEAR_PCM
            for chunk in range(plan.chunks):
                if chunk:
                    await asyncio.sleep(plan.gap_s)
                yield tts_pb2.SynthesizeResponse(
                    audio=bytes(plan.chunk_bytes),
                    sample_rate_hz=0 if plan.no_rate else SAMPLE_RATE_HZ,
                    encoding=encoding,
                )
            if plan.fail:
                await context.abort(grpc.StatusCode[plan.fail], "planned failure")
        finally:
            self.open_streams -= 1


@pytest.fixture
async def stand_in():
    server = aio_server()
    servicer = StandInTextToSpeech()
    tts_pb2_grpc.add_TextToSpeechServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    yield f"127.0.0.1:{port}", servicer
    await server.stop(None)


async def test_first_audio_total_and_audio_seconds_match_what_the_server_sent(stand_in):
    target, _ = stand_in
    run = await run_load(
        LoadConfig(target=target, concurrency=1, requests=1), ["first_s=0.2 gap_s=0.1 chunks=3 chunk_bytes=3200"]
    )
    [result] = run.results
    assert result.status == "OK"
    assert 0.2 <= result.ttfa_s < 0.2 + SLACK_S
    assert 0.4 <= result.total_s < 0.4 + SLACK_S
    assert result.audio_bytes == 9600
    assert result.audio_s == pytest.approx(9600 / 2 / SAMPLE_RATE_HZ)  # 0.3 s of 16-bit audio
    assert run.summary.audio_s == pytest.approx(0.3)
    assert run.summary.throughput == pytest.approx(0.3 / run.summary.wall_s)
    assert run.summary.wall_s == pytest.approx(result.total_s, abs=1e-3)


async def test_float_encoding_counts_four_bytes_per_sample(stand_in):
    target, _ = stand_in
    config = LoadConfig(target=target, requests=1, encoding=tts_pb2.FLOAT_PCM)
    run = await run_load(config, ["chunks=2 chunk_bytes=6400"])
    assert run.results[0].audio_s == pytest.approx(12800 / 4 / SAMPLE_RATE_HZ)


async def test_concurrent_streams_overlap_up_to_the_concurrency(stand_in):
    target, servicer = stand_in
    run = await run_load(LoadConfig(target=target, concurrency=4, requests=8), ["first_s=0.2"])
    assert servicer.max_open_streams == 4
    assert [result.index for result in run.results] == list(range(8))
    # Two waves of four 0.2 s requests: about 0.4 s of wall time, not the 1.6 s of one stream.
    assert 0.4 <= run.summary.wall_s < 0.4 + 2 * SLACK_S
    assert run.summary.throughput == pytest.approx(8 * 0.1 / run.summary.wall_s)


async def test_failed_requests_count_as_errors_and_stay_out_of_latency_and_audio(stand_in):
    target, _ = stand_in
    texts = ["first_s=0.05", "first_s=0.05", "first_s=0.05 fail=UNAVAILABLE", "first_s=0.05 fail=RESOURCE_EXHAUSTED"]
    run = await run_load(LoadConfig(target=target, concurrency=2, requests=8), texts)
    summary = run.summary
    assert summary.requests == 8
    assert summary.errors == 4
    assert summary.error_rate == 0.5
    assert summary.status_counts == {"OK": 4, "UNAVAILABLE": 2, "RESOURCE_EXHAUSTED": 2}
    failed = [result for result in run.results if not result.ok]
    assert {result.error for result in failed} == {"planned failure"}
    # The failed streams did deliver audio before failing, but throughput counts only complete answers.
    assert all(result.audio_bytes == 3200 for result in failed)
    assert summary.audio_s == pytest.approx(4 * 0.1)


async def test_audio_without_sample_rate_is_reported_as_an_invalid_response(stand_in):
    target, _ = stand_in
    run = await run_load(LoadConfig(target=target, requests=1), ["no_rate=1"])
    assert run.results[0].status == "INVALID_RESPONSE"
    assert run.summary.error_rate == 1.0


async def test_deadline_exceeded_is_recorded_with_its_status_code(stand_in):
    target, _ = stand_in
    run = await run_load(LoadConfig(target=target, requests=1, request_timeout_s=0.1), ["first_s=1.0"])
    result = run.results[0]
    assert result.status == "DEADLINE_EXCEEDED"
    assert result.ttfa_s is None
    assert 0.1 <= result.total_s < 0.1 + SLACK_S


async def test_percentiles_follow_the_servers_first_audio_delays(stand_in):
    target, _ = stand_in
    delays_s = [0.02 * (i + 1) for i in range(10)]  # 20 ms .. 200 ms
    texts = [f"first_s={delay}" for delay in delays_s]
    run = await run_load(LoadConfig(target=target, concurrency=1, requests=10), texts)
    ttfa = [result.ttfa_s for result in run.results]
    for measured, delay in zip(ttfa, delays_s, strict=False):
        assert delay <= measured < delay + SLACK_S
    assert run.summary.ttfa_s.p50 == pytest.approx(percentile(ttfa, 50))
    assert run.summary.ttfa_s.p50 == pytest.approx(float(np.median(ttfa)))
    assert 0.11 <= run.summary.ttfa_s.p50 < 0.11 + SLACK_S  # median of the delays: (0.10 + 0.12) / 2
    assert run.summary.ttfa_s.p99 == pytest.approx(float(np.percentile(ttfa, 99)))
    assert run.summary.ttfa_s.p99 >= 0.198  # 0.18 + 0.91 * 0.02 at least


async def test_a_duration_bound_stops_starting_new_requests(stand_in):
    target, _ = stand_in
    started = time.perf_counter()
    run = await run_load(LoadConfig(target=target, concurrency=2, duration_s=0.3), ["first_s=0.2"])
    elapsed = time.perf_counter() - started
    # Waves start at 0 and ~0.2 s; the third would start at ~0.4 s, after the bound.
    assert 2 <= run.summary.requests <= 6
    assert elapsed < 0.3 + 0.2 + 2 * SLACK_S


def test_percentile_interpolates_like_numpy():
    values = [0.31, 0.12, 0.55, 0.07, 0.42, 0.19, 0.26]
    for q in (0, 10, 50, 90, 95, 99, 100):
        assert percentile(values, q) == pytest.approx(float(np.percentile(values, q)))
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert percentile([5.0], 95) == 5.0
    assert math.isnan(percentile([], 50))


def test_summary_of_recorded_results():
    results = [
        RequestResult(index=i, status="OK", ttfa_s=0.1 * (i + 1), total_s=1.0 + i, audio_s=2.0, audio_bytes=88200, text_chars=10, started_s=0.5 * i)
        for i in range(4)
    ] + [RequestResult(index=4, status="UNAVAILABLE", ttfa_s=None, total_s=0.01, audio_s=0.0, audio_bytes=0, text_chars=10)]
    summary = summarize(results, wall_s=4.0)
    assert summary.requests == 5 and summary.errors == 1
    assert summary.error_rate == pytest.approx(0.2)
    assert summary.throughput == pytest.approx(8.0 / 4.0)
    assert summary.real_time_factor == pytest.approx(0.5)
    assert summary.ttfa_s.p50 == pytest.approx(0.25)
    assert summary.total_s.p95 == pytest.approx(float(np.percentile([1.0, 2.0, 3.0, 4.0], 95)))


def test_audio_seconds_from_bytes():
    assert audio_seconds(44100, 22050, tts_pb2.LINEAR_PCM) == pytest.approx(1.0)
    assert audio_seconds(44100, 22050, tts_pb2.AUDIO_ENCODING_UNSPECIFIED) == pytest.approx(1.0)
    assert audio_seconds(88200, 22050, tts_pb2.FLOAT_PCM) == pytest.approx(1.0)
    with pytest.raises(ValueError):
        audio_seconds(100, 0, tts_pb2.LINEAR_PCM)


def test_only_loopback_targets_are_accepted():
    for target in ("127.0.0.1:50051", "localhost:1", "[::1]:50051", "127.0.0.2:9"):
        check_loopback(target)
    for target in ("10.0.0.1:50051", "example.com:443", "[2001:db8::1]:80", "127.0.0.1"):
        with pytest.raises(ValueError):
            check_loopback(target)
    with pytest.raises(ValueError, match="bounded"):
        LoadConfig(target="127.0.0.1:1")


def test_unique_variants_make_every_sentence_new_so_no_cache_key_repeats():
    variants = unique_variants(LONG, 70) + unique_variants(PARAGRAPH, 10, first_number=70 * 9)
    sentences = [sentence for text in variants for sentence in split_sentences(text)]
    assert len(sentences) == 70 * 9 + 10 * 3
    assert len(set(sentences)) == len(sentences)
    # Each variant keeps the original words of every sentence after its tag.
    assert split_sentences(variants[-1])[1].endswith("fields of frost slid past the window while most of the carriage slept.")


def test_table_ratio_is_mesh_over_piper_and_missing_values_say_n_a():
    rows = [
        Row("first audio p50, ms", "paragraph", "1", 150.0, 600.0),
        Row("throughput", "mixed", "8", None, 9.5, "mesh did not run"),
    ]
    assert rows[0].ratio == pytest.approx(0.25)
    assert rows[1].ratio is None
    table = render_markdown(rows, "Speed")
    assert "| first audio p50, ms | paragraph | 1 | 150 | 600 | 0.25x |  |" in table
    assert "| throughput | mixed | 8 | n/a | 9.50 | n/a | mesh did not run |" in table
