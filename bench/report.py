"""The speed benchmark's one table: each row a measure for the mesh and for piper-tts, and their ratio."""

from __future__ import annotations

import math
import os
import shlex
import time
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Row:
    """One line of the table."""

    measure: str
    """What is measured, with its unit and which way is better, e.g. "first audio p50, ms (lower is better)"."""
    text: str
    """Which texts were spoken ("short", "paragraph", "long", "mixed", or "-")."""
    concurrency: str
    """Concurrent streams, or "-"."""
    mesh: float | None
    """The mesh's value; None when it was not measured."""
    piper: float | None
    """piper-tts's value; None when there is nothing to compare with."""
    note: str = ""
    """How it was measured, or why a value is missing."""

    @property
    def ratio(self) -> float | None:
        """mesh / piper, or None when either is missing or piper's value is zero."""
        if self.mesh is None or self.piper is None or self.piper == 0 or math.isnan(self.mesh) or math.isnan(self.piper):
            return None
        return self.mesh / self.piper


def _value(value: float | None) -> str:
    if value is None or math.isnan(value):
        return "n/a"
    if abs(value) >= 100:
        return f"{value:.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def render_markdown(rows: Sequence[Row], title: str, notes: Sequence[str] = ()) -> str:
    """The table as GitHub markdown, with a title line above and notes below."""
    lines = [
        f"## {title}",
        "",
        "| measure | text | streams | tts-mesh | piper-tts | mesh / piper | note |",
        "|---|---|---:|---:|---:|---:|---|",
    ]
    for row in rows:
        ratio = "n/a" if row.ratio is None else f"{row.ratio:.2f}x"
        lines.append(
            f"| {row.measure} | {row.text} | {row.concurrency} | {_value(row.mesh)} | {_value(row.piper)} | {ratio} | {row.note} |"
        )
    if notes:
        lines.append("")
        lines.extend(f"- {note}" for note in notes)
    return "\n".join(lines) + "\n"


def run_heading(name: str, command: str) -> str:
    """The first line of a benchmark's output file: what ran, by which command, and when (UTC).

    docs/performance.md shows each output file under this line, so a table always says its date. The
    services a benchmark starts inherit its environment, so the settings given there (`TTS_*`, e.g.
    `TTS_BACKGROUND_PRIORITY=idle`) are part of what ran: they come before the command, as a shell takes them."""
    settings = [f"{key}={shlex.quote(value)}" for key, value in sorted(os.environ.items()) if key.startswith("TTS_")]
    return f"## {name} (`{' '.join([*settings, command])}`, {time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC)"


def machine_header(cores: Sequence[int] | None = None) -> str:
    """A line that says what machine a table was measured on: the CPU's model, the cores pinned, and its
    measured single-precision matrix speed (machines here differ several times over; compare figures
    across machines only as ratios measured in one run)."""
    import numpy as np

    pinned = sorted(cores if cores is not None else os.sched_getaffinity(0))
    size = 1024
    a = np.random.default_rng(0).standard_normal((size, size), dtype=np.float32)
    a @ a  # warm
    started = time.perf_counter()
    for _ in range(8):
        a @ a
    gflops = 8 * 2 * size**3 / (time.perf_counter() - started) / 1e9
    return f"Machine: {cpu_description()}, pinned to CPUs {pinned}; sgemm {gflops:.0f} GFLOP/s on them.\n"


def cpu_description() -> str:
    """The CPU's model and the vector units that move the mesh's figures, e.g. "AMD EPYC (AVX-512, native bf16)"."""
    from libs.voice.precision import cpu_has_native_bf16, cpu_model

    cpu = cpu_model()
    return f"{cpu.name} ({vector_units(cpu.flags, cpu_has_native_bf16())})"


def vector_units(flags: str, native_bf16: bool) -> str:
    """What of a CPU's vector units moves the mesh's figures: AVX-512 or only AVX2 for float32 (from its
    /proc/cpuinfo `flags`; "flags unknown" where none are listed), and whether bf16 runs natively, as
    the workers' "auto" precision judges it (`libs.voice.precision.cpu_has_native_bf16`): there the
    vocoder may serve bf16, at about 0.6 of the CPU of float32."""
    names = set(flags.split())
    width = "AVX-512" if "avx512f" in names else "AVX2" if "avx2" in names else "no AVX2" if names else "flags unknown"
    return f"{width}, {'native bf16' if native_bf16 else 'no native bf16'}"


def arithmetic_line(precisions: dict[str, str], asked: str) -> str:
    """What the workers' models ran in (`BenchMesh.precisions`) and what they were asked for: where bf16
    is native, the vocoder's steps cost about 1.6 times the CPU per audio second in fp32."""
    served = ", ".join(f"{worker} {precision}" for worker, precision in sorted(precisions.items())) or "not reported"
    how = "as measured cheaper at start-up where bf16 is native, else fp32" if asked == "auto" else "as asked"
    return f"Workers' arithmetic: {served} (--precision {asked}: {how})."
