"""The gateway's routing and resume logic against real gRPC worker servers in this process.

The servicers, the gateway's pipeline, worker pool and resumable streams are the real ones; the
engines are small (tests/faults/toy_mesh.py), so every run checks resume exactness in seconds.
Faults come from a TCP proxy in front of each worker: `crash` resets every connection and refuses
new ones (like a killed process), `blackhole` holds bytes (a hung worker). The real voice in
separate processes is covered by tests/test_faults_mesh.py.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import grpc
import numpy as np
import pytest
import redis
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry

from libs.cache.codec import AudioHead, encode_head
from libs.cache.mel_cache import MelCache
from libs.cache.settings import CacheSettings
from libs.devmesh.embedded_redis import EmbeddedRedis
from libs.pb.tts.acoustic.v1 import acoustic_pb2
from libs.pb.tts.v1 import tts_pb2
from libs.routing.endpoints import parse_endpoint
from libs.routing.health import HealthConfig
from libs.routing.retry import RetryBudgetConfig, RetryConfig
from libs.synthesis.options import resolve_options
from libs.synthesis.output import AudioChunk
from libs.synthesis.synthesizer import Synthesizer
from libs.synthesis.text_side import TextSide
from libs.telemetry.tracing import ATTR_ATTEMPT, ATTR_REASON, ATTR_WORKER, ATTR_ZONE, SPAN_ATTEMPT, setup_tracing
from libs.text.frontend import Sentence
from libs.upstream.acoustic_stream import ResumableAcousticStream
from libs.upstream.calls import Deadline
from libs.upstream.pool import WorkerPool
from libs.upstream.settings import UpstreamSettings
from libs.upstream.vocoder_stream import ResumableVocoderStream
from libs.voice.registry import default_registry
from libs.wire.errors import DownstreamError
from libs.wire.headers import PUSHBACK_METADATA_KEY
from tests.support.faults.scripted_worker import ScriptedAcoustic, ScriptedVocoder
from tests.support.faults.toy_mesh import HOP_LENGTH, SAMPLE_RATE_HZ, ToyAcousticEngine, ToyMesh, wait_until

ATTEMPT_TIMEOUT_S = 1.0  # generous: the machine running the tests may be busy
# Two sentences of ~360 frames (~4 s of audio) each: long enough to break a stream in the middle.
SENTENCE_IDS = [[1] + [0, 20, 0, 59, 0, 24, 0, 27, 0, 3] * 6 + [0, 2], [1] + [0, 35, 0, 27, 0, 30, 0, 17, 0, 8] * 6 + [0, 2]]

OnPiece = Callable[[int, AudioChunk], Awaitable[None]]
_TEXT_THREAD = ThreadPoolExecutor(max_workers=1, thread_name_prefix="text")  # unused: the toy sentences come phonemised


async def _pool(
    acoustic: list[str], vocoder: list[str], tracer_provider: Any = None, *, retry_budget: RetryBudgetConfig = RetryBudgetConfig(),
    ejection: HealthConfig = HealthConfig(base_ejection_s=1.0),
) -> WorkerPool:  # fmt: skip
    upstream = UpstreamSettings(
        acoustic=tuple(parse_endpoint(spec, "acoustic") for spec in acoustic),
        vocoder=tuple(parse_endpoint(spec, "vocoder") for spec in vocoder),
        attempt_timeout_s=ATTEMPT_TIMEOUT_S,
    )
    pool = WorkerPool(
        upstream,
        "zone-a",
        retry=RetryConfig(base_backoff_s=0.01, max_backoff_s=0.05),
        retry_budget=retry_budget,
        ejection=ejection,
        registry=CollectorRegistry(),
        tracer_provider=tracer_provider,
    )
    pool.start()
    await wait_until(lambda: pool.ready)
    return pool


async def _sentences() -> AsyncIterator[Any]:
    for index, ids in enumerate(SENTENCE_IDS):
        yield Sentence(text=f"Sentence {index}.", phonemes=("x",), phoneme_ids=tuple(ids))


def _synthesizer(pool: WorkerPool, cache: MelCache | None = None, max_streams: int = 256) -> Synthesizer:
    cache = cache or MelCache(None, ttl_s=1, timeout_s=0.1)
    return Synthesizer(pool=pool, cache=cache, text_side=TextSide(_TEXT_THREAD, 5000), max_streams=max_streams)


async def _speak(
    pool: WorkerPool | Synthesizer, on_piece: OnPiece | None = None, timeout_s: float = 30.0, cache: MelCache | None = None
) -> np.ndarray:
    """The toy sentences spoken through the synthesis API (FLOAT_PCM), calling `on_piece` after each chunk."""
    synthesizer = pool if isinstance(pool, Synthesizer) else _synthesizer(pool, cache)
    options = resolve_options(
        default_registry(), voice="", speed=0, encoding=tts_pb2.FLOAT_PCM, sample_rate_hz=0, speaker_id=0,
        request_id="toy", include_alignment=False,
    )  # fmt: skip
    pieces: list[np.ndarray] = []
    async for chunk in synthesizer.speak(_sentences(), options, timeout_s):
        pieces.append(np.frombuffer(chunk.audio, dtype="<f4"))
        if on_piece is not None:
            await on_piece(len(pieces), chunk)
    return np.concatenate(pieces)


def _metric(pool: WorkerPool, name: str, **labels: str) -> float:
    value = pool.metrics.registry.get_sample_value(name, labels)
    return 0.0 if value is None else value


@pytest.fixture
async def mesh() -> AsyncIterator[ToyMesh]:
    running = await ToyMesh().start()
    try:
        yield running
    finally:
        await running.stop()


async def _zone_pool(mesh: ToyMesh, tracer_provider: Any = None, retry_budget: RetryBudgetConfig = RetryBudgetConfig()) -> WorkerPool:
    zones = ("zone-a", "zone-b")
    acoustic, vocoder = [mesh.of("acoustic", z).spec for z in zones], [mesh.of("vocoder", z).spec for z in zones]
    return await _pool(acoustic, vocoder, tracer_provider, retry_budget=retry_budget)


@pytest.mark.parametrize("kind", ["vocoder", "acoustic"])
async def test_worker_crash_mid_sentence_resumes_in_other_zone_sample_for_sample(mesh: ToyMesh, kind: str) -> None:
    spans = InMemorySpanExporter()
    provider = setup_tracing("gateway", zone="zone-a", environ={"OTEL_TRACES_SAMPLER": "always_on"}, exporter=spans, set_global=False)
    pool = await _zone_pool(mesh, provider)
    try:
        reference = await _speak(pool)
        local = mesh.of(kind, "zone-a")

        async def crash_after_first_audio(count: int, response: AudioChunk) -> None:
            if count == 1:
                assert not response.sentence_end, "the first sentence must still be running when the worker dies"
                await local.proxy.crash()

        faulted = await _speak(pool, crash_after_first_audio)
        assert faulted.shape == reference.shape
        assert np.array_equal(faulted, reference), f"max diff {np.abs(faulted - reference).max()}"
        assert _metric(pool, "tts_gateway_resumes_total", kind=kind, zone="zone-a", reason="unavailable") >= 1
        if kind == "vocoder":
            # The new stream was primed with context, not asked to vocode the first sentence again.
            resumed_samples = mesh.of("vocoder", "zone-b").metrics.registry.get_sample_value("tts_vocoder_samples_total")
            assert 0 < resumed_samples < len(reference)
        provider.force_flush()
        attempts = [dict(span.attributes or {}) for span in spans.get_finished_spans() if span.name == SPAN_ATTEMPT]
        assert {(a[ATTR_WORKER], a[ATTR_ZONE], a[ATTR_REASON]) for a in attempts} == {(kind, "zone-a", "resume:unavailable")}
        assert all(a[ATTR_ATTEMPT] == 2 for a in attempts)
    finally:
        await pool.close()
        provider.shutdown()


@pytest.mark.parametrize("kind", ["vocoder", "acoustic"])
async def test_a_heard_stream_resumes_once_after_its_worker_dies_with_the_retry_budget_spent(mesh: ToyMesh, kind: str) -> None:
    # A worker's death must not cost the streams it held once they outnumber the budget's tokens.
    pool = await _zone_pool(mesh, retry_budget=RetryBudgetConfig(retry_ratio=0.0, min_retries_per_s=0.0, max_tokens=1.0))
    try:
        reference = await _speak(pool)
        assert pool.budget.try_spend_retry() and pool.budget.tokens() < 1.0  # no retry could be paid for now
        local = mesh.of(kind, "zone-a")

        async def crash_after_first_audio(count: int, response: AudioChunk) -> None:
            if count == 1:
                await local.proxy.crash()

        faulted = await _speak(pool, crash_after_first_audio)
        assert np.array_equal(faulted, reference)
        assert _metric(pool, "tts_gateway_resumes_total", kind=kind, zone="zone-a", reason="unavailable") == 1
        assert _metric(pool, "tts_gateway_retries_denied_total", zone="zone-a", reason="budget") == 0
    finally:
        await pool.close()


async def test_only_a_first_sentence_on_an_idle_worker_gets_both_cores(mesh: ToyMesh) -> None:
    pool = await _zone_pool(mesh)
    try:
        worker = mesh.of("acoustic", "zone-a")
        engine = worker.servicer.shelf.any_engine()
        # A CPU quota under two cores (a small pod, a slow machine's test run) has no second core to give.
        two_cores = worker.scheduler.capacity.budget.cores >= 2
        await _speak(pool)
        assert engine.wide_plans == [two_cores, False]  # the second sentence has the first one's playback as slack
        engine.wide_plans.clear()
        engine.chunk_delay_s = 0.2  # keep the first request's sentence in progress while the second starts
        first = asyncio.create_task(_speak(pool))
        await wait_until(lambda: len(engine.wide_plans) == 1)
        await asyncio.gather(first, _speak(pool))
        # The second request's first sentence came while another was being computed: one core.
        assert engine.wide_plans[:2] == [two_cores, False] and len(engine.wide_plans) == 4
    finally:
        await pool.close()


async def test_blackholed_vocoder_fails_over_within_the_attempt_timeout(mesh: ToyMesh) -> None:
    pool = await _zone_pool(mesh)
    try:
        reference = await _speak(pool)
        started = time.monotonic()
        first_audio_s: list[float] = []

        async def blackhole_after_first_audio(count: int, response: AudioChunk) -> None:
            if count == 1:
                first_audio_s.append(time.monotonic() - started)
                await mesh.of("vocoder", "zone-a").proxy.blackhole()

        faulted = await _speak(pool, blackhole_after_first_audio, timeout_s=10.0)
        assert np.array_equal(faulted, reference)
        assert _metric(pool, "tts_gateway_resumes_total", kind="vocoder", zone="zone-a", reason="deadline_exceeded") >= 1
        # One attempt timeout of silence, then the rest of the audio from the other zone.
        assert time.monotonic() - started < 10.0
    finally:
        await pool.close()


async def test_blackholed_acoustic_before_the_request_is_abandoned_after_the_attempt_timeout(mesh: ToyMesh) -> None:
    pool = await _zone_pool(mesh)
    try:
        reference = await _speak(pool)
        await mesh.of("acoustic", "zone-a").proxy.blackhole()
        started = time.monotonic()
        first: list[float] = []

        async def note_first(count: int, response: AudioChunk) -> None:
            if count == 1:
                first.append(time.monotonic() - started)

        faulted = await _speak(pool, note_first)
        assert np.array_equal(faulted, reference)
        assert ATTEMPT_TIMEOUT_S <= first[0] < ATTEMPT_TIMEOUT_S + 2.0
        assert _metric(pool, "tts_gateway_retries_total", zone="zone-a", reason="deadline_exceeded") >= 1
    finally:
        await pool.close()


async def test_new_streams_stay_in_the_local_zone_and_spill_only_when_it_is_down(mesh: ToyMesh) -> None:
    pool = await _zone_pool(mesh)
    try:
        await _speak(pool)
        assert mesh.of("vocoder", "zone-a").streams() == 1 and mesh.of("vocoder", "zone-b").streams() == 0
        await mesh.of("vocoder", "zone-a").set_serving(False)
        await wait_until(lambda: not pool.table("vocoder").statuses()[0].available)
        await _speak(pool)
        assert mesh.of("vocoder", "zone-b").streams() == 1
        assert _metric(pool, "tts_gateway_spills_total", kind="vocoder", zone="zone-b", reason="local_unavailable") == 1
        await mesh.of("vocoder", "zone-a").set_serving(True)
        await wait_until(lambda: pool.table("vocoder").statuses()[0].available)
        await _speak(pool)
        assert mesh.of("vocoder", "zone-a").streams() == 2 and mesh.of("vocoder", "zone-b").streams() == 1
    finally:
        await pool.close()


def _scripted(code: grpc.StatusCode, trailers: tuple[tuple[str, str], ...] = ()) -> ScriptedAcoustic:
    engine = ToyAcousticEngine
    info = acoustic_pb2.ModelInfo(
        model_version=engine.model_version, voice=engine.voice_name, sample_rate_hz=SAMPLE_RATE_HZ,
        hop_length=HOP_LENGTH, n_mels=engine.n_mels, num_speakers=1,
    )  # fmt: skip
    worker = ScriptedAcoustic(info, code, trailers)
    worker.start()
    return worker


async def _every_worker_routable(pool: WorkerPool) -> None:
    """Until every worker may be picked (`ready` needs only one of each kind: under load another's
    health or model may come later, and a stream would then never try it: a scripted worker's refusal
    went untested when the stream went straight to the other zone)."""
    acoustic, vocoder = pool.table("acoustic"), pool.table("vocoder")
    await wait_until(
        lambda: all(pool.routable(status.endpoint) for status in acoustic.statuses())
        and all(vocoder.is_available(status.endpoint) for status in vocoder.statuses())
    )


async def test_overloaded_local_worker_is_skipped_for_another_without_client_error(mesh: ToyMesh) -> None:
    refusing = _scripted(grpc.StatusCode.RESOURCE_EXHAUSTED, ((PUSHBACK_METADATA_KEY, "20"),))
    pool = await _pool([f"zone-a={refusing.address}", mesh.of("acoustic", "zone-b").spec], [mesh.of("vocoder", "zone-a").spec])
    try:
        await _every_worker_routable(pool)
        audio = await _speak(pool)
        assert len(audio) == sum(len(ids) for ids in SENTENCE_IDS) * 6 * HOP_LENGTH
        # One refusal per sentence (each sentence starts with the local zone), both served by zone-b.
        assert refusing.streams >= 1
        assert _metric(pool, "tts_gateway_retries_total", zone="zone-a", reason="resource_exhausted") == refusing.streams
        assert pool.table("acoustic").statuses()[0].consecutive_failures == 0, "refusals must not count towards ejection"
    finally:
        await pool.close()
        refusing.stop()


async def test_every_worker_refusing_sheds_the_request_quickly(mesh: ToyMesh) -> None:
    refusing = [_scripted(grpc.StatusCode.RESOURCE_EXHAUSTED, ((PUSHBACK_METADATA_KEY, "20"),)) for _ in range(2)]
    pool = await _pool([f"zone-a={refusing[0].address}", f"zone-b={refusing[1].address}"], [mesh.of("vocoder", "zone-a").spec])
    try:
        await _every_worker_routable(pool)
        started = time.monotonic()
        with pytest.raises(DownstreamError) as raised:
            await _speak(pool)
        assert raised.value.code is grpc.StatusCode.RESOURCE_EXHAUSTED
        assert raised.value.retry_after_s == pytest.approx(0.020)  # the workers' pushback, the client's hint
        assert time.monotonic() - started < 1.0
        assert [servicer.streams for servicer in refusing] == [1, 1]
        assert _metric(pool, "tts_gateway_shed_total", reason="workers_saturated") == 1
    finally:
        await pool.close()
        for worker in refusing:
            worker.stop()


async def test_a_stream_whose_worker_dies_after_the_other_refused_it_is_shed_as_pushback(mesh: ToyMesh) -> None:
    """The local vocoder refuses the stream (full), zone-b's takes it and dies in the middle of a
    sentence: no worker is left that could resume it, because the only other one had no room. The
    client is told to back off (RESOURCE_EXHAUSTED), as when every worker refuses: the mesh is full,
    not broken (before, it heard UNAVAILABLE, "no other worker is available")."""
    refusing = ScriptedVocoder(grpc.StatusCode.RESOURCE_EXHAUSTED, ((PUSHBACK_METADATA_KEY, "20"),))
    refusing.start()
    serving = mesh.of("vocoder", "zone-b")
    pool = await _pool([mesh.of("acoustic", "zone-a").spec], [f"zone-a={refusing.address}", serving.spec])

    async def crash_after_first_audio(count: int, response: AudioChunk) -> None:
        if count == 1:
            assert not response.sentence_end, "the first sentence must still be running when the worker dies"
            await serving.proxy.crash()

    try:
        await _every_worker_routable(pool)
        with pytest.raises(DownstreamError) as raised:
            await _speak(pool, crash_after_first_audio)
        assert raised.value.code is grpc.StatusCode.RESOURCE_EXHAUSTED, str(raised.value)
        assert "overloaded (scripted RESOURCE_EXHAUSTED); its stream broke on another" in str(raised.value)
        assert refusing.streams == 1
        assert _metric(pool, "tts_gateway_shed_total", reason="workers_saturated") == 1
    finally:
        await pool.close()
        refusing.stop()


async def test_invalid_argument_from_a_worker_is_not_retried(mesh: ToyMesh) -> None:
    rejecting = _scripted(grpc.StatusCode.INVALID_ARGUMENT)
    pool = await _pool([f"zone-a={rejecting.address}", mesh.of("acoustic", "zone-b").spec], [mesh.of("vocoder", "zone-a").spec])
    try:
        await _every_worker_routable(pool)
        with pytest.raises(DownstreamError) as raised:
            await _speak(pool)
        assert raised.value.code is grpc.StatusCode.INVALID_ARGUMENT
        assert rejecting.streams == 1
        assert mesh.of("acoustic", "zone-b").streams() == 0
        assert _metric(pool, "tts_gateway_retries_total", zone="zone-a", reason="invalid_argument") == 0
    finally:
        await pool.close()
        rejecting.stop()


async def test_a_full_gateway_sheds_new_streams_at_once(mesh: ToyMesh) -> None:
    pool = await _zone_pool(mesh)
    synthesizer = _synthesizer(pool, max_streams=1)
    try:
        first_audio = asyncio.Event()

        async def hold(count: int, response: AudioChunk) -> None:
            first_audio.set()

        running = asyncio.create_task(_speak(synthesizer, hold))
        await first_audio.wait()
        started = time.monotonic()
        with pytest.raises(DownstreamError) as raised:
            await _speak(synthesizer)
        assert raised.value.code is grpc.StatusCode.RESOURCE_EXHAUSTED
        assert time.monotonic() - started < 0.1
        assert _metric(pool, "tts_gateway_shed_total", reason="gateway_full") == 1
        await running
    finally:
        await pool.close()


async def test_retries_stop_when_the_budget_is_spent(mesh: ToyMesh) -> None:
    failing = _scripted(grpc.StatusCode.UNAVAILABLE)
    # A tiny budget: one token, no floor; requests earn 0.1 each.
    pool = await _pool(
        [f"zone-a={failing.address}", mesh.of("acoustic", "zone-b").spec], [mesh.of("vocoder", "zone-a").spec],
        retry_budget=RetryBudgetConfig(max_tokens=1.0, min_retries_per_s=0.0), ejection=HealthConfig(consecutive_failures=1000),
    )  # fmt: skip
    try:
        await _every_worker_routable(pool)
        outcomes = []
        for _ in range(4):
            try:
                await _speak(pool)
                outcomes.append("ok")
            except DownstreamError as error:
                outcomes.append(error.code.name)
        retries = _metric(pool, "tts_gateway_retries_total", zone="zone-a", reason="unavailable")
        denied = _metric(pool, "tts_gateway_retries_denied_total", zone="zone-a", reason="budget")
        # 1 token at the start + 0.1 per request: 4 requests buy at most one retry (1.4 tokens).
        assert retries == 1
        assert denied >= 1 and "UNAVAILABLE" in outcomes
    finally:
        await pool.close()
        failing.stop()


async def test_cancelled_worker_streams_never_reopen(mesh: ToyMesh) -> None:
    # A failure seen after cancel() (the cancelled call ending) must not be retried on a fresh call:
    # asyncio.wait_for can swallow the task's own cancellation, and nobody would end that call.
    pool = await _zone_pool(mesh)
    try:
        vocoder = ResumableVocoderStream(pool, Deadline(5.0), HOP_LENGTH)
        await vocoder.ready()
        vocoder.cancel()
        with pytest.raises(asyncio.CancelledError):
            await vocoder.ready()
        acoustic = ResumableAcousticStream(pool, Deadline(5.0))
        acoustic.cancel()
        request = acoustic_pb2.SentenceRequest(phoneme_ids=SENTENCE_IDS[0], voice="en_US-joe-medium", speed=1.0)
        with pytest.raises(asyncio.CancelledError):
            async for _ in acoustic.sentence(request):
                pass
        for kind in ("vocoder", "acoustic"):
            assert sum(status.outstanding_streams for status in pool.table(kind).statuses()) == 0
    finally:
        await pool.close()



@dataclass
class _HeadCache:
    """A mel cache that keeps audio heads, on a real Redis, with every outcome it reported."""

    cache: MelCache
    outcomes: list[str]

    async def speak_and_store(self, pool: WorkerPool, on_piece: OnPiece | None = None) -> np.ndarray:
        """Speak the toy sentences, and wait until both sentences' heads are in Redis."""
        written = self.outcomes.count("head_written")
        audio = await _speak(pool, on_piece, cache=self.cache)
        await wait_until(lambda: self.outcomes.count("head_written") == written + len(SENTENCE_IDS))
        return audio


@pytest.fixture
async def head_cache(redis_server: EmbeddedRedis) -> AsyncIterator[_HeadCache]:
    outcomes: list[str] = []
    cache = MelCache.from_settings(CacheSettings(redis_url=redis_server.url, ttl_s=60, timeout_ms=500, audio_head_ms=200), on_outcome=outcomes.append)
    try:
        yield _HeadCache(cache, outcomes)
    finally:
        await cache.close()


async def test_cached_audio_heads_are_served_only_with_the_vocoder_model_that_made_them(
    mesh: ToyMesh, redis_server: EmbeddedRedis, head_cache: _HeadCache
) -> None:
    pool = await _zone_pool(mesh)
    try:
        fresh = await head_cache.speak_and_store(pool)
        hit = await _speak(pool, cache=head_cache.cache)
        assert head_cache.outcomes.count("head_hit") == 2
        np.testing.assert_array_equal(hit, fresh)  # the head and the vocoder's samples join without a seam
        # Heads another vocoder model made are ignored (this one would be loud) and replaced.
        client = redis.Redis.from_url(redis_server.url)
        foreign = encode_head(AudioHead("another-vocoder", SAMPLE_RATE_HZ, np.ones(4410, dtype=np.float32)))
        for key in client.keys("tts:head:*"):
            client.set(key, foreign)
        client.close()
        other = await head_cache.speak_and_store(pool)
        np.testing.assert_array_equal(other, fresh)
    finally:
        await pool.close()


async def test_vocoder_crash_right_after_a_cached_head_resumes_without_a_seam(mesh: ToyMesh, head_cache: _HeadCache) -> None:
    pool = await _zone_pool(mesh)
    try:
        reference = await head_cache.speak_and_store(pool)

        async def crash_on_the_head(count: int, response: AudioChunk) -> None:
            if count == 1:  # the cached head: the local vocoder has not answered yet
                assert response.audio_duration_s == pytest.approx(0.2, abs=1e-3)
                await mesh.of("vocoder", "zone-a").proxy.crash()

        faulted = await _speak(pool, crash_on_the_head, cache=head_cache.cache)
        assert head_cache.outcomes.count("head_hit") == 2
        # The resumed stream starts after the head: primed with context up to it, nothing repeated or lost.
        assert np.array_equal(faulted, reference), f"max diff {np.abs(faulted - reference).max()}"
        assert _metric(pool, "tts_gateway_resumes_total", kind="vocoder", zone="zone-a", reason="unavailable") >= 1
    finally:
        await pool.close()
