"""A stream network's float32 steps run by onnxruntime: the workers' path on CPUs without native bf16.

Where oneDNN has no native bf16 (AVX2 CPUs) the workers run float32, and there onnxruntime's CPU
convolutions (and fewer copies around them) compute our streamed networks faster than torch does
(`python -m bench.streaming_cost` compares the two; docs/performance.md, "History", has the numbers).

The streaming itself does not change: each kind of step of one stream (first or not, last or not)
is traced from `libs.models.streaming` (`traced_step`) into a graph of its own, whose inputs are the
new frames (any number of them) and the layer tails, and whose outputs are the new positions and the
new tails, in the order and shapes the torch path keeps them, so a stream may take one step here and
the next in torch. A trace holds for steps that need no padding and no mask
(`OnnxStreamNetwork.accepts`): every step but an empty last one, for a stream that runs alone under
the default schedules. A batch of several streams pads, and stays in torch. Whether a step runs here depends only on its
frame indices, so a stream resumed from its first frame makes the very same calls and its samples
stay bit-identical.

A step much wider than the core's L2 cache holds runs as consecutive slices of a few frames, each
through the same graph with the tails the one before it left (`slice_frames`): the convolutions then
read activations the cache still holds, instead of streaming layer after layer through memory. A
128-frame step of the default voice's vocoder has some 4 MB of activation per layer at its last
stage; in 16-frame slices the same step costs about a tenth less CPU (docs/performance.md,
"History"). A slice moves samples by float32 round-off, so the width is part of the engine's model
version, and it is fixed by the network and the cache size alone, never by the load.

Graphs are cached on disk next to the text side's (`libs.models.onnx_encoder`), keyed by the code
traced, the network's structure and weights, and the torch and onnxruntime versions; a graph, cached
or just exported, is used only once it reproduces torch's step on a probe stream of other widths.
"""

from __future__ import annotations

import contextlib
import hashlib
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import numpy as np
import torch
from torch import nn

from libs.models import streaming
from libs.models.onnx_encoder import ONNX_OPSET, arena_shrinking_run, export_graph, load_cached_session
from libs.models.onnx_providers import execution_providers, inference_session
from libs.models.piper_import import default_cache_dir
from libs.models.streaming import (
    NO_END,
    StepInput,
    StepOutput,
    StreamNetwork,
    activation_values_per_frame,
    output_geometry,
    stream_step,
    traced_step,
)

STREAM_GRAPH_FORMAT_VERSION: Final = 1
"""Part of every cached step graph's key and file name: bump it when the export itself changes
(a change to `libs.models.streaming` changes the key by itself)."""
FRAMES_NAME: Final = "frames"
VALUES_NAME: Final = "values"
LATER_STEP_START: Final = 1 << 20
"""Start frame of the later steps traced: far enough from the first that no position is masked."""
PROBE_SEED: Final = 11
ACTIVATION_COPIES: Final = 4
"""Copies of a layer's activation that a step touches together: the input joined to its tail, the
input activated, the convolution's output and the residual sum. A slice is as wide as keeps four such
copies of the network's widest layer within the core's L2 cache."""
MIN_SLICE_FRAMES: Final = 16
"""No slice is narrower: every call also passes every tail in and out, which narrower slices repeat
more often than the cache saves."""
DEFAULT_L2_CACHE_BYTES: Final = 1 << 20
"""The L2 cache assumed where the system does not say (1 MiB: most server cores have at least that)."""
CPU_CACHE_DIR: Final = Path("/sys/devices/system/cpu/cpu0/cache")


@dataclass(frozen=True)
class StepKind:
    """Which of a stream's steps a graph computes: they differ at the sentence's two edges."""

    first: bool
    """The stream's first step: every layer starts from its left zero padding (no tails in)."""
    last: bool
    """The stream's last step: every layer ends with its right zero padding (no tails out)."""

    @property
    def name(self) -> str:
        return {(True, False): "first", (False, False): "later", (False, True): "last", (True, True): "only"}[(self.first, self.last)]


STEP_KINDS: Final = (StepKind(True, False), StepKind(False, False), StepKind(False, True), StepKind(True, True))


def step_kind(item: StepInput) -> StepKind:
    """The kind of `item`'s step."""
    return StepKind(item.state is None, item.high != NO_END)


class _StepGraph(nn.Module):
    """One kind of step as a module to trace: (frames [1, channels, n], *tails) -> (values [1, out, m], *new tails)."""

    def __init__(self, network: StreamNetwork, kind: StepKind, first_width: int) -> None:
        super().__init__()
        self.network = network  # not an nn.Module: its weights are traced as constants, once
        self.kind = kind
        self.first_width = first_width

    def forward(self, frames: torch.Tensor, *tails: torch.Tensor) -> tuple[torch.Tensor, ...]:
        start = 0 if self.kind.first else LATER_STEP_START
        # A plain number (the trace fixes it): it only tells the step where its real frames end.
        high = start + int(frames.size(-1)) if self.kind.last else NO_END
        item = StepInput(frames[0], start=start, low=0, high=high, state=None if self.kind.first else list(tails))
        values, new_tails = traced_step(self.network, item, self.first_width)
        return (values.unsqueeze(0), *new_tails)


class OnnxStreamNetwork:
    """A `StreamNetwork`'s float32 steps of one stream, in onnxruntime; `accepts` says which steps."""

    def __init__(self, sessions: dict[StepKind, Any], lag: int, scale: int, first_width: int, slice_frames: int | None = None) -> None:
        self._sessions = sessions
        """A session per kind of step that runs here; the other kinds stay in torch."""
        self.lag = lag
        """Output positions the output lags behind the input (`output_geometry`)."""
        self.scale = scale
        """Output positions per input frame."""
        self.first_width = first_width
        """Fewest frames of a first step that is not also the last (the torch path pads narrower ones)."""
        self.slice_frames = slice_frames
        """The fewest frames of a slice: a step that is not a stream's first runs in as many equal slices
        as are at least this wide (a step less than twice as wide runs whole); None: every step whole."""

    @classmethod
    def load(
        cls,
        network: StreamNetwork,
        name: str,
        channels: int,
        first_width: int,
        threads: int = 1,
        kinds: tuple[StepKind, ...] = STEP_KINDS,
        cache_dir: str | Path | None = None,
        device: str | torch.device = "cpu",
        sliced: bool = False,
    ) -> OnnxStreamNetwork:
        """Graphs of the `kinds` of step of `network` (input `channels`, first steps at least
        `first_width` frames) on `threads` threads each and onnxruntime's providers for `device`,
        from the cache when good copies are there, else exported and cached under `name`. Several
        streams may run steps at once.

        Every graph holds its own copy of the weights, so a kind of step that is rare can be left to
        torch. `sliced` (on a CPU, with graphs of later steps): steps wider than `slice_width` gives
        for the network and the core's cache run in slices.
        """
        execution_providers(device)  # a device onnxruntime cannot run on fails here, before any export
        lag, scale = output_geometry(network, channels, torch.device("cpu"))
        probe = _ProbeStream.run(network, channels, first_width)
        tail_shapes = [tuple(tail.shape) for tail in probe.outputs[StepKind(True, False)].state]
        folder = Path(cache_dir).expanduser() if cache_dir else default_cache_dir()
        stem, key = f"stream-{name}", f"{_network_key(network, first_width)[:16]}-{_code_key()[:16]}"
        sessions = {}
        for kind in kinds:
            path = folder / f"{stem}-{kind.name}-{key}.v{STREAM_GRAPH_FORMAT_VERSION}.onnx"
            sessions[kind], _, exported = load_cached_session(
                path,
                lambda kind=kind: _export(network, kind, channels, first_width, tail_shapes),
                lambda session, kind=kind: probe.error(session, kind),
                f"{name} {kind.name} step graph",
                lambda source: stream_session(source, threads, device),
            )
            if exported:
                _remove_older_graphs(path)
        slice_frames = None
        if sliced and torch.device(device).type == "cpu" and StepKind(False, False) in sessions:
            slice_frames = slice_width(activation_values_per_frame(network, channels, torch.device("cpu"), first_width), l2_cache_bytes())
        return cls(sessions, lag, scale, first_width, slice_frames)

    def accepts(self, item: StepInput) -> bool:
        """Whether `item`'s step runs here: float32, no speaker input, and no position to pad or mask."""
        width = int(item.frames.shape[1])
        kind = step_kind(item)
        if kind not in self._sessions or item.g is not None or item.frames.dtype != torch.float32 or width < 1:
            return False
        if kind.last and item.high != item.start + width:
            return False  # padded past the end: the torch path masks the padding
        if kind.first:
            return item.start == item.low and (kind.last or width >= self.first_width)
        return (item.start - item.low) * self.scale >= self.lag  # no layer reaches back before the first frame

    def step(self, item: StepInput) -> StepOutput:
        """`item`'s step (one that `accepts`), as `libs.models.streaming.stream_step` gives it to round-off.

        A step wider than `slice_frames` runs slice by slice, each slice's tails feeding the next; a
        stream's first step runs whole (it is narrow, and its graph computes no positions before the
        first frame, which slices would give up)."""
        width = int(item.frames.shape[1])
        bounds = [(0, width)] if item.state is None else self.slice_bounds(width)
        if len(bounds) == 1:
            return self._step(item)
        values: list[torch.Tensor] = []
        first_position, state = 0, item.state
        for index, (begin, end) in enumerate(bounds):
            high = item.high if end == width else NO_END
            output = self._step(StepInput(item.frames[:, begin:end], item.start + begin, item.low, high, state))
            if index == 0:
                first_position = output.first_position
            values.append(output.values)
            state = output.state
        return StepOutput(torch.cat(values, dim=-1), first_position, state)

    def slice_bounds(self, width: int) -> list[tuple[int, int]]:
        """The frames [begin, end) of a later step `width` frames wide (relative to its first) that each
        of its slices covers: as many equal slices as are at least `slice_frames` wide, or the whole step
        in one (less than twice a slice wide, or no slices). A stream's first step always runs whole.
        Fixed by the width alone, so a caller that runs the slices one by one as steps of their own
        (`VocoderStream.in_parts`) makes the very same calls as `step`."""
        if self.slice_frames is None or width < 2 * self.slice_frames:
            return [(0, width)]
        count = width // self.slice_frames
        return [(width * index // count, width * (index + 1) // count) for index in range(count)]

    def _step(self, item: StepInput) -> StepOutput:
        kind = step_kind(item)
        wide = int(item.frames.shape[1]) >= SHRINK_FROM_FRAMES
        outputs = self._sessions[kind].run(None, _feeds(item), arena_shrinking_run() if wide else None)
        first_position = item.start * self.scale - (0 if kind.first else self.lag)
        return StepOutput(torch.from_numpy(outputs[0][0]), first_position, [torch.from_numpy(tail) for tail in outputs[1:]])


SHRINK_FROM_FRAMES: Final = 256
"""A step this wide or wider hands the shared arena's unused memory back when it ends (a cached
sentence or a late chunk brings up to 1,024 frames, which a 3-frame step never needs again); the
narrow steps of a stream's steady state reuse what the arena holds, without allocating anew."""

_arena_lock = threading.Lock()
_arena_registered = False


def stream_session(model: str | Path | bytes, threads: int = 1, device: str | torch.device = "cpu") -> Any:
    """An onnxruntime session for step graphs on the providers of `device` (`execution_providers`),
    on `threads` threads, allocating host memory from one arena shared by every such session of the
    process.

    Each session would otherwise keep an arena as large as the most its calls ever held at once, and
    a memory pattern per step width: several graphs of one network would each hold their own, about
    twice the memory of one shared arena without patterns, at the same speed.
    """
    import onnxruntime

    global _arena_registered
    with _arena_lock:
        if not _arena_registered:
            memory = onnxruntime.OrtMemoryInfo("Cpu", onnxruntime.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0, onnxruntime.OrtMemType.DEFAULT)
            # Grow by what is asked, not to the next power of two.
            onnxruntime.create_and_register_allocator(memory, onnxruntime.OrtArenaCfg({"arena_extend_strategy": 1}))
            _arena_registered = True
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "1")
    options.add_session_config_entry("session.force_spinning_stop", "1")
    options.add_session_config_entry("session.use_env_allocators", "1")
    options.enable_mem_pattern = False
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
    return inference_session(model, options, device)


def l2_cache_bytes(cache_dir: Path = CPU_CACHE_DIR) -> int:
    """The L2 cache of one core, in bytes, as the system lists it; DEFAULT_L2_CACHE_BYTES where it
    lists none."""
    for index in sorted(cache_dir.glob("index*")):
        try:
            level = (index / "level").read_text(encoding="ascii").strip()
            kind = (index / "type").read_text(encoding="ascii").strip()
            size = (index / "size").read_text(encoding="ascii").strip().upper()
        except OSError:
            continue
        if level != "2" or kind not in ("Unified", "Data"):
            continue
        scale = {"K": 1 << 10, "M": 1 << 20}.get(size[-1:], 1)
        digits = size[:-1] if size[-1:] in ("K", "M") else size
        if digits.isdigit() and int(digits) > 0:
            return int(digits) * scale
    return DEFAULT_L2_CACHE_BYTES


def slice_width(values_per_frame: int, cache_bytes: int) -> int:
    """Frames of a slice: as many as keep ACTIVATION_COPIES float32 copies of the widest layer
    (`values_per_frame` per frame) within `cache_bytes`, and at least MIN_SLICE_FRAMES."""
    return max(MIN_SLICE_FRAMES, cache_bytes // (ACTIVATION_COPIES * 4 * max(1, values_per_frame)))


def _feeds(item: StepInput) -> dict[str, np.ndarray]:
    # Host arrays on either provider (the steps' tensors are CPU tensors: this backend runs only for
    # a CPU engine). On the CUDA provider onnxruntime copies them to the device and every output
    # back, for every step of every stream; were that to matter, IO binding (`session.io_binding()`,
    # the tails kept as device OrtValues from one step to the next) would move only the new frames.
    feeds = {FRAMES_NAME: np.ascontiguousarray(item.frames.detach().numpy()[None])}
    for index, tail in enumerate(item.state or ()):
        # Tails from the torch path are channels-last views; onnxruntime reads plain row-major arrays.
        feeds[_tail_name(index)] = np.ascontiguousarray(tail.detach().numpy())
    return feeds


def _tail_name(index: int, new: bool = False) -> str:
    return f"{'new_' if new else ''}tail_{index}"


def _export(network: StreamNetwork, kind: StepKind, channels: int, first_width: int, tail_shapes: list[tuple[int, ...]]) -> bytes:
    """The graph of `kind`'s steps, traced over a width no probe uses, dynamic in the frames."""
    frames = torch.randn(1, channels, first_width + 16 if kind.first and not kind.last else 24, generator=torch.Generator().manual_seed(0))
    tails = () if kind.first else tuple(torch.zeros(shape) for shape in tail_shapes)
    inputs = (FRAMES_NAME, *(_tail_name(index) for index in range(len(tails))))
    outputs = (VALUES_NAME, *(() if kind.last else (_tail_name(index, new=True) for index in range(len(tail_shapes)))))
    axes = {FRAMES_NAME: {2: "frames"}, VALUES_NAME: {2: "positions"}}
    return export_graph(_StepGraph(network, kind, first_width), (frames, *tails), inputs, outputs, axes)


@dataclass
class _ProbeStream:
    """A short stream of random frames through torch, one step of each kind, to check graphs against."""

    inputs: dict[StepKind, StepInput]
    outputs: dict[StepKind, StepOutput]

    @classmethod
    def run(cls, network: StreamNetwork, channels: int, first_width: int) -> _ProbeStream:
        # Widths unlike the traced ones (an export that fixed a width fails here), one stream of
        # first + later + last steps, and a sentence that is a single step.
        first, later, last, only = first_width + 5, 23, 19, 13
        frames = torch.randn(channels, first + later + last, generator=torch.Generator().manual_seed(PROBE_SEED))
        total = frames.size(1)
        cpu = torch.device("cpu")
        inputs: dict[StepKind, StepInput] = {}
        outputs: dict[StepKind, StepOutput] = {}
        state = None
        for kind, begin, end in ((STEP_KINDS[0], 0, first), (STEP_KINDS[1], first, first + later), (STEP_KINDS[2], first + later, total)):
            inputs[kind] = StepInput(frames[:, begin:end], begin, 0, total if kind.last else NO_END, state)
            outputs[kind] = stream_step(network, [inputs[kind]], cpu, first_width)[0]
            state = outputs[kind].state
        inputs[STEP_KINDS[3]] = StepInput(frames[:, :only], 0, 0, only, None)
        outputs[STEP_KINDS[3]] = stream_step(network, [inputs[STEP_KINDS[3]]], cpu, first_width)[0]
        return cls(inputs, outputs)

    def error(self, session: Any, kind: StepKind) -> float:
        """Largest |onnxruntime - torch| over the values and new tails of `kind`'s probe step, relative
        to the largest |torch| value of each where that is above 1 (float32 round-off grows with the
        magnitude: an untrained voice's tails can run far above a trained one's)."""
        outputs = session.run(None, _feeds(self.inputs[kind]))
        expected = self.outputs[kind]
        if len(outputs) != 1 + len(expected.state) or outputs[0][0].shape != tuple(expected.values.shape):
            return float("inf")
        pairs = [(outputs[0][0], expected.values), *zip(outputs[1:], expected.state, strict=False)]
        return max(_relative_error(output, reference.numpy()) for output, reference in pairs)


def _relative_error(output: np.ndarray, reference: np.ndarray) -> float:
    if output.shape != reference.shape:
        return float("inf")
    if reference.size == 0:
        return 0.0
    return float(np.abs(output - reference).max()) / max(1.0, float(np.abs(reference).max()))


def _remove_older_graphs(path: Path) -> None:
    """Delete the graphs of the same network and kind that older code or versions exported (a
    file name differs from `path` only after the network's part of the key), so the cache does not
    grow with every change to the code."""
    network_part = path.name[: path.name.rindex("-")]
    for older in path.parent.glob(f"{network_part}-*.onnx"):
        if older != path:
            with contextlib.suppress(OSError):  # another process may have removed it first
                older.unlink()


def _code_key() -> str:
    """Hex digest of how graphs are made: the code traced, the export's format, the opset and the
    torch and onnxruntime versions."""
    import onnxruntime

    digest = hashlib.sha256()
    # The source, not only the numbers: the probe would pass a graph traced from older code that
    # computes the same values in more operations.
    digest.update(Path(streaming.__file__).read_bytes())
    digest.update(repr((STREAM_GRAPH_FORMAT_VERSION, ONNX_OPSET, torch.__version__, onnxruntime.__version__)).encode("utf-8"))
    return digest.hexdigest()


def _network_key(network: StreamNetwork, first_width: int) -> str:
    """Hex digest of the network a graph computes: its modules' structure, settings and weights,
    and the first step's width."""
    digest = hashlib.sha256()
    configs = [repr(getattr(module, "config", None)) for module in network.modules.modules()]
    digest.update(repr((first_width, repr(network.modules), configs)).encode("utf-8"))
    for name, tensor in sorted(network.modules.state_dict().items()):
        digest.update(f"{name}:{tensor.dtype}:{tuple(tensor.shape)}".encode())
        digest.update(tensor.detach().to("cpu", torch.float32).contiguous().numpy())
    return digest.hexdigest()
