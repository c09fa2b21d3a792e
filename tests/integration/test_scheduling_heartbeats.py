"""A step that the kernel holds back (its thread at a low priority beside another process's busy one)
still tells its gateway the worker is alive."""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import time

from prometheus_client import CollectorRegistry

from libs.scheduling.costs import CostModel
from libs.scheduling.executor import BACKGROUND_NICE, DeadlineExecutor
from libs.scheduling.runner import PROGRESS_CPU_S, WAIT_READ_EVERY_S, StepRunner, with_heartbeats
from libs.telemetry.metrics import WorkerMetrics
from tests.support.cpu import spin


async def test_a_step_held_back_by_the_kernel_sends_heartbeats_while_it_waits_for_the_cpu() -> None:
    # A background thread beside a busy process at nice 0 on its only core gets 15/1039 of it (nice
    # 19): the step spends little CPU a second, but it is ready to run all along, and that wait counts.
    cpu = min(os.sched_getaffinity(0))
    executor = DeadlineExecutor(1)
    runner = StepRunner(executor, WorkerMetrics("vocoder", CollectorRegistry()), CostModel(("chunk",)), lambda: False)

    def held_back() -> str:
        os.sched_setaffinity(0, {cpu})
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), min(19, os.getpriority(os.PRIO_PROCESS, 0) + BACKGROUND_NICE))
        spin(2 * PROGRESS_CPU_S)
        return "audio"

    hog = await asyncio.create_subprocess_exec(sys.executable, "-c", "while True: pass", preexec_fn=lambda: os.sched_setaffinity(0, {cpu}))
    try:
        await asyncio.sleep(0.2)  # the busy process is running
        cpu_before = time.process_time()
        step = asyncio.wrap_future(executor.submit(held_back))
        seen = [item async for item in with_heartbeats(step, runner.progress, every_s=2 * WAIT_READ_EVERY_S)]
        spent_s = time.process_time() - cpu_before
        waited_s = executor.cpu_wait_s()
    finally:
        hog.kill()
        await hog.wait()
        executor.shutdown()
    # The process's CPU alone (the step's two heartbeats' worth, and the loop's) accounts for few of them.
    assert seen[-1] == "audio" and seen.count(None) >= 2 + spent_s / PROGRESS_CPU_S
    assert waited_s > spent_s
