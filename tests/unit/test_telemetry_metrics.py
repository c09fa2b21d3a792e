"""The services' metric sets: batch stats, model step timing and endpoint health."""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from prometheus_client import CollectorRegistry

from libs.routing.endpoints import Endpoint
from libs.routing.health import HealthConfig, HealthTable, Serving
from libs.scheduling.costs import CostModel
from libs.scheduling.runner import StepRunner
from libs.telemetry.metrics import AcousticMetrics, GatewayMetrics, VocoderMetrics
from libs.voice.batching import BatchingConfig, BatchStats, MicroBatcher
from tests.support.cpu import spin


def value(registry: CollectorRegistry, name: str, **labels: str) -> float:
    """A sample's value, 0 when absent."""
    return registry.get_sample_value(name, labels) or 0.0


def test_batcher_callback_fills_batch_size_queue_and_batch_inference_time() -> None:
    metrics = VocoderMetrics()
    batches: list[BatchStats] = []

    def record(stats: BatchStats) -> None:
        batches.append(stats)
        metrics.observe_batch(stats)

    def run_batch(jobs: list[int]) -> list[int]:
        time.sleep(0.01)
        return [job * 2 for job in jobs]

    batcher = MicroBatcher(run_batch, BatchingConfig(max_batch=4, max_wait_ms=200.0), on_batch=record)
    try:
        futures = [batcher.submit(job) for job in range(4)]
        assert [future.result(5) for future in futures] == [0, 2, 4, 6]
    finally:
        batcher.close()
    registry = metrics.registry
    assert [stats.batch_size for stats in batches] == [4]
    assert value(registry, "tts_vocoder_batch_size_count") == 1
    assert value(registry, "tts_vocoder_batch_size_sum") == 4
    assert value(registry, "tts_vocoder_batch_size_bucket", le="2.0") == 0
    assert value(registry, "tts_vocoder_batch_size_bucket", le="4.0") == 1
    assert value(registry, "tts_vocoder_queue_seconds_count") == 4
    assert abs(value(registry, "tts_vocoder_queue_seconds_sum") - sum(batches[0].queue_s)) < 1e-9
    assert value(registry, "tts_vocoder_inference_seconds_count", stage="batch") == 1
    assert value(registry, "tts_vocoder_inference_seconds_sum", stage="batch") >= 0.01


def test_unbatched_steps_time_the_wait_for_the_inference_thread() -> None:
    metrics = AcousticMetrics()
    costs = CostModel(("plan", "chunk"))
    started, release = threading.Event(), threading.Event()

    async def scenario() -> list[str]:
        with ThreadPoolExecutor(max_workers=1) as executor:
            runner = StepRunner(executor, metrics, costs, batched=lambda: False)
            # The first step holds the only thread for 50 ms from when it starts (on a starved machine
            # the thread may start it late); the second waits for it.
            first = asyncio.ensure_future(runner.run("plan", 10, lambda: (started.set(), release.wait(5), "plan")[2]))
            second = asyncio.ensure_future(runner.run("chunk", 32, lambda: "chunk"))
            assert await asyncio.to_thread(started.wait, 5)
            await asyncio.sleep(0.05)
            release.set()
            return [await first, await second]

    assert asyncio.run(scenario()) == ["plan", "chunk"]
    registry = metrics.registry
    assert value(registry, "tts_acoustic_inference_seconds_count", stage="plan") == 1
    assert value(registry, "tts_acoustic_inference_seconds_sum", stage="plan") >= 0.04
    assert value(registry, "tts_acoustic_inference_seconds_count", stage="chunk") == 1
    assert value(registry, "tts_acoustic_queue_seconds_count") == 2
    assert value(registry, "tts_acoustic_queue_seconds_sum") >= 0.04  # the chunk waited for the plan
    # Without a batcher every chunk run is a batch of one; plans are not chunk runs.
    assert (value(registry, "tts_acoustic_batch_size_count"), value(registry, "tts_acoustic_batch_size_sum")) == (1, 1)


def test_unbatched_steps_count_their_cpu_time_by_stage_and_first_audio() -> None:
    metrics = AcousticMetrics()
    costs = CostModel(("plan", "chunk"))

    async def scenario() -> None:
        with ThreadPoolExecutor(max_workers=1) as executor:
            runner = StepRunner(executor, metrics, costs, batched=lambda: False)
            await runner.run("plan", 100, spin, 0.03, first_audio=True)
            await runner.run("chunk", 50, time.sleep, 0.05)  # waits, burns nothing

    asyncio.run(scenario())
    registry = metrics.registry
    first_plan = value(registry, "tts_acoustic_step_cpu_seconds_total", stage="plan", first_audio="true")
    assert 0.03 <= first_plan < 0.5
    assert value(registry, "tts_acoustic_step_cpu_seconds_total", stage="plan", first_audio="false") == 0
    # CPU time, not wall time: 50 ms asleep costs the machine (almost) nothing.
    assert value(registry, "tts_acoustic_step_cpu_seconds_total", stage="chunk", first_audio="false") < 0.02
    assert value(registry, "tts_acoustic_inference_seconds_sum", stage="chunk") >= 0.05
    # The cost model learned the same: 0.03 s for a plan of 100 ids, next to nothing for the chunk.
    assert costs.cpu_s("plan", 100) >= 0.03 and costs.cpu_s("chunk", 50) < 0.02


def test_batched_steps_leave_queue_and_batch_size_to_the_batcher() -> None:
    metrics = VocoderMetrics()
    costs = CostModel(("chunk",))
    started: list[float] = []

    async def scenario() -> None:
        with ThreadPoolExecutor(max_workers=1) as executor:
            runner = StepRunner(executor, metrics, costs, batched=lambda: True)
            await runner.run("chunk", 64, lambda: None, on_start=started.append)

    asyncio.run(scenario())
    registry = metrics.registry
    assert len(started) == 1
    assert value(registry, "tts_vocoder_inference_seconds_count", stage="chunk") == 1
    assert value(registry, "tts_vocoder_queue_seconds_count") == 0
    assert value(registry, "tts_vocoder_batch_size_count") == 0
    # The stream's thread only waited for the batch: the batcher's thread did the work.
    assert registry.get_sample_value("tts_vocoder_step_cpu_seconds_total", {"stage": "chunk", "first_audio": "false"}) is None
    assert costs.stages["chunk"].observations == 0  # nor is it this stream's cost


def test_healthy_endpoints_are_read_from_the_health_table_at_scrape_time() -> None:
    metrics = GatewayMetrics()
    endpoints = [
        Endpoint("zone-a", "10.0.0.1:50052", "acoustic"),
        Endpoint("zone-a", "10.0.0.2:50052", "acoustic"),
        Endpoint("zone-b", "10.0.0.3:50053", "vocoder"),
    ]
    table = HealthTable(endpoints, HealthConfig(consecutive_failures=1, max_ejected_ratio=1.0))
    metrics.track_endpoints(table.statuses)
    registry = metrics.registry
    assert value(registry, "tts_gateway_healthy_endpoints", kind="acoustic", zone="zone-a") == 0
    for endpoint in endpoints:
        table.set_serving(endpoint, Serving.SERVING)
    assert value(registry, "tts_gateway_healthy_endpoints", kind="acoustic", zone="zone-a") == 2
    assert value(registry, "tts_gateway_healthy_endpoints", kind="vocoder", zone="zone-b") == 1
    table.record_failure(endpoints[0])  # ejected: no longer routable
    assert value(registry, "tts_gateway_healthy_endpoints", kind="acoustic", zone="zone-a") == 1
