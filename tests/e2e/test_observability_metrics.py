"""After real traffic through the mesh, every service's /metrics shows the catalogue's metrics moving."""

from __future__ import annotations

import time
import uuid

import grpc
import pytest

from libs.pb.tts.v1 import tts_pb2, tts_pb2_grpc
from tests.support.client import Spoken, synthesize
from tests.support.mesh import Mesh

SYNTHESIZE_OK = 'tts_gateway_requests_total{code="OK",method="Synthesize"}'
SYNTHESIZE_INVALID = 'tts_gateway_requests_total{code="INVALID_ARGUMENT",method="Synthesize"}'
TTFA_COUNT = 'tts_gateway_time_to_first_audio_seconds_count{method="Synthesize"}'
TTFA_SUM = 'tts_gateway_time_to_first_audio_seconds_sum{method="Synthesize"}'
SYNTHESIS_COUNT = 'tts_gateway_synthesis_seconds_count{method="Synthesize"}'
SYNTHESIS_SUM = 'tts_gateway_synthesis_seconds_sum{method="Synthesize"}'
CACHE = 'tts_gateway_cache_operations_total{{outcome="{}"}}'


def _delta(after: dict[str, float], before: dict[str, float], key: str) -> float:
    return after.get(key, 0.0) - before.get(key, 0.0)


def _sum_matching(samples: dict[str, float], prefix: str) -> float:
    return sum(value for key, value in samples.items() if key.startswith(prefix))


def _settled(mesh: Mesh, name: str, gauge: str, timeout_s: float = 10.0) -> dict[str, float]:
    """/metrics of `name` once its in-flight gauge is back to 0 (streams end just after the client's call)."""
    deadline = time.monotonic() + timeout_s
    while True:
        samples = mesh.metrics(name)
        if samples.get(gauge, 0.0) == 0.0 or time.monotonic() > deadline:
            return samples
        time.sleep(0.1)


def test_traffic_shows_up_in_every_services_metrics(mesh: Mesh) -> None:
    before = {name: mesh.metrics(name) for name in ("gateway", "acoustic", "vocoder")}
    tag = uuid.uuid4().int % 100000
    repeated = f"Metrics count what happened. Every time {tag}."
    spoken: list[Spoken] = [
        synthesize(mesh.gateway_address, repeated),  # two sentences, both cache misses
        synthesize(mesh.gateway_address, repeated),  # the same two: cache hits
        synthesize(mesh.gateway_address, f"One more sentence {tag}."),  # one miss
    ]
    with grpc.insecure_channel(mesh.gateway_address) as channel, pytest.raises(grpc.RpcError) as refused:
        list(tts_pb2_grpc.TextToSpeechStub(channel).Synthesize(tts_pb2.SynthesizeRequest(text="   "), timeout=30))
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT

    gateway = _settled(mesh, "gateway", "tts_gateway_inflight_streams")
    acoustic = _settled(mesh, "acoustic", "tts_acoustic_inflight_streams")
    vocoder = _settled(mesh, "vocoder", "tts_vocoder_inflight_streams")
    g0, a0, v0 = before["gateway"], before["acoustic"], before["vocoder"]

    # Gateway: requests and errors by code, one TTFA and one synthesis time per request, the cache.
    assert _delta(gateway, g0, SYNTHESIZE_OK) == 3
    assert _delta(gateway, g0, SYNTHESIZE_INVALID) == 1
    assert _delta(gateway, g0, TTFA_COUNT) == 3
    assert _delta(gateway, g0, SYNTHESIS_COUNT) == 3
    ttfa_s, synthesis_s = _delta(gateway, g0, TTFA_SUM), _delta(gateway, g0, SYNTHESIS_SUM)
    assert 0.0 < ttfa_s < synthesis_s
    assert synthesis_s <= sum(s.total_s for s in spoken)  # the gateway's clock starts after the client's
    assert _delta(gateway, g0, CACHE.format("hit")) == 2
    assert _delta(gateway, g0, CACHE.format("miss")) == 3
    assert _delta(gateway, g0, CACHE.format("written")) == 3
    assert gateway["tts_gateway_inflight_streams"] == 0
    voice_requests = [k for k in gateway if k.startswith("tts_gateway_voice_requests_total{")]
    assert len(voice_requests) == 1 and _delta(gateway, g0, voice_requests[0]) == 3
    audio_s = _sum_matching(gateway, "tts_gateway_audio_seconds_total{") - _sum_matching(g0, "tts_gateway_audio_seconds_total{")
    assert abs(audio_s - sum(s.duration_s for s in spoken)) < 0.01
    for samples in (gateway, acoustic, vocoder):
        assert samples["process_resident_memory_bytes"] > 50e6
        # What start-up built (modules, models, stubs) is out of the collector's full passes.
        assert samples["tts_gc_frozen_objects"] > 10_000

    # Acoustic: three sentences synthesised (the repeat came from Redis), each a plan and chunks.
    plans = _delta(acoustic, a0, 'tts_acoustic_inference_seconds_count{stage="plan"}')
    chunks = _delta(acoustic, a0, 'tts_acoustic_inference_seconds_count{stage="chunk"}')
    assert _delta(acoustic, a0, "tts_acoustic_sentences_total") == 3
    assert plans == 3 and chunks >= 3
    assert _delta(acoustic, a0, 'tts_acoustic_inference_seconds_sum{stage="plan"}') > 0
    assert _delta(acoustic, a0, "tts_acoustic_queue_seconds_count") == plans + chunks
    assert _delta(acoustic, a0, "tts_acoustic_batch_size_count") == chunks  # batching off: runs of one
    assert _delta(acoustic, a0, "tts_acoustic_batch_size_sum") == chunks
    assert _sum_matching(acoustic, "tts_acoustic_streams_total{") - _sum_matching(a0, "tts_acoustic_streams_total{") == 2
    assert acoustic["tts_acoustic_inflight_streams"] == 0

    # CPU in steps: some before a first audio (a plan and a chunk here, the first step at the
    # vocoder), and never more than the whole process used (whose count moves in 10 ms ticks).
    assert _delta(acoustic, a0, 'tts_acoustic_step_cpu_seconds_total{first_audio="true",stage="plan"}') > 0
    assert _delta(acoustic, a0, 'tts_acoustic_step_cpu_seconds_total{first_audio="true",stage="chunk"}') > 0
    assert _delta(vocoder, v0, 'tts_vocoder_step_cpu_seconds_total{first_audio="true",stage="chunk"}') > 0
    for worker, now, start in (("acoustic", acoustic, a0), ("vocoder", vocoder, v0)):
        in_steps = _sum_matching(now, f"tts_{worker}_step_cpu_seconds_total{{") - _sum_matching(start, f"tts_{worker}_step_cpu_seconds_total{{")
        assert 0 < in_steps <= _delta(now, start, "process_cpu_seconds_total") + 0.02, worker

    # Vocoder: one stream per request, every mel slice timed, every sample the clients heard.
    steps = _delta(vocoder, v0, 'tts_vocoder_inference_seconds_count{stage="chunk"}')
    assert steps > 0 and _delta(vocoder, v0, 'tts_vocoder_inference_seconds_sum{stage="chunk"}') > 0
    assert _delta(vocoder, v0, "tts_vocoder_mel_queue_seconds_count") == steps
    assert _delta(vocoder, v0, "tts_vocoder_queue_seconds_count") == steps
    assert _delta(vocoder, v0, "tts_vocoder_samples_total") == sum(len(s.samples) for s in spoken)
    assert _sum_matching(vocoder, "tts_vocoder_streams_total{") - _sum_matching(v0, "tts_vocoder_streams_total{") == 3
    assert vocoder["tts_vocoder_inflight_streams"] == 0

    # Each worker names the one arithmetic it serves in (auto settles it at start-up, per machine).
    for worker, now in (("acoustic", acoustic), ("vocoder", vocoder)):
        served = {key: value for key, value in now.items() if key.startswith(f"tts_{worker}_precision{{")}
        assert len(served) == 1 and list(served.values()) == [1.0], served
        assert next(iter(served)) in {f'tts_{worker}_precision{{precision="{name}"}}' for name in ("fp32", "bf16")}, served
