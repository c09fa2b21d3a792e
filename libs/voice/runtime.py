"""How an engine runs its model: device, precision, threads, and dynamic batching across streams."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

import torch

from libs.models.onnx_stream import STEP_KINDS, OnnxStreamNetwork, StepKind
from libs.models.streaming import NO_END, StepInput, StepOutput, StreamNetwork, stream_step
from libs.voice.batching import BatchingConfig, BatchStats, MicroBatcher, padding_groups
from libs.voice.precision import DEFAULT_PRECISION, PRECISIONS, resolve_precision

STREAM_BACKENDS: Final = ("auto", "torch", "onnxruntime")
"""Where a stream's steps run: "auto" is onnxruntime for float32 on a CPU, torch elsewhere."""


@dataclass(frozen=True)
class EngineSettings:
    """How an engine runs its model: where, in what precision, on how many threads, batched or not.

    With max_batch 1, a resumed stream equals the uninterrupted one bit for bit (either precision,
    same CPU type), and chunked output equals whole-sentence output to round-off. Batching keeps every
    stream within round-off of running alone (padding is masked), but a batched kernel may sum in a
    different order, so it is not bit-exact: bit-exact resume needs max_batch 1. The bounds of each
    case are in docs/ARCHITECTURE.md, "Exact streaming and resume".

    Batching pays where one big call is cheaper than many small ones (GPUs); on a CPU streams run side
    by side do better, so max_batch is 1 there (the max-batch rows of `make bench`). A batching engine
    needs callers on as many threads as max_batch, or no two streams ever meet in a batch.
    """

    device: str = "cpu"
    """Torch device: "cpu", or "cuda" / "cuda:N" when a GPU is present."""
    precision: str = DEFAULT_PRECISION
    """"auto" (bf16 where the hardware has it, else fp32), "fp32", or "bf16" (autocast)."""
    batching: BatchingConfig = BatchingConfig(max_batch=1)
    """Dynamic batching across streams; max_batch 1 calls the model directly on the caller's thread."""
    on_batch: Callable[[BatchStats], None] | None = None
    """Called after every batched call (batch size, queue and compute time) for metrics."""
    slice_frames: int = 0
    """Frames of the slices a CPU vocoder runs its wide float32 steps in (0: its cache rule's, which a
    worker then replaces by the width it measures cheapest here, `MeasuredPrecision.settle_slices`)."""
    stream_backend: str = "auto"
    """Where one stream's steps run (batches of several always run in torch): "auto" (onnxruntime
    for float32 on a CPU, where it computes them faster than torch; torch for bf16 and on a GPU),
    "torch", or "onnxruntime" (float32 on a CPU only). The two agree to float32 round-off."""

    def __post_init__(self) -> None:
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {PRECISIONS}, got {self.precision!r}")
        if self.slice_frames < 0:
            raise ValueError(f"slice_frames must be 0 (measured) or a number of frames, got {self.slice_frames}")
        if self.stream_backend not in STREAM_BACKENDS:
            raise ValueError(f"stream_backend must be one of {STREAM_BACKENDS}, got {self.stream_backend!r}")


def resolve_stream_backend(settings: EngineSettings, device: str | None = None) -> str:
    """Where the engine's stream steps run, "torch" or "onnxruntime" ("auto" made concrete)."""
    device_type = torch.device(device or settings.device).type
    precision = resolve_precision(settings.precision, device or settings.device)
    fits = device_type == "cpu" and precision == "fp32"
    if settings.stream_backend == "onnxruntime" and not fits:
        raise ValueError(f"the onnxruntime stream backend runs float32 on a CPU, not {precision} on {device_type}")
    return "onnxruntime" if fits and settings.stream_backend != "torch" else "torch"


def stream_version_parts(settings: EngineSettings, device: str | None = None) -> list[str]:
    """The model-version parts that name where stream steps run: onnxruntime moves samples by
    float32 round-off, so its workers never share cache entries, heads or bit-exact resumes with
    torch's. Torch adds no part, so those versions stay what they were."""
    return ["stream=onnxruntime"] if resolve_stream_backend(settings, device) == "onnxruntime" else []


def resolve_device(name: str) -> torch.device:
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {name!r} was asked for but torch sees no CUDA GPU here; use 'cpu'")
    return device


class ModelRuntime:
    """The parts of `EngineSettings` that act at run time: device, autocast and the batcher."""

    def __init__(self, settings: EngineSettings, run_batch: Callable[[Sequence], list], name: str) -> None:
        self.settings = settings
        self.device = resolve_device(settings.device)
        self.precision = resolve_precision(settings.precision, settings.device)
        """The concrete arithmetic, "fp32" or "bf16" ("auto" resolved for this device)."""
        self.stream_backend = resolve_stream_backend(settings)
        """Where one stream's steps run, "torch" or "onnxruntime"."""
        self.batcher = (
            MicroBatcher(run_batch, settings.batching, settings.on_batch, name=name)
            if settings.batching.max_batch > 1
            else None
        )
        self._run_batch = run_batch

    @property
    def weights_dtype(self) -> torch.dtype:
        """The dtype the model's convolution weights are used in (bf16 under bf16 autocast)."""
        return torch.bfloat16 if self.precision == "bf16" else torch.float32

    def autocast(self) -> contextlib.AbstractContextManager:
        """bf16 autocast when asked for; a no-op context in fp32."""
        if self.precision == "bf16":
            return torch.autocast(device_type=self.device.type, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def run(self, job: object) -> object:
        """One job through the batcher, or straight through the model when batching is off."""
        if self.batcher is None:
            return self._run_batch([job])[0]
        return self.batcher(job)

    @property
    def queue_depth(self) -> int:
        return 0 if self.batcher is None else self.batcher.queue_depth

    def close(self) -> None:
        if self.batcher is not None:
            self.batcher.close()

    def onnx_network(
        self,
        network: StreamNetwork,
        name: str,
        channels: int,
        first_width: int,
        kinds: tuple[StepKind, ...] = STEP_KINDS,
        sliced: bool = False,
    ) -> OnnxStreamNetwork | None:
        """`network`'s `kinds` of step in onnxruntime when that is the stream backend (else None),
        on as many threads as torch has; `sliced`: wide steps run in slices (`OnnxStreamNetwork.load`)."""
        if self.stream_backend != "onnxruntime":
            return None
        return OnnxStreamNetwork.load(
            network, name, channels, first_width, threads=torch.get_num_threads(), kinds=kinds, device=self.device, sliced=sliced
        )


class BatchedEngine:
    """What both engines expose of their runtime: the batcher, its queue, and shutdown."""

    _runtime: ModelRuntime

    @property
    def batcher(self) -> MicroBatcher | None:
        """The dynamic batcher of chunk jobs, None when batching is off (max_batch 1)."""
        return self._runtime.batcher

    @property
    def queue_depth(self) -> int:
        """Chunk jobs waiting for a batch (0 without batching)."""
        return self._runtime.queue_depth

    def close(self) -> None:
        """Stop the batcher thread, if any (waiting jobs are cancelled)."""
        self._runtime.close()


def run_stream_steps(
    network: StreamNetwork,
    jobs: Sequence[StepInput],
    runtime: ModelRuntime,
    first_width: int,
    onnx: OnnxStreamNetwork | None = None,
) -> list[StepOutput]:
    """Several streams' steps through `network`; steps of one kind and similar sizes share a padded call.

    First and last steps compute a different number of positions than the others, so those kinds
    never share a call. A step left alone in its call runs in `onnx` when given and it accepts the
    step. With max_batch 1 every step is alone, so where it runs depends only on its frame indices,
    and a resumed stream repeats every choice.
    """
    outputs: list[StepOutput | None] = [None] * len(jobs)
    kinds = sorted({(job.state is None, job.high != NO_END) for job in jobs})
    for kind in kinds:
        indices = [index for index, job in enumerate(jobs) if (job.state is None, job.high != NO_END) == kind]
        for group in padding_groups([int(jobs[index].frames.shape[1]) for index in indices]):
            members = [indices[member] for member in group]
            if len(members) == 1 and onnx is not None and onnx.accepts(jobs[members[0]]):
                outputs[members[0]] = onnx.step(jobs[members[0]])
                continue
            with runtime.autocast():
                items = [jobs[index] for index in members]
                results = stream_step(network, items, runtime.device, first_width, runtime.weights_dtype)
            for index, result in zip(members, results, strict=False):
                outputs[index] = result
    return outputs  # type: ignore[return-value]
