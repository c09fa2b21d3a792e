"""Start-up calibration and the steps' heartbeats."""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from prometheus_client import CollectorRegistry

from libs.scheduling.calibration import calibrate
from libs.scheduling.capacity import AudioCost
from libs.scheduling.costs import CostModel
from libs.scheduling.executor import DeadlineExecutor
from libs.scheduling.runner import PROGRESS_CPU_S, WAIT_READ_EVERY_S, StepRunner, with_heartbeats
from libs.telemetry.metrics import WorkerMetrics
from libs.voice.calibration import CalibrationStep, sentence_ids
from tests.support.cpu import spin


def _workload() -> list[CalibrationStep]:
    """Steps that cost 1 ms fixed and 0.05 ms a unit, each making 0.1 s of audio per 10 units."""
    return [
        CalibrationStep("chunk", units, lambda units=units: (spin(0.001 + 0.00005 * units), units / 100)[1])
        for units in (20, 40, 80, 20, 40, 80)
    ]


def test_calibration_fits_the_costs_and_the_cost_per_audio_second_on_every_thread() -> None:
    costs, cost = CostModel(("chunk",)), AudioCost()
    result = calibrate(costs, cost, _workload, threads=2)
    assert result.steps == 12
    assert costs.cpu_s("chunk", 100) == pytest.approx(0.001 + 0.005, rel=0.5)
    # 0.75 s of CPU per run's 2.8 s of audio (two threads): ~0.027 CPU s per audio s, with the untimed pass apart.
    assert cost.cpu_s_per_audio_s == pytest.approx((6 * 0.001 + 0.00005 * 280) / 2.8, rel=0.5)


def test_a_calibration_step_that_fails_stops_the_start_up() -> None:
    def broken() -> list[CalibrationStep]:
        return [CalibrationStep("chunk", 1, lambda: 1 / 0)]

    with pytest.raises(ZeroDivisionError):
        calibrate(CostModel(("chunk",)), AudioCost(), broken, threads=1)


def test_calibration_sentences_are_cut_from_real_speech_with_their_ends() -> None:
    ids = sentence_ids(61)
    assert len(ids) == 61 and ids[0] == 1 and ids[-1] == 2


async def test_a_step_waiting_in_a_busy_queue_sends_heartbeats_only_while_others_progress() -> None:
    done = [0]

    async def step() -> str:
        await asyncio.sleep(0.35)
        return "mel"

    async def progressing() -> None:
        while True:
            await asyncio.sleep(0.02)
            done[0] += 1

    ticker = asyncio.ensure_future(progressing())
    seen = [item async for item in with_heartbeats(step(), lambda: done[0], every_s=0.1)]
    ticker.cancel()
    assert seen[-1] == "mel" and 2 <= seen.count(None) <= 3
    # A worker whose threads are stuck (nothing finishes) says nothing while its step waits.
    seen = [item async for item in with_heartbeats(step(), lambda: 0, every_s=0.1)]
    assert seen == ["mel"]


async def test_a_long_step_on_a_slow_core_sends_heartbeats_while_it_burns_cpu() -> None:
    # One step that outlasts several heartbeats, nothing else running: no step finishes while it
    # runs, but the CPU it spends says the worker is working, however slow the core.
    runner = StepRunner(ThreadPoolExecutor(max_workers=1), WorkerMetrics("acoustic", CollectorRegistry()), CostModel(("chunk",)), lambda: False)
    step = asyncio.get_running_loop().run_in_executor(runner.executor, lambda: (spin(6 * PROGRESS_CPU_S), "mel")[1])
    seen = [item async for item in with_heartbeats(step, runner.progress, every_s=PROGRESS_CPU_S / 2)]
    # About one heartbeat per PROGRESS_CPU_S of the step's CPU, whatever the wall time it took.
    assert seen[-1] == "mel" and seen.count(None) >= 3


def test_progress_reads_the_threads_wait_for_the_cpu_at_most_once_a_tenth_of_a_heartbeat() -> None:
    # Every step asks for progress as it starts; the wait is one /proc file per thread, so it is read
    # afresh only when the last reading is WAIT_READ_EVERY_S old.
    executor = DeadlineExecutor(1)
    reads: list[float] = []

    def read() -> float:  # half a second more wait at each reading
        reads.append(time.monotonic())
        return 0.5 * len(reads)

    executor.cpu_wait_s = read  # type: ignore[method-assign]
    runner = StepRunner(executor, WorkerMetrics("vocoder", CollectorRegistry()), CostModel(("chunk",)), lambda: False)
    try:
        first, again = runner.progress(), runner.progress()
        assert len(reads) == 1 and again - first < 1  # the same reading: only the process's CPU moved
        time.sleep(WAIT_READ_EVERY_S)
        assert runner.progress() - again >= 0.5 / PROGRESS_CPU_S and len(reads) == 2
    finally:
        executor.shutdown()
