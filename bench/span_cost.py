"""What a model step's span costs the step when the sampler drops it, as 99 requests in 100 are by
default: the same trivial step run through a worker's `StepRunner` with and without its span, under
the services' default tracing, in a request whose span was not sampled. Printed in microseconds and
as a share of the CPU of a small real step, which scales with the machine the same way.

    python -m bench.span_cost [--steps 3000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Sequence
from typing import Final

from opentelemetry import context as otel_context
from opentelemetry import trace
from prometheus_client import CollectorRegistry

from bench.report import machine_header
from libs.scheduling.costs import CostModel
from libs.scheduling.executor import DeadlineExecutor
from libs.scheduling.runner import StepRunner
from libs.telemetry import tracing
from libs.telemetry.metrics import STAGE_CHUNK, WorkerMetrics

SMALL_STEP_CPU_MS: Final = 8.0
"""CPU of the smallest real step, an acoustic chunk of 33 frames, on a machine of about 176 GFLOP/s
(`tts.step.cpu_s` of the spans `make bench-gaps` collects): what the overhead is a share of. On a
slower machine the step and the span's Python grow alike, so the share stays about the same."""


async def _per_step_s(runner: StepRunner, span: str | None, steps: int) -> float:
    started = time.perf_counter()
    for _ in range(steps):
        await runner.run(STAGE_CHUNK, 33, int, deadline_s=time.monotonic(), span=span, span_attributes={tracing.ATTR_SENTENCE_INDEX: 0})
    return (time.perf_counter() - started) / steps


async def _measure(steps: int, rounds: int) -> tuple[float, float]:
    provider = tracing.setup_tracing("acoustic", environ={}, set_global=True)  # the services' default
    tracer = tracing.get_tracer(provider)
    parent = tracer.start_span("request")
    while parent.is_recording():  # a request the sampler dropped
        parent = tracer.start_span("request")
    otel_context.attach(trace.set_span_in_context(parent))
    executor = DeadlineExecutor(1, urgent_threads=1)
    try:
        runner = StepRunner(executor, WorkerMetrics("acoustic", CollectorRegistry()), CostModel((STAGE_CHUNK,)), lambda: False)
        bare, spanned = [], []
        for _ in range(rounds):  # alternated, so that drift on a noisy machine falls on both
            bare.append(await _per_step_s(runner, None, steps))
            spanned.append(await _per_step_s(runner, tracing.SPAN_ACOUSTIC_CHUNK, steps))
        return min(bare), min(spanned)
    finally:
        executor.shutdown()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    bare_s, spanned_s = asyncio.run(_measure(args.steps, args.rounds))
    added_us = (spanned_s - bare_s) * 1e6
    print(machine_header())
    print("| step | per step (min of rounds) |")
    print("|---|---:|")
    print(f"| without a span | {bare_s * 1e6:.1f} us |")
    print(f"| with a dropped span | {spanned_s * 1e6:.1f} us |")
    share = added_us / (SMALL_STEP_CPU_MS * 10)
    print(f"\nThe span adds {added_us:.1f} us a step: {share:.2f}% of the smallest real step's CPU ({SMALL_STEP_CPU_MS:g} ms at 176 GFLOP/s).")


if __name__ == "__main__":
    main()
