"""Which onnxruntime execution providers a session runs on: the engine's device decides.

A CUDA device gets onnxruntime's CUDA provider, or a start-up error that says to install the GPU
build; never a quiet fall back to the CPU, which would serve from a GPU pod at a fraction of the
speed. Feeds and outputs stay numpy (CPU) arrays on either provider: on the GPU onnxruntime copies
each input to the device and each output back. The text side makes one call per sentence, so those
copies cost little there; the streamed steps are where IO binding would avoid them
(`libs.models.onnx_stream`, `_feeds`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final

import torch

CPU_PROVIDER: Final = "CPUExecutionProvider"
CUDA_PROVIDER: Final = "CUDAExecutionProvider"
GPU_PACKAGE: Final = "onnxruntime-gpu"
"""The onnxruntime build with the CUDA provider; it replaces the `onnxruntime` package, never joins it."""

Provider = str | tuple[str, dict[str, Any]]


class ExecutionProviderError(RuntimeError):
    """onnxruntime cannot run on the device asked for: a start-up error that no retry or re-export mends."""


def execution_providers(device: str | torch.device = "cpu") -> list[Provider]:
    """onnxruntime's providers for a model on the torch `device` ("cpu", "cuda" or "cuda:N"), in
    order of preference: the CPU provider alone for "cpu"; for CUDA, the CUDA provider on that GPU
    first and the CPU provider for the operators it lacks.

    Raises ExecutionProviderError when CUDA is asked for and the installed onnxruntime has no CUDA
    provider.
    """
    resolved = torch.device(device)
    if resolved.type == "cpu":
        return [CPU_PROVIDER]
    if resolved.type != "cuda":
        raise ValueError(f"onnxruntime runs on 'cpu' or 'cuda[:N]', not {str(device)!r}")
    import onnxruntime

    available = onnxruntime.get_available_providers()
    if CUDA_PROVIDER not in available:
        raise ExecutionProviderError(
            f"device {str(device)!r} needs onnxruntime's {CUDA_PROVIDER}, but the installed onnxruntime "
            f"{onnxruntime.__version__} offers only {available}: install the GPU build instead "
            f"(pip uninstall onnxruntime, then pip install {GPU_PACKAGE}; the image's `gpu` target has it) "
            f"or run on --device cpu"
        )
    # onnxruntime's CUDA provider computes float32 products in TF32 by default (torch does not): the
    # graphs must stay float32, as the probes and model versions assume.
    return [(CUDA_PROVIDER, {"device_id": resolved.index or 0, "use_tf32": 0}), CPU_PROVIDER]


def inference_session(model: str | Path | bytes, options: Any, device: str | torch.device = "cpu") -> Any:
    """An onnxruntime InferenceSession of `model` (a file or its bytes) with `options`, on the
    providers of `device` (`execution_providers`).

    On a GPU the session must hold the CUDA provider: onnxruntime would otherwise drop it (a CUDA or
    cuDNN library it cannot load, no GPU visible) with no more than a printed warning and run on the
    CPU. A session that has it does not fall back at run time either.
    """
    import onnxruntime

    providers = execution_providers(device)
    source = model if isinstance(model, bytes) else str(model)
    session = onnxruntime.InferenceSession(source, options, providers=providers)
    if providers == [CPU_PROVIDER]:
        return session
    if session.get_providers()[0] != CUDA_PROVIDER:
        raise ExecutionProviderError(
            f"onnxruntime could not start its {CUDA_PROVIDER} on {str(device)!r} (the session has {session.get_providers()}): "
            "check that a GPU is visible and that the CUDA and cuDNN libraries of the installed "
            f"{GPU_PACKAGE} are present, or run on --device cpu"
        )
    session.disable_fallback()
    return session
