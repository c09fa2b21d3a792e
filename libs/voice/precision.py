"""The arithmetic a worker's model runs in (torch is imported only to resolve "auto")."""

from __future__ import annotations

from typing import Final

PRECISIONS: Final = ("auto", "fp32", "bf16")
"""Model arithmetic: "auto" picks bf16 where the hardware runs it natively, fp32 elsewhere."""
DEFAULT_PRECISION: Final = "auto"


def resolve_precision(precision: str, device: str) -> str:
    """The arithmetic an engine runs in: `precision`, with "auto" made concrete for `device`.

    bf16 is faster where the hardware has it (CPUs with AVX-512 BF16 or AMX, which oneDNN reports as
    bf16-capable, and GPUs that support it) and within DNSMOS round-off of fp32. Without it, torch
    emulates bf16 in software, slower than fp32, and oneDNN's packed bf16 kernels are missing
    altogether, so "auto" is fp32 there.
    """
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    if precision != "auto":
        return precision
    import torch

    if torch.device(device).type == "cuda":
        return "bf16" if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else "fp32"
    return "bf16" if cpu_has_native_bf16() else "fp32"


def cpu_has_native_bf16() -> bool:
    """Whether oneDNN runs bf16 convolutions natively on this CPU."""
    import torch

    return torch.backends.mkldnn.is_available() and bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
