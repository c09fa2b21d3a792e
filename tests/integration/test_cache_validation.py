"""A cached sentence is checked against the models about to read it: a well-formed entry that is not
this sentence's mel for this model (bands, frames, alignment, values), or a head this vocoder could
not have made (rate, length), is deleted and synthesised again, and the client hears exactly what a
fresh synthesis gives. Real Redis, the real pipeline and servicers, small engines (tests/faults)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest
from prometheus_client import CollectorRegistry

from libs.cache.codec import AudioHead
from libs.cache.keys import cache_key
from libs.cache.mel_cache import MelCache
from libs.cache.settings import CacheSettings
from libs.devmesh.embedded_redis import EmbeddedRedis
from libs.pb.tts.v1 import tts_pb2
from libs.routing.endpoints import parse_endpoint
from libs.synthesis.cache_checks import head_problem, mel_problem
from libs.synthesis.options import resolve_options
from libs.synthesis.synthesizer import Synthesizer
from libs.synthesis.text_side import TextSide
from libs.text.frontend import Sentence
from libs.upstream.pool import WorkerPool
from libs.upstream.settings import UpstreamSettings
from libs.voice.inputs import SynthesisInputs, SynthesisParams
from libs.voice.registry import default_registry
from tests.support.faults.toy_mesh import FRAMES_PER_PHONEME, HOP_LENGTH, N_MELS, SAMPLE_RATE_HZ, ToyMesh, wait_until

SENTENCE_IDS = [[1] + [0, 20, 0, 59, 0, 24] * 5 + [0, 2], [1] + [0, 35, 0, 27, 0, 30] * 5 + [0, 2]]
HEAD_MS = 200.0
_TEXT_THREAD = ThreadPoolExecutor(max_workers=1, thread_name_prefix="text")


async def _sentences() -> AsyncIterator[Any]:
    for index, ids in enumerate(SENTENCE_IDS):
        yield Sentence(text=f"Sentence {index}.", phonemes=("x",), phoneme_ids=tuple(ids))


class _Gateway:
    """The gateway's synthesis API over the toy workers and a real Redis, with the cache's outcomes."""

    def __init__(self, mesh: ToyMesh, redis: EmbeddedRedis) -> None:
        self.outcomes: list[str] = []
        settings = CacheSettings(redis_url=redis.url, ttl_s=60, timeout_ms=500, audio_head_ms=HEAD_MS)
        self.cache = MelCache.from_settings(settings, on_outcome=self.outcomes.append)
        upstream = UpstreamSettings(
            acoustic=(parse_endpoint(mesh.of("acoustic", "zone-a").spec, "acoustic"),),
            vocoder=(parse_endpoint(mesh.of("vocoder", "zone-a").spec, "vocoder"),),
        )
        self.pool = WorkerPool(upstream, "zone-a", registry=CollectorRegistry())
        self.synthesizer = Synthesizer(pool=self.pool, cache=self.cache, text_side=TextSide(_TEXT_THREAD, 5000), max_streams=8)
        self.plans = mesh.of("acoustic", "zone-a").servicer.shelf.any_engine().wide_plans
        """One entry per sentence the acoustic worker planned."""

    async def speak(self) -> np.ndarray:
        options = resolve_options(
            default_registry(), voice="", speed=0, encoding=tts_pb2.FLOAT_PCM, sample_rate_hz=0, speaker_id=0,
            request_id="cache-checks", include_alignment=False,
        )  # fmt: skip
        pieces = [np.frombuffer(chunk.audio, dtype="<f4") async for chunk in self.synthesizer.speak(_sentences(), options, 30.0)]
        return np.concatenate(pieces)

    async def speak_and_store(self, mels: int, heads: int) -> np.ndarray:
        """Speak, then wait until `mels` mels and `heads` heads are written to Redis."""
        wanted = (self.outcomes.count("written") + mels, self.outcomes.count("head_written") + heads)
        audio = await self.speak()
        await wait_until(lambda: (self.outcomes.count("written"), self.outcomes.count("head_written")) == wanted)
        return audio

    def key(self, index: int) -> str:
        info = self.pool.model_info()
        voice = default_registry().default
        params = SynthesisParams(0, 1.0, voice.noise_scale, voice.noise_w)
        return cache_key(SynthesisInputs(info.model_version, voice.name, tuple(SENTENCE_IDS[index]), params))


@pytest.fixture
async def gateway(redis_server: EmbeddedRedis) -> AsyncIterator[_Gateway]:
    mesh = await ToyMesh().start(zones=("zone-a",), chunk_delay_s=0.0)
    try:
        gateway = _Gateway(mesh, redis_server)
        gateway.pool.start()
        try:
            await wait_until(lambda: gateway.pool.ready)
            yield gateway
        finally:
            await gateway.pool.close()
            await gateway.cache.close()
    finally:
        await mesh.stop()


def _frames(index: int) -> int:
    return FRAMES_PER_PHONEME * len(SENTENCE_IDS[index])


def _alignment(index: int) -> list[int]:
    return [FRAMES_PER_PHONEME] * len(SENTENCE_IDS[index])


BAD_MELS = {
    "bands": (np.full((N_MELS // 2, _frames(0)), -5.0, np.float32), _alignment(0)),
    "frames-past-the-alignment": (np.full((N_MELS, _frames(0) + 7), -5.0, np.float32), _alignment(0)),
    "alignment-of-another-sentence": (np.full((N_MELS, _frames(0)), -5.0, np.float32), [_frames(0)]),
    "not-a-log-mel": (np.full((N_MELS, _frames(0)), 900.0, np.float32), _alignment(0)),
}


@pytest.mark.parametrize("mel, alignment", BAD_MELS.values(), ids=BAD_MELS.keys())
async def test_a_mel_entry_the_model_cannot_use_is_deleted_and_synthesised_again(
    gateway: _Gateway, mel: np.ndarray, alignment: list[int]
) -> None:
    fresh = await gateway.speak_and_store(mels=2, heads=2)
    assert await gateway.cache.put(gateway.key(0), mel, alignment)
    planned = len(gateway.plans)
    again = await gateway.speak_and_store(mels=1, heads=1)  # sentence 0's entry, mel and head, made anew
    np.testing.assert_array_equal(again, fresh)
    assert "deleted" in gateway.outcomes
    assert len(gateway.plans) == planned + 1, "sentence 0 was not synthesised again (or sentence 1 was too)"
    stored = await gateway.cache.get(gateway.key(0))
    assert stored is not None and mel_problem(stored, n_mels=N_MELS, phoneme_count=len(SENTENCE_IDS[0])) is None


BAD_HEADS = {
    "another-rate": AudioHead("", 16000, np.zeros(3200, np.float32)),
    "longer-than-a-head": AudioHead("", SAMPLE_RATE_HZ, np.zeros(SAMPLE_RATE_HZ, np.float32)),
    "not-audio": AudioHead("", SAMPLE_RATE_HZ, np.full(4410, 80.0, np.float32)),
}


@pytest.mark.parametrize("head", BAD_HEADS.values(), ids=BAD_HEADS.keys())
async def test_a_head_this_vocoder_could_not_have_made_is_deleted_and_made_again(gateway: _Gateway, head: AudioHead) -> None:
    fresh = await gateway.speak_and_store(mels=2, heads=2)
    model_version = (await gateway.cache.get(gateway.key(0))).head.model_version  # type: ignore[union-attr]
    forged = AudioHead(model_version, head.sample_rate_hz, head.samples)
    assert await gateway.cache.put_head(gateway.key(0), forged)
    deleted = gateway.outcomes.count("deleted")
    planned = len(gateway.plans)
    again = await gateway.speak_and_store(mels=0, heads=1)  # the mel was fine: only the head is made anew
    np.testing.assert_array_equal(again, fresh)
    assert gateway.outcomes.count("deleted") == deleted + 1
    assert len(gateway.plans) == planned, "a sentence whose mel was fine was synthesised again"
    stored = await gateway.cache.get(gateway.key(0))
    assert stored is not None and stored.head is not None
    problem = head_problem(
        stored.head, sample_rate_hz=SAMPLE_RATE_HZ, head_ms=HEAD_MS, frame_count=_frames(0), hop_length=HOP_LENGTH
    )
    assert problem is None and len(stored.head.samples) == round(HEAD_MS / 1000 * SAMPLE_RATE_HZ)
