"""Admission sees the audio a listener will really need: once a sentence is planned its frames, not a
guess from its characters, count (toy workers, real gRPC, a real Redis and real text processes)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor

import pytest
from prometheus_client import CollectorRegistry

from libs.cache.mel_cache import MelCache
from libs.cache.settings import CacheSettings
from libs.devmesh.embedded_redis import EmbeddedRedis
from libs.pb.tts.v1 import tts_pb2
from libs.routing.endpoints import parse_endpoint
from libs.synthesis.admission import DEFAULT_AUDIO_S_PER_CHAR, RealtimeAdmission
from libs.synthesis.options import resolve_options
from libs.synthesis.synthesizer import Synthesizer
from libs.synthesis.text_side import TextSide
from libs.upstream.pool import WorkerPool
from libs.upstream.settings import UpstreamSettings
from libs.voice.registry import default_registry
from tests.support.faults.toy_mesh import ToyMesh, wait_until

_TEXT_THREAD = ThreadPoolExecutor(max_workers=1, thread_name_prefix="text")
# Numbers make several times the audio per character of ordinary prose: what a gateway that guessed by
# characters alone would get wrong.
TEXT = "On 12/11/2019, 1,234,567 people paid $8,901.23 each. Then 45,678 more came at 10:45 pm."


@pytest.fixture
async def synthesizer(redis_server: EmbeddedRedis) -> AsyncIterator[Synthesizer]:
    mesh = await ToyMesh().start(zones=("zone-a",), chunk_delay_s=0.01)
    cache = MelCache.from_settings(CacheSettings(redis_url=redis_server.url, ttl_s=60, timeout_ms=500))
    upstream = UpstreamSettings(
        acoustic=(parse_endpoint(mesh.of("acoustic", "zone-a").spec, "acoustic"),),
        vocoder=(parse_endpoint(mesh.of("vocoder", "zone-a").spec, "vocoder"),),
    )
    pool = WorkerPool(upstream, "zone-a", registry=CollectorRegistry())
    text_side = TextSide(_TEXT_THREAD, 5000)
    admission = RealtimeAdmission(lambda: 100.0, lambda: 0, headroom=1.0)
    pool.start()
    try:
        await wait_until(lambda: pool.ready)
        yield Synthesizer(pool=pool, cache=cache, text_side=text_side, max_streams=8, admission=admission)
    finally:
        await pool.close()
        await cache.close()
        await text_side.close()
        await mesh.stop()


async def test_a_listeners_expected_audio_follows_its_planned_sentences(synthesizer: Synthesizer) -> None:
    options = resolve_options(
        default_registry(), voice="", speed=0, encoding=tts_pb2.FLOAT_PCM, sample_rate_hz=0, speaker_id=0,
        request_id="planned-audio", include_alignment=False,
    )  # fmt: skip
    assert synthesizer.admission is not None
    spoken = await synthesizer.synthesize(TEXT, options, 30.0, client="10.0.0.7")
    (listener,) = synthesizer.admission.listening()
    guessed_s = listener.expected_audio_s
    assert guessed_s == pytest.approx(len(TEXT) * DEFAULT_AUDIO_S_PER_CHAR)
    seen: list[float] = []
    async for _chunk in spoken:
        seen.append(listener.expected_audio_s)
    assert listener.clock is not None
    made_s = listener.clock.delivered_s
    # The guess by characters was far off; once every sentence is planned the estimate is what was made.
    assert abs(guessed_s - made_s) > 0.25 * made_s, (guessed_s, made_s)
    assert listener.expected_audio_s == pytest.approx(made_s, abs=0.05)
    assert listener.remaining_s() == pytest.approx(0.0, abs=0.05)
    # Already after the first sentence's plan, the estimate was nearer the truth than the guess.
    assert abs(seen[0] - made_s) < abs(guessed_s - made_s), (seen[0], guessed_s, made_s)
