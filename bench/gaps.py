"""`make bench-gaps`: where the gaps listeners hear come from, read from the workers' step spans.

Every model step of a worker has a span that says when it ran, on which lane, how long it waited for
a thread and how much time it had to spare at its start (docs/operations.md, "Tracing"). This
benchmark starts the mesh under a CPU quota (as `bench.realtime` does), sends every span to a
collector it runs (`tests.support.otlp`), and starts bursts of cold streams at a share of the capacity
the mesh reports. It then replays each listener from its vocoder steps: a player that starts when the
gateway sent its first audio (the request span's time to first audio: a first piece may be held
until the listener holds enough to outlast the wait for the next) and pauses whenever the next step's
audio is not there yet. For each burst it prints
what the clients heard (first audio p95, also as a multiple of the CPU floor, and the listeners
stalled) beside what the replay finds (listeners with a gap, the longest). With `--detail`, for each
gap it prints the vocoder step that came late and the steps that led to it, so a schedule's gaps
can be traced to their cause.

The replay counts a step's audio as its frames (a step run in parts, part by part), less the
vocoder's lag at a sentence's first step and plus it at its last, at the frame length the clients'
audio gives. It knows nothing of the hops from the vocoder to the gateway and on to the client: a gap
that opens there shows only on the clients' side, and a client whose first audio came late behind the
hops starts later and holds more than the replay counts, so the replay may find a gap the client
never heard. Only requests made with Synthesize are replayed (not prewarming, which nobody hears).

    python -m bench.gaps [--quota 1] [--bursts 3] [--share 0.8] [--detail]
"""

from __future__ import annotations

import argparse
import math
import os
import tempfile
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from opentelemetry.proto.trace.v1 import trace_pb2

from bench.cpu_quota import CpuQuota
from bench.load_table import first_audio_cpu, first_audio_floor_p95
from bench.measure import STALL_BAR_S, RequestResult
from bench.mesh import BenchMesh
from bench.realtime import PROXY, Outcome, Texts, burst, one_after_another, reported_capacity
from bench.report import machine_header
from bench.speed import pin_cores
from libs.scheduling.stream import DEFAULT_VOCODER_LAG_FRAMES
from libs.telemetry import tracing
from tests.support.otlp import ExportedSpan, SpanCollector

GAP_BAR_S: Final = 0.05
"""The shortest wait for audio the replay counts as a gap (a player's own jitter aside)."""
EXPORT_EVERY_MS: Final = 500
"""How often the services send their spans (OTEL_BSP_SCHEDULE_DELAY)."""
SYNTHESIZE: Final = "/tts.v1.TextToSpeech/Synthesize"
SERVER: Final = trace_pb2.Span.SPAN_KIND_SERVER
STEP_SPANS: Final = (tracing.SPAN_ACOUSTIC_PLAN, tracing.SPAN_ACOUSTIC_CHUNK, tracing.SPAN_VOCODER_STEP)


@dataclass(frozen=True)
class Step:
    """One model step, as its span tells it."""

    name: str
    trace_id: bytes
    start_s: float
    end_s: float
    sentence: int
    units: float
    lane: str
    queued_s: float
    slack_s: float
    cpu_s: float
    starting: bool

    @classmethod
    def of(cls, span: ExportedSpan) -> Step | None:
        """The step of a worker's step span (None for any other span)."""
        if span.name not in STEP_SPANS:
            return None
        facts = span.attributes
        return cls(
            name=span.name,
            trace_id=span.trace_id,
            start_s=span.start_s,
            end_s=span.end_s,
            sentence=int(facts.get(tracing.ATTR_SENTENCE_INDEX, 0)),
            units=float(facts.get(tracing.ATTR_STEP_UNITS, 0.0)),
            lane=str(facts.get(tracing.ATTR_STEP_LANE, "")),
            queued_s=float(facts.get(tracing.ATTR_STEP_QUEUED_S, 0.0)),
            slack_s=float(facts.get(tracing.ATTR_STEP_SLACK_S, float("nan"))),
            cpu_s=float(facts.get(tracing.ATTR_STEP_CPU_S, 0.0)),
            starting=bool(facts.get(tracing.ATTR_STEP_STARTING, False)),
        )

    def describe(self, origin_s: float) -> str:
        """The step in a line, its times from `origin_s`."""
        kind = self.name.rsplit(".", 1)[-1]
        return (
            f"{kind} of sentence {self.sentence}, {self.units:.0f} units, {self.lane} lane{' (starting)' if self.starting else ''}: "
            f"asked at +{self.start_s - self.queued_s - origin_s:.3f} s, ran +{self.start_s - origin_s:.3f} to "
            f"+{self.end_s - origin_s:.3f} s ({1000 * (self.end_s - self.start_s):.0f} ms for {1000 * self.cpu_s:.0f} ms of CPU), "
            f"slack at its start {self.slack_s:+.3f} s"
        )


@dataclass(frozen=True)
class Gap:
    """A wait for audio in a listener's replay."""

    index: int
    """The late step's place among the listener's vocoder steps."""
    step: Step
    """The vocoder step whose audio came late."""
    dry_s: float
    """When the listener ran out of audio."""
    length_s: float
    """How long it waited."""


def step_audio_frames(steps: Sequence[Step], lag_frames: int) -> list[float]:
    """The frames of audio each of a listener's vocoder steps (in order) gave it: a step's frames, less the
    vocoder's lag at a sentence's first step (its samples trail its mel) and plus it at the last."""
    frames = []
    for index, step in enumerate(steps):
        first = index == 0 or steps[index - 1].sentence != step.sentence
        last = index + 1 == len(steps) or steps[index + 1].sentence != step.sentence
        frames.append(step.units - (lag_frames if first else 0) + (lag_frames if last else 0))
    return frames


def listener_gaps(
    steps: Sequence[Step],
    frame_s: float,
    lag_frames: int = DEFAULT_VOCODER_LAG_FRAMES,
    bar_s: float = GAP_BAR_S,
    plays_from_s: float = -math.inf,
) -> list[Gap]:
    """The gaps of a player that starts with the first of a listener's vocoder `steps`, or at
    `plays_from_s` if that is later (when the gateway sent the first audio: it holds a first piece until
    the listener holds enough to outlast the wait for the next), and plays each step's audio
    (`step_audio_frames`, `frame_s` a frame) once the step is done, pausing while the next is not: each
    wait longer than `bar_s`, with the step it waited for."""
    ordered = sorted(steps, key=lambda step: step.start_s)
    if not ordered:
        return []
    gaps = []
    audio = step_audio_frames(ordered, lag_frames)
    playing_until_s = max(ordered[0].end_s, plays_from_s) + audio[0] * frame_s
    for index in range(1, len(ordered)):
        step = ordered[index]
        if step.end_s > playing_until_s:
            if step.end_s - playing_until_s > bar_s:
                gaps.append(Gap(index, step, playing_until_s, step.end_s - playing_until_s))
            playing_until_s = step.end_s
        playing_until_s += audio[index] * frame_s
    return gaps


def request_spans(spans: Sequence[ExportedSpan]) -> dict[bytes, ExportedSpan]:
    """The server span of each Synthesize call, by trace (not the gateway's own work, such as
    prewarming, which nobody listens to)."""
    return {span.trace_id: span for span in spans if span.name == SYNTHESIZE and span.kind == SERVER}


def steps_by_trace(spans: Sequence[ExportedSpan], since_s: float = 0.0) -> dict[bytes, list[Step]]:
    """Each Synthesize call's model steps (`request_spans`), in the order they started: of the calls
    whose first step was asked for at `since_s` or later (the spans of earlier ones may still be arriving)."""
    requests = request_spans(spans)
    traces: dict[bytes, list[Step]] = defaultdict(list)
    for span in spans:
        step = Step.of(span)
        if step is not None and step.trace_id in requests:
            traces[step.trace_id].append(step)
    return {
        trace: sorted(steps, key=lambda step: step.start_s)
        for trace, steps in traces.items()
        if min(step.start_s - step.queued_s for step in steps) >= since_s
    }


def _detail(steps: Sequence[Step], gap: Gap, origin_s: float) -> list[str]:
    """The late step of `gap` and the acoustic steps done before it started."""
    before = [step for step in steps if step.name != tracing.SPAN_VOCODER_STEP and step.end_s <= gap.step.start_s + 1e-3][-3:]
    return [
        f"    ran dry at +{gap.dry_s - origin_s:.3f} s for {gap.length_s:.2f} s, waiting for vocoder step {gap.index}: "
        + gap.step.describe(origin_s),
        *(f"      after {step.describe(origin_s)}" for step in before),
    ]


@dataclass(frozen=True)
class Replay:
    """What the replay of one burst's listeners found."""

    listeners: int
    gapped: int
    """Listeners whose gaps add up to more than a stall (STALL_BAR_S)."""
    longest_s: float
    details: list[str]
    """For each gap, the late step and the acoustic steps before it."""


def replay(spans: Sequence[ExportedSpan], results: Sequence[RequestResult], since_s: float, label: str) -> Replay:
    """Replay the listeners of the requests made from `since_s` on (`results`: what their clients got)."""
    traces = steps_by_trace(spans, since_s)
    first_audio_s = {
        trace: span.start_s + float(span.attributes[tracing.ATTR_TIME_TO_FIRST_AUDIO_S])
        for trace, span in request_spans(spans).items()
        if tracing.ATTR_TIME_TO_FIRST_AUDIO_S in span.attributes
    }
    vocoder_steps = {trace: [step for step in steps if step.name == tracing.SPAN_VOCODER_STEP] for trace, steps in traces.items()}
    frames = sum(step.units for steps in vocoder_steps.values() for step in steps)
    frame_s = sum(result.audio_s for result in results) / frames if frames else 0.0
    origin_s = min((step.start_s - step.queued_s for steps in traces.values() for step in steps), default=0.0)
    gapped, longest_s, details = 0, 0.0, []
    for trace, steps in sorted(vocoder_steps.items(), key=lambda item: item[1][0].end_s if item[1] else 0.0):
        plays_from_s = first_audio_s.get(trace, -math.inf)
        gaps = listener_gaps(steps, frame_s, plays_from_s=plays_from_s)
        gapped += sum(gap.length_s for gap in gaps) > STALL_BAR_S
        longest_s = max([longest_s, *(gap.length_s for gap in gaps)])
        if gaps:
            heard_s = max(steps[0].end_s, plays_from_s)
            details.append(f"{label}, listener {trace.hex()[:8]} (first audio sent at +{heard_s - origin_s:.3f} s):")
            for gap in gaps:
                details.extend(_detail(traces[trace], gap, origin_s))
    return Replay(len(vocoder_steps), gapped, longest_s, details)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quota", type=float, default=1.0, help="cores the whole mesh may use (a CFS quota of the pinned cores)")
    parser.add_argument("--cores", type=int, default=1, help="cores pinned for the mesh")
    parser.add_argument("--bursts", type=int, default=3, help="bursts to run, one after another")
    parser.add_argument("--share", type=float, default=0.8, help="each burst's streams, as a share of the reported capacity")
    parser.add_argument("--detail", action="store_true", help="print the late step behind every gap")
    parser.add_argument("--tag", type=int, default=int(time.time()) % 1_000_000, help="first text tag (texts are never repeated)")
    args = parser.parse_args(argv)

    cores = pin_cores(args.cores)
    print(machine_header(cores))
    texts = Texts(args.tag)
    # The clients (this process) weigh as much as the mesh, as in bench.realtime.
    with CpuQuota(None, name=f"tts-bench-clients-{os.getpid()}") as clients, SpanCollector() as collector, CpuQuota(args.quota) as quota:
        clients.add(os.getpid())
        env = {
            "OTEL_EXPORTER_OTLP_ENDPOINT": collector.endpoint,
            "OTEL_TRACES_SAMPLER": "always_on",
            "OTEL_BSP_SCHEDULE_DELAY": str(EXPORT_EVERY_MS),
            "OTEL_BSP_MAX_QUEUE_SIZE": "100000",
        }
        log_dir = Path(tempfile.mkdtemp(prefix="tts-bench-gaps-"))
        mesh = BenchMesh(log_dir=log_dir, preexec=quota.preexec, gateway_args=["--trusted-proxies", PROXY], env=env).start()
        try:
            if mesh.redis is not None and mesh.redis.pid is not None:
                quota.add(mesh.redis.pid)
            target = mesh.gateway_address
            burst(target, texts.take(1))  # warm-up: a stream alone, then a few one after another
            one_after_another(lambda: burst(target, texts.take(1))[0], 3)
            print(f"\nBursts at {args.share:g} of the reported capacity, mesh under a quota of {args.quota:g} core(s); logs in {log_dir}\n")
            print("| burst | streams | first audio p95 | p95 / CPU floor | stalled (clients) | with a gap (replay) | longest gap |")
            print("|---:|---:|---:|---:|---:|---:|---:|")
            details = []
            for number in range(1, args.bursts + 1):
                count = max(1, round(reported_capacity(mesh) * args.share))
                time.sleep(2 * EXPORT_EVERY_MS / 1000)  # the spans of the requests before
                collector.clear()
                spent, started_s = first_audio_cpu(mesh), time.time()
                results = burst(target, texts.take(count))
                outcome = Outcome.of(results)
                floor = first_audio_floor_p95(first_audio_cpu(mesh) - spent, outcome.served, args.quota)
                time.sleep(3 * EXPORT_EVERY_MS / 1000)  # the last spans' export
                found = replay(collector.spans(), results, started_s, f"burst {number}")
                details += found.details
                p95 = outcome.first_audio_p95_s
                # No floor where no stream heard audio (all refused or failed): the row says so, not a crash.
                ratio = f"{p95 / floor:.1f}x" if floor > 0 else "-"
                print(
                    f"| {number} | {count} | {p95:.2f} s | {ratio} | {outcome.stalled} of {outcome.served} | "
                    f"{found.gapped} of {found.listeners} | {found.longest_s:.2f} s |",
                    flush=True,
                )
            if details and args.detail:
                print("\n" + "\n".join(details))
        finally:
            mesh.stop()


if __name__ == "__main__":
    main()
