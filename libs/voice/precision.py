"""The arithmetic a worker's model runs in (torch is imported only to resolve "auto")."""

from __future__ import annotations

import platform
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

PRECISIONS: Final = ("auto", "fp32", "bf16")
"""Model arithmetic: "auto" is bf16 on a GPU that supports it and, on a CPU, whichever of fp32 and bf16
the worker measured cheaper there (fp32 wherever nothing was measured)."""
DEFAULT_PRECISION: Final = "auto"
CPU_PRECISIONS: Final = ("fp32", "bf16")
"""The arithmetic a CPU worker chooses between when its precision is "auto"."""
BF16_MIN_SPEEDUP: Final = 1.15
"""How many times cheaper than fp32 bf16 must measure before a CPU worker serves in it: bf16 rounds
the mel and the samples (a little DNSMOS, and no resume across precisions), and a machine where the two
are within this of each other would otherwise flip between them from one start to the next."""


def resolve_precision(precision: str, device: str) -> str:
    """The arithmetic an engine runs in: `precision`, with "auto" made concrete for `device` where no
    measurement settles it (`measures_precision`): bf16 on a GPU that supports it, fp32 on a CPU.

    A CPU's flags do not say which is faster. Without native bf16 torch emulates it, slower than fp32.
    With it, oneDNN's bf16 convolutions still lost to onnxruntime's float32 ones on an AVX-512 BF16
    CPU without AMX (1.4 to 1.6 times the CPU per audio second: docs/performance.md, "History"). So a
    CPU worker measures both on its own model at start-up (`libs.voice.calibration.MeasuredPrecision`)
    and serves in the cheaper.
    """
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    if precision != "auto":
        return precision
    import torch

    if torch.device(device).type == "cuda":
        return "bf16" if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else "fp32"
    return "fp32"


def measures_precision(precision: str, device: str) -> bool:
    """Whether a worker settles `precision` on `device` by measuring: "auto" on a CPU that runs bf16
    natively (elsewhere bf16 is emulated, and slower than fp32 without measuring)."""
    import torch

    return precision == "auto" and torch.device(device).type == "cpu" and cpu_has_native_bf16()


def cheaper_precision(cost_s: Mapping[str, float]) -> str:
    """Of fp32 and bf16, by what the same work cost in each (`cost_s`, CPU seconds), the one to serve
    in: bf16 only where it costs at most 1 / BF16_MIN_SPEEDUP of fp32."""
    return "bf16" if cost_s["bf16"] * BF16_MIN_SPEEDUP <= cost_s["fp32"] else "fp32"


def cpu_has_native_bf16() -> bool:
    """Whether oneDNN runs bf16 convolutions natively on this CPU."""
    import torch

    return torch.backends.mkldnn.is_available() and bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())


CPU_INFO: Final = Path("/proc/cpuinfo")


@dataclass(frozen=True)
class CpuModel:
    """What kind of CPU this is (its first processor's entry in /proc/cpuinfo)."""

    name: str
    """Its model name, or its architecture (x86_64, arm64) where there is no /proc/cpuinfo."""
    flags: str
    """Its feature flags (avx2, avx512_bf16, amx_tile, ...), space-separated; "" where unknown."""


def cpu_model(cpu_info: Path = CPU_INFO) -> CpuModel:
    """This machine's CPU model: machines differ several times in speed, so a figure needs it beside it."""
    fields: dict[str, str] = {}
    try:
        for line in cpu_info.read_text(encoding="utf-8").splitlines():
            key, _, value = line.partition(":")
            if key.strip() in ("model name", "flags") and key.strip() not in fields:
                fields[key.strip()] = value.strip()
    except OSError:
        pass  # not Linux
    return CpuModel(fields.get("model name") or platform.machine() or "unknown CPU", fields.get("flags", ""))
