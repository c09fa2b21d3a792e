"""What one benchmark run measures, per request and overall, whoever produced the audio.

The mesh load generator and the piper-tts baseline both produce `RequestResult`s, and `summarize`
turns either into the same `LoadSummary`, so their numbers are computed one way and compare fairly.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

OK: Final = "OK"
"""Status of a request that finished normally (the gRPC status code name for the mesh)."""


@dataclass(frozen=True)
class RequestResult:
    """One synthesis request as the client saw it."""

    index: int
    """0-based position of the request in the run."""
    status: str
    """gRPC status code name ("OK", "UNAVAILABLE", ...)."""
    ttfa_s: float | None
    """Time to first audio: from sending the request to the first non-empty audio bytes (seconds); None if none came."""
    total_s: float
    """From sending the request to the end of its stream (seconds)."""
    audio_s: float
    """Audio received, from the byte count and sample rate (seconds of speech)."""
    audio_bytes: int
    """Audio bytes received."""
    text_chars: int
    """Length of the request's text (characters)."""
    started_s: float = 0.0
    """Start time relative to the start of the run (seconds)."""
    error: str = ""
    """The status details when the request failed."""
    stall_s: float = 0.0
    """Playback stall: how long a player that starts at the first audio waited with an empty buffer
    before the stream's audio ended (seconds, summed over its stalls)."""
    longest_stall_s: float = 0.0
    """The longest single stall of that player (seconds)."""

    @property
    def ok(self) -> bool:
        """Whether the request finished with status OK."""
        return self.status == OK


@dataclass(frozen=True)
class Percentiles:
    """p50/p95/p99 of one quantity (seconds); NaN when there were no values."""

    p50: float
    """Median."""
    p95: float
    """95th percentile."""
    p99: float
    """99th percentile."""

    @classmethod
    def of(cls, values: Sequence[float]) -> Percentiles:
        """The three percentiles of `values`."""
        return cls(percentile(values, 50), percentile(values, 95), percentile(values, 99))


@dataclass(frozen=True)
class LoadSummary:
    """Everything a run reports overall."""

    requests: int
    """Requests finished (any status)."""
    errors: int
    """Requests that did not finish with OK."""
    wall_s: float
    """From the first request's start to the last one's end (seconds)."""
    audio_s: float
    """Audio received by successful requests (seconds of speech)."""
    ttfa_s: Percentiles
    """Time to first audio over successful requests."""
    total_s: Percentiles
    """Request total time over successful requests."""
    status_counts: dict[str, int]
    """How many requests ended with each status."""

    @property
    def error_rate(self) -> float:
        """Fraction of requests that failed (0 when there were none)."""
        return self.errors / self.requests if self.requests else 0.0

    @property
    def throughput(self) -> float:
        """Audio seconds delivered per wall-clock second (0 when nothing ran)."""
        return self.audio_s / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def real_time_factor(self) -> float:
        """Wall seconds per audio second, the inverse of throughput (inf when no audio came)."""
        return self.wall_s / self.audio_s if self.audio_s > 0 else math.inf


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) with linear interpolation between order statistics, as numpy's default.

    NaN for no values: a percentile of nothing must not read as zero latency.
    """
    if not 0 <= q <= 100:
        raise ValueError(f"q must be within 0..100, got {q}")
    ordered = sorted(values)
    if not ordered:
        return math.nan
    position = (len(ordered) - 1) * q / 100
    lower = math.floor(position)
    upper = min(lower + 1, len(ordered) - 1)
    return ordered[lower] + (ordered[upper] - ordered[lower]) * (position - lower)


def playback_stalls(arrivals: Sequence[tuple[float, float]]) -> tuple[float, float]:
    """(total, longest) stall in seconds of a player fed `arrivals`, (time received, audio seconds) in order.

    The player starts at the first audio, plays in real time, and pauses whenever its buffer is empty
    until the next audio arrives; running out after the last audio is the end, not a stall.
    """
    total = longest = 0.0
    dry_at: float | None = None
    for received_s, audio_s in arrivals:
        if audio_s <= 0:
            continue
        if dry_at is None:
            dry_at = received_s
        elif received_s > dry_at:
            stall = received_s - dry_at
            total += stall
            longest = max(longest, stall)
            dry_at = received_s
        dry_at += audio_s
    return total, longest


def summarize(results: Sequence[RequestResult], wall_s: float) -> LoadSummary:
    """Overall numbers of a run whose requests took `wall_s` seconds from first start to last end."""
    succeeded = [result for result in results if result.ok]
    counts: dict[str, int] = {}
    for result in results:
        counts[result.status] = counts.get(result.status, 0) + 1
    return LoadSummary(
        requests=len(results),
        errors=len(results) - len(succeeded),
        wall_s=wall_s,
        audio_s=sum(result.audio_s for result in succeeded),
        ttfa_s=Percentiles.of([result.ttfa_s for result in succeeded if result.ttfa_s is not None]),
        total_s=Percentiles.of([result.total_s for result in succeeded]),
        status_counts=counts,
    )


def format_summary(summary: LoadSummary) -> str:
    """A few human-readable lines (milliseconds for latency)."""

    def ms(value: float) -> str:
        return "n/a" if math.isnan(value) else f"{value * 1000:.0f}"

    statuses = ", ".join(f"{code} {count}" for code, count in sorted(summary.status_counts.items()))
    return "\n".join(
        [
            f"requests        {summary.requests} ({statuses or 'none'}), error rate {summary.error_rate:.1%}",
            f"wall            {summary.wall_s:.2f} s, audio {summary.audio_s:.2f} s",
            f"throughput      {summary.throughput:.2f} audio s per wall s (real-time factor {summary.real_time_factor:.3f})",
            f"first audio ms  p50 {ms(summary.ttfa_s.p50)}  p95 {ms(summary.ttfa_s.p95)}  p99 {ms(summary.ttfa_s.p99)}",
            f"total ms        p50 {ms(summary.total_s.p50)}  p95 {ms(summary.total_s.p95)}  p99 {ms(summary.total_s.p99)}",
        ]
    )


STALL_BAR_S: Final = 0.1
"""A stream whose player stalled longer than this in all counts as stalled."""


def format_playback(results: Sequence[RequestResult], per_stream: bool = False) -> str:
    """What the players heard: how many streams stalled past STALL_BAR_S and the worst stall; with
    `per_stream`, one line per stream (first audio, total and longest stall, status)."""
    served = [result for result in results if result.ok]
    stalled = sum(result.stall_s > STALL_BAR_S for result in served)
    worst = max((result.stall_s for result in served), default=0.0)
    lines = [f"playback        {stalled} of {len(served)} streams stalled > {STALL_BAR_S * 1000:.0f} ms, worst {worst:.2f} s"]
    if per_stream:
        for result in results:
            first = "-" if result.ttfa_s is None else f"{result.ttfa_s * 1000:.0f} ms"
            lines.append(
                f"stream {result.index:<5} first audio {first:>8}  stall {result.stall_s:.2f} s "
                f"(longest {result.longest_stall_s:.2f} s)  {result.status}"
            )
    return "\n".join(lines)


def rss_bytes(pid: int) -> int:
    """Resident set size of a process now (VmRSS in /proc/<pid>/status), in bytes; 0 once it is gone."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except FileNotFoundError:
        pass
    return 0


def peak_rss_bytes(pid: int | str = "self") -> int:
    """Peak resident set size of a live process (VmHWM in /proc/<pid>/status), in bytes."""
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                value, unit = line.split()[1:3]
                if unit != "kB":
                    raise ValueError(f"unexpected VmHWM unit {unit!r} for process {pid}")
                return int(value) * 1024
    raise ValueError(f"process {pid} reports no VmHWM")
