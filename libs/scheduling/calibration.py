"""A worker's cost model, measured at start-up: its model steps run on all the cores it may use at once.

Steps timed alone on an idle machine run faster than they do when every core works (shared caches,
memory bandwidth, clock boost), so each of `threads` threads runs the whole calibration workload at
the same time, as a busy worker would, after one untimed pass (the first call of each step size pays
one-off costs). Every step's CPU time feeds the cost model; the process's CPU
over the audio the steps made is the starting point of its cost per audio second, so capacity is
known before the first stream arrives.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from libs.scheduling.capacity import AudioCost
from libs.scheduling.costs import CostModel
from libs.voice.calibration import CalibrationStep

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Calibration:
    """What the calibration measured."""

    cpu_s_per_audio_s: float
    """Process CPU seconds per audio second made."""
    steps: int
    """Steps timed."""
    wall_s: float
    """How long it took."""


def calibrate(
    costs: CostModel,
    cost: AudioCost,
    workload: Callable[[], Iterable[CalibrationStep]],
    threads: int,
    cpu_time: Callable[[], float] = time.process_time,
) -> Calibration:
    """Run `workload()` on `threads` threads at once, feed every step's CPU and wall time to `costs`,
    and start `cost` from the process's CPU per audio second over the run."""
    made: list[float] = []
    counted: list[int] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def run() -> None:
        audio_s, steps = 0.0, 0
        try:
            for step in workload():
                started_s, started_cpu_s = time.perf_counter(), time.thread_time()
                audio_s += step.run()
                costs.observe(step.stage, step.units, time.thread_time() - started_cpu_s, time.perf_counter() - started_s)
                steps += 1
        except BaseException as error:  # raised in the caller below
            errors.append(error)
        with lock:
            made.append(audio_s)
            counted.append(steps)

    for step in workload():  # once untimed: first calls of each size pay one-off costs
        step.run()
    started_s, started_cpu_s = time.perf_counter(), cpu_time()
    workers = [threading.Thread(target=run, name=f"calibration_{index}") for index in range(max(1, threads))]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    if errors:
        raise errors[0]
    audio_s = sum(made)
    per_audio_s = (cpu_time() - started_cpu_s) / audio_s if audio_s > 0 else 0.0
    cost.calibrate(per_audio_s)
    result = Calibration(per_audio_s, sum(counted), time.perf_counter() - started_s)
    _log.info(
        "calibrated on %d threads in %.1f s: %d steps, %.3f CPU s per audio s", threads, result.wall_s, result.steps, per_audio_s
    )
    return result
