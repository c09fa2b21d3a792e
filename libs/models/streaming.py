"""Stateful streaming of convolution networks: each step computes only new frames, never context again.

Two networks stream this way: the mel vocoder (mel adapter + HiFi-GAN generator) and the acoustic
side after the durations (the VITS flow in reverse + the mel head).

Every convolution runs "valid" (no padding) over the tail of its previous input joined to the new
input, and keeps the new tail for the next step; a transposed convolution keeps the input frames
whose output it still overlaps; a residual branch is delayed to line up with the branch beside it
(a residual block's skip takes its held-back positions from the joined input of the block's first
convolution, so it keeps no tail of its own).
Each operation therefore turns n new positions into n new positions (times its stride), lagging
behind by a fixed number of positions, and a step of n mel frames costs n frames of compute.

Whole-sequence inference zero-pads every convolution's input at the sequence's edges. A stream
does the same at both ends: its first step starts each convolution from just its left zero
padding (so nothing before the first frame is computed), its last step ends each one with its
right zero padding (so the lag comes out without any extra frames), and every convolution's input
is masked to the positions of real frames, [low, high). The samples are therefore those of
whole-sequence vocoding, up to float round-off from the different lengths.

A batch of streams runs as one call: every item brings its own tails and real frame count, and is
padded to the longest; an item's outputs and new tails come only from its real frames. One
stream's step that needs no padding and no mask also traces into a graph (`traced_step`), which
`libs.models.onnx_stream` runs in onnxruntime with the same tails.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from libs.models.commons import gated_activation
from libs.models.hifigan import Generator, ResBlock1, ResBlock2
from libs.models.mel_bridge import LEAKY_RELU_SLOPE, ConvStack, MelVocoder, ResidualBlock
from libs.models.modules import WN, Flip, ResidualCouplingLayer
from libs.models.vits import ResidualCouplingBlock

NO_END = 2**40
"""`high` of a stream whose last frame has not arrived yet."""

# Activations are [B, C, 1, W] in channels-last memory, so oneDNN convolves them in place instead of
# reordering them on every call; the vocoder's long, narrow layers gain most.
MEMORY_FORMAT = torch.channels_last

LAG_PROBE_FRAMES = 256
"""Frames of the probe that measures a network's lag (more than any vocoder's receptive field)."""
WIDTH_PROBE_FRAMES = 16
"""Frames of the narrower of the two later steps that measure a network's widest layer per frame."""

StreamState = list[torch.Tensor]
"""One stream's tails, in the fixed order the operations take them."""
ConvWeights = dict[nn.Module, tuple[torch.Tensor, "torch.Tensor | None"]]
"""Convolution modules' (channels-last kernel, bias) in one dtype."""
PackedKernels = dict[tuple[nn.Module, torch.Size], torch.Tensor]
"""Convolution kernels laid out once by oneDNN for one exact input shape, by (module, input shape)."""


@dataclass(frozen=True)
class StepInput:
    """One stream's part of a step."""

    frames: torch.Tensor
    """New input frames [channels, n] (n >= 1, or n >= 0 in a last step)."""
    start: int
    """Sentence frame index of frames[:, 0]."""
    low: int
    """First real frame: inputs before it are the sequence's zero padding."""
    high: int
    """One past the last real frame, or NO_END while the sentence goes on; a step with an end is
    the stream's last, and returns every remaining sample."""
    state: StreamState | None
    """Tails from the previous step; None before the first."""
    g: torch.Tensor | None = None
    """Speaker conditioning [gin, 1] of a multi-speaker voice, or None."""


@dataclass
class _Signal:
    """An activation of a batch: [B, C, 1, N] (channels-last) whose column j holds position
    first_b + j for item b."""

    data: torch.Tensor
    lag: int
    """How far column 0 lies behind the step's first input position, in positions at `scale`."""
    scale: int
    """Positions per input frame (1 at frame rate, hop length at the output)."""


class _Step:
    """The state and the bookkeeping of one batched step, shared by every operation in it.

    A batch of first steps (no tails yet) computes no position before the first real frame: each
    convolution starts from just its left zero padding instead of a whole tail of zeros, so
    its output starts at the first real position and is shorter by the positions it lags. A last
    step ends each convolution with its right zero padding, so its output runs to the end. Other
    steps are uniform: n positions in, n out, each lagging by what the operation needs.
    """

    def __init__(
        self,
        items: Sequence[StepInput],
        first_width: int,
        weights: ConvWeights,
        packed: PackedKernels | None = None,
    ) -> None:
        self.first = all(item.state is None for item in items)
        self.last = all(item.high != NO_END for item in items)
        if any((item.state is None) != self.first or (item.high != NO_END) != self.last for item in items):
            raise ValueError("a batch holds steps of one kind: first or not, last or not")
        self.counts = [int(item.frames.shape[1]) for item in items]
        # A first step shorter than the lag would leave some layer nothing to compute: pad it.
        self.width = max(max(self.counts), first_width if self.first and not self.last else 0)
        self.starts = [item.start for item in items]
        self.lows = [item.low for item in items]
        self.highs = [item.high for item in items]
        self.weights = weights
        self.packed = packed
        """Kernels packed for this step's exact shapes (filled on first use), or None for plain calls."""
        self.old_states = [item.state for item in items]
        self.new_states: list[StreamState] = [[] for _ in items]
        self._slot = 0
        self.masked_any = False
        """Whether some operation masked positions (a step traced into a graph must not: its mask
        would hold for that step's frame indices only)."""
        self.widest = 0
        """Values per item of the widest input any convolution of the step took (channels x positions)."""

    def zeros(self, x: torch.Tensor, width: int) -> torch.Tensor:
        """Zero positions (edge padding) for every item of x."""
        # Plain numbers: a traced step (always one stream) then holds constant zeros, not shape arithmetic.
        return x.new_zeros(int(x.size(0)), int(x.size(1)), 1, width).contiguous(memory_format=MEMORY_FORMAT)

    def valid(self, index: int, signal_width: int, scale: int) -> int:
        """Real (unpadded) positions of item `index` in a signal `signal_width` wide at `scale`."""
        return signal_width - (self.width - self.counts[index]) * scale

    def first_position(self, index: int, signal: _Signal) -> int:
        """Position of column 0 of `signal` for item `index`."""
        return self.starts[index] * signal.scale - (0 if self.first else signal.lag)

    def masked(self, signal: _Signal) -> torch.Tensor:
        """The signal with positions outside each item's real frames zeroed (the edge padding)."""
        x, scale = signal.data, signal.scale
        width = x.size(-1)
        firsts = [self.first_position(index, signal) for index in range(len(self.starts))]
        if all(first >= low * scale and first + width <= high * scale for first, low, high in zip(firsts, self.lows, self.highs, strict=False)):
            return x
        self.masked_any = True
        positions = torch.arange(width, device=x.device)
        rows = [
            (positions + first >= low * scale) & (positions + first < high * scale)
            for first, low, high in zip(firsts, self.lows, self.highs, strict=False)
        ]
        return x * torch.stack(rows)[:, None, None, :].to(x.dtype)

    def joined(self, x: torch.Tensor, scale: int, keep: int, first_tail: int, end_padding: int) -> torch.Tensor:
        """x after the previous tail (`keep` positions; `first_tail` zeros in a first step) and, in a
        last step, before `end_padding` zeros; stores each item's new tail, its last `keep` real
        positions (zeros before the start)."""
        if keep == 0 and not (self.last and end_padding):
            return x
        parts = [x]
        if keep:
            slot = self._slot
            self._slot += 1
            if not self.first:
                tails = [old[slot] for old in self.old_states]
                parts.insert(0, (torch.cat(tails) if len(tails) > 1 else tails[0]).to(x.dtype))
            elif first_tail:
                parts.insert(0, self.zeros(x, first_tail))
        if self.last and end_padding:
            parts.append(self.zeros(x, end_padding))
        joined = torch.cat(parts, dim=-1).contiguous(memory_format=MEMORY_FORMAT) if len(parts) > 1 else x
        if keep and not self.last:  # a last step leaves no tails behind
            lead = first_tail if self.first else keep
            for index, state in enumerate(self.new_states):
                if self.counts[index] == self.width and lead + x.size(-1) >= keep:
                    # No padding: the tail ends where the joined input does. Counted from the end, it
                    # traces into a graph that holds for any step width (libs.models.onnx_stream).
                    tail = joined[..., -keep:][index : index + 1]  # narrow first: a graph copies what it slices
                else:
                    end = lead + self.valid(index, x.size(-1), scale)
                    tail = joined[index : index + 1, :, :, max(0, end - keep) : max(0, end)]
                    if tail.size(-1) < keep:
                        tail = F.pad(tail, (keep - tail.size(-1), 0))
                state.append(tail.clone(memory_format=MEMORY_FORMAT))
        return joined

    def conv(self, conv: nn.Conv1d, signal: _Signal) -> _Signal:
        """A symmetric-padding convolution, run valid over its kept input tail (and, in a last step,
        its right zero padding)."""
        halo = conv.dilation[0] * (conv.kernel_size[0] - 1)
        joined = self.joined(self.masked(signal), signal.scale, halo, halo // 2, halo // 2)
        return _Signal(self.conv2d(conv, joined, conv.dilation[0]), signal.lag + halo // 2, signal.scale)

    def residual_conv(self, conv: nn.Conv1d, signal: _Signal, slope: float | None) -> tuple[_Signal, _Kept]:
        """The first convolution of a residual branch, over the signal leaky-ReLU'd with `slope`
        (None: as it is), and the signal kept for the branch's residual add (`residual`).

        The signal is joined to its tail once, before the activation, and that one joined input also
        gives the residual its held-back positions: no second tail, no second join (in a traced
        graph each join is a copy of the whole activation).
        """
        halo = conv.dilation[0] * (conv.kernel_size[0] - 1)
        joined = self.joined(self.masked(signal), signal.scale, halo, halo // 2, halo // 2)
        activated = joined if slope is None else F.leaky_relu(joined, slope)
        output = _Signal(self.conv2d(conv, activated, conv.dilation[0]), signal.lag + halo // 2, signal.scale)
        return output, _Kept(joined, signal.lag, halo)

    def residual(self, kept: _Kept, branch: _Signal) -> _Signal:
        """`branch` plus the signal `residual_conv` kept, held back to line up with the branch (as
        `delay` would hold it back, from the joined input's columns instead of a tail of its own)."""
        positions = branch.lag - kept.lag
        if not 0 <= positions <= kept.halo:
            raise ValueError(f"a residual branch lagging {positions} positions needs more than the {kept.halo} kept")
        # Columns of the joined input: a first step has halo // 2 zeros before the signal and holds
        # nothing back; a later one has the whole tail and takes `positions` of it; a last step has
        # halo // 2 zeros after the signal and lets everything out.
        begin = kept.halo // 2 if self.first else kept.halo - positions
        cut = kept.halo // 2 if self.last else positions
        held = kept.joined[..., begin:-cut] if cut else kept.joined[..., begin:]
        return _pointwise(branch, held + branch.data)

    def conv_transpose(self, up: nn.ConvTranspose1d, signal: _Signal) -> _Signal:
        """An upsampling transposed convolution: each new frame's output slots, completed by the kept frames."""
        stride, kernel, padding = up.stride[0], up.kernel_size[0], up.padding[0]
        keep = math.ceil(kernel / stride) - 1
        joined = self.joined(self.masked(signal), signal.scale, keep, keep, 0)
        full = self.conv_transpose2d(up, joined, stride)
        # Slots of the new frames; a first step drops the `padding` outputs before position 0, and
        # a last step keeps the `padding` outputs past the last slot, up to the end. The last new
        # slot ends `kernel - stride` before the end of `full` (counted from the end: any width).
        begin = keep * stride + (padding if self.first else 0)
        cut = kernel - stride - (padding if self.last else 0)
        kept = full[..., begin:-cut] if cut > 0 else full[..., begin:]
        return _Signal(kept, signal.lag * stride + padding, signal.scale * stride)

    def parameters(self, module: nn.Module) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The module's weight (as a [out, in, 1, k] channels-last kernel) and bias."""
        return self.weights[module]

    def pointwise_conv(self, conv: nn.Conv1d, signal: _Signal) -> _Signal:
        """A 1x1 convolution: it mixes no positions, so it needs no tail and no mask."""
        return _pointwise(signal, self.conv2d(conv, signal.data, 1))

    def conv2d(self, conv: nn.Conv1d, x: torch.Tensor, dilation: int) -> torch.Tensor:
        """`conv` run valid over x [B, C, 1, W], on the step's packed kernel when it has them."""
        self._note_width(x)
        weight, bias = self.parameters(conv)
        if self.packed is None:
            return F.conv2d(x, weight, bias, dilation=(1, dilation))
        packed = self._packed_kernel(
            conv,
            x,
            lambda: torch._C._nn.mkldnn_reorder_conv2d_weight(
                weight.contiguous().to_mkldnn(), [0, 0], [1, 1], [1, dilation], 1, list(x.shape)
            ),
        )
        # Autocast does not reach the packed ops: cast the input as it does for F.conv2d.
        return torch.ops.mkldnn._convolution_pointwise(
            x.to(weight.dtype), packed, bias, [0, 0], [1, 1], [1, dilation], 1, "none", [], ""
        )

    def conv_transpose2d(self, up: nn.ConvTranspose1d, x: torch.Tensor, stride: int) -> torch.Tensor:
        """`up` over x [B, C, 1, W] with no padding (the caller trims), on the step's packed kernel when it has them."""
        self._note_width(x)
        weight, bias = self.parameters(up)
        if self.packed is None:
            return F.conv_transpose2d(x, weight, bias, stride=(1, stride))
        packed = self._packed_kernel(
            up,
            x,
            lambda: torch.ops.mkldnn._reorder_convolution_transpose_weight(
                weight.contiguous(), [0, 0], [0, 0], [1, stride], [1, 1], 1, list(x.shape)
            ),
        )
        return torch.ops.mkldnn._convolution_transpose_pointwise(
            x.to(weight.dtype), packed, bias, [0, 0], [0, 0], [1, stride], [1, 1], 1, "none", [], ""
        )

    def _note_width(self, x: torch.Tensor) -> None:
        # Plain numbers, as in `zeros`: a traced step records no arithmetic for them.
        self.widest = max(self.widest, int(x.size(1)) * int(x.size(-1)))

    def _packed_kernel(self, module: nn.Module, x: torch.Tensor, pack: Callable[[], torch.Tensor]) -> torch.Tensor:
        """The module's kernel packed for x's shape: from the step's packed kernels, packed now if new."""
        assert self.packed is not None
        key = (module, x.shape)
        if key not in self.packed:
            self.packed[key] = pack()
        return self.packed[key]

    def delay(self, signal: _Signal, positions: int) -> _Signal:
        """The signal held back by `positions`, to line up with a branch that lags that much more
        (a last step lets the held-back positions out too)."""
        joined = self.joined(signal.data, signal.scale, positions, 0, 0)
        held = joined if self.last or positions == 0 else joined[..., :-positions]
        return _Signal(held, signal.lag + positions, signal.scale)


@dataclass
class _Kept:
    """A residual branch's input, joined to its tail once (`_Step.residual_conv`)."""

    joined: torch.Tensor
    lag: int
    """The signal's lag before the join."""
    halo: int
    """Positions of tail joined in a later step (the first convolution's reach)."""


def _pointwise(signal: _Signal, data: torch.Tensor) -> _Signal:
    return _Signal(data, signal.lag, signal.scale)


def _add_aligned(step: _Step, skip: _Signal, branch: _Signal) -> _Signal:
    skip = step.delay(skip, branch.lag - skip.lag)
    return _pointwise(branch, skip.data + branch.data)


def _conv_stack(step: _Step, stack: ConvStack, signal: _Signal) -> _Signal:
    """`ConvStack.forward`, streamed."""
    mean, std = stack.input_mean.unsqueeze(-1), stack.input_std.unsqueeze(-1)
    x = step.conv(stack.conv_in, _pointwise(signal, (signal.data - mean) / std))
    for block in stack.blocks:
        x = _residual_block(step, block, x)
    x = step.conv(stack.conv_out, _pointwise(x, F.leaky_relu(x.data, LEAKY_RELU_SLOPE)))
    return _pointwise(x, x.data * stack.output_std.unsqueeze(-1) + stack.output_mean.unsqueeze(-1))


def _residual_block(step: _Step, block: ResidualBlock, x: _Signal) -> _Signal:
    h, kept = step.residual_conv(block.dilated, x, LEAKY_RELU_SLOPE)
    h = step.pointwise_conv(block.pointwise, _pointwise(h, F.leaky_relu(h.data, LEAKY_RELU_SLOPE)))
    return step.residual(kept, h)


def _resblock(step: _Step, block: nn.Module, x: _Signal, slope: float) -> _Signal:
    if isinstance(block, ResBlock1):
        for dilated, plain in zip(block.convs1, block.convs2, strict=False):
            h, kept = step.residual_conv(dilated, x, slope)
            h = step.conv(plain, _pointwise(h, F.leaky_relu(h.data, slope)))
            x = step.residual(kept, h)
        return x
    if isinstance(block, ResBlock2):
        for conv in block.convs:
            h, kept = step.residual_conv(conv, x, slope)
            x = step.residual(kept, h)
        return x
    raise TypeError(f"no streaming form for residual block {type(block).__name__}")


def _generator(step: _Step, generator: Generator, x: _Signal, g: torch.Tensor | None) -> _Signal:
    """`Generator.forward`, streamed; `g` [B, gin, 1, 1] conditions a multi-speaker generator."""
    config = generator.config
    x = step.conv(generator.conv_pre, x)
    if config.gin_channels:
        if g is None:
            raise ValueError("a speaker-conditioned generator needs each stream's speaker conditioning (StepInput.g)")
        # The same bias at every position: where the next layer's input is edge padding it is masked away.
        x = _pointwise(x, x.data + generator.cond(g[..., 0].float()).to(x.data.dtype).unsqueeze(2))
    for stage, up in enumerate(generator.ups):
        x = step.conv_transpose(up, _pointwise(x, F.leaky_relu(x.data, config.lrelu_slope)))
        blocks = generator.resblocks[stage * generator.num_kernels : (stage + 1) * generator.num_kernels]
        outputs = [_resblock(step, block, x, config.lrelu_slope) for block in blocks]
        lag = max(output.lag for output in outputs)
        total = None
        for output in outputs:
            aligned = step.delay(output, lag - output.lag)
            total = aligned.data if total is None else total + aligned.data
        x = _Signal(total / generator.num_kernels, lag, x.scale)
    x = step.conv(generator.conv_post, _pointwise(x, F.leaky_relu(x.data, config.post_lrelu_slope)))
    return _pointwise(x, torch.tanh(x.data))


def _coupling_reverse(step: _Step, layer: ResidualCouplingLayer, x: _Signal, g: torch.Tensor | None) -> _Signal:
    """`ResidualCouplingLayer.forward(reverse=True)` of a mean-only coupling, streamed."""
    if not layer.mean_only:
        raise ValueError("streaming supports mean-only coupling layers (those of VITS and Piper voices)")
    half = layer.half_channels
    h = step.pointwise_conv(layer.pre, _pointwise(x, x.data[:, :half]))
    mean = step.pointwise_conv(layer.post, _wavenet(step, layer.enc, h, g))
    shifted = step.delay(x, mean.lag - x.lag)
    return _pointwise(mean, torch.cat([shifted.data[:, :half], shifted.data[:, half:] - mean.data], dim=1))


def _wavenet(step: _Step, wavenet: WN, x: _Signal, g: torch.Tensor | None) -> _Signal:
    """`WN.forward`, streamed: the skip outputs of layers that lag more are summed once aligned."""
    hidden = wavenet.hidden_channels
    cond = None
    if g is not None:
        weight, bias = step.parameters(wavenet.cond_layer)
        cond = F.conv2d(g, weight, bias)
    output: _Signal | None = None
    for layer, (in_layer, res_skip) in enumerate(zip(wavenet.in_layers, wavenet.res_skip_layers, strict=False)):
        x_in, kept = step.residual_conv(in_layer, x, None)
        layer_cond = None if cond is None else cond[:, layer * 2 * hidden : (layer + 1) * 2 * hidden]
        acts = step.pointwise_conv(res_skip, _pointwise(x_in, gated_activation(x_in.data, layer_cond, hidden)))
        skip = acts
        if layer < wavenet.n_layers - 1:
            x = step.residual(kept, _pointwise(acts, acts.data[:, :hidden]))
            skip = _pointwise(acts, acts.data[:, hidden:])
        output = skip if output is None else _add_aligned(step, output, skip)
    assert output is not None
    return output


class StreamNetwork:
    """A network a stream runs step by step: `forward(step, x, g)` over one batched step."""

    def __init__(
        self,
        modules: nn.Module,
        forward: Callable[[_Step, _Signal, torch.Tensor | None], _Signal],
    ) -> None:
        self.modules = modules
        self.forward = forward
        self._weights: dict[torch.dtype, ConvWeights] = {}
        self.first_step_width: int | None = None
        """Input frames of a stream's full first step (its schedule's first chunk, plus the lag
        where the engine feeds it): set, such steps run on packed kernels (`packed_first_step`)."""
        self._packed: PackedKernels = {}
        """The full first step's kernels (bf16: the only dtype that packs)."""

    @classmethod
    def vocoder(cls, vocoder: MelVocoder) -> StreamNetwork:
        """Mel -> waveform: the mel adapter (if any) and the HiFi-GAN generator."""

        def forward(step: _Step, x: _Signal, g: torch.Tensor | None) -> _Signal:
            if vocoder.adapter is not None:
                x = _conv_stack(step, vocoder.adapter, x)
            return _generator(step, vocoder.decoder, x, g)

        return cls(vocoder, forward)

    @classmethod
    def latent_to_mel(cls, flow: ResidualCouplingBlock, head: ConvStack) -> StreamNetwork:
        """Prior sample z_p -> mel: the VITS flow in reverse, then the mel head."""
        modules = nn.ModuleList([flow, head])

        def forward(step: _Step, x: _Signal, g: torch.Tensor | None) -> _Signal:
            for layer in reversed(flow.flows):
                if isinstance(layer, Flip):
                    x = _pointwise(x, torch.flip(x.data, [1]))
                elif isinstance(layer, ResidualCouplingLayer) and type(layer) is ResidualCouplingLayer:
                    x = _coupling_reverse(step, layer, x, g)
                else:
                    raise TypeError(f"no streaming form for flow layer {type(layer).__name__}")
            return _conv_stack(step, head, x)

        return cls(modules, forward)

    def weights(self, dtype: torch.dtype) -> ConvWeights:
        """Every convolution's weight as a [out, in, 1, k] channels-last kernel, and its bias, in
        `dtype`, made once per dtype: under bf16 autocast a step would otherwise cast them all again
        on every call."""
        if dtype not in self._weights:
            weights: ConvWeights = {}
            for module in self.modules.modules():
                if isinstance(module, (nn.Conv1d, nn.ConvTranspose1d)):
                    kernel = module.weight.detach().to(dtype).unsqueeze(2).contiguous(memory_format=MEMORY_FORMAT)
                    weights[module] = (kernel, None if module.bias is None else module.bias.detach().to(dtype))
            self._weights[dtype] = weights
        return self._weights[dtype]

    @property
    def packed_kernel_count(self) -> int:
        """Kernels packed so far for full first steps: one per convolution once such a step has run."""
        return len(self._packed)

    def packed_first_step(self, items: Sequence[StepInput], device: torch.device, dtype: torch.dtype) -> PackedKernels | None:
        """The packed kernels for `items` when they are one stream's full first step in bf16 on a
        CPU, else None.

        oneDNN lays a kernel out for the shape it convolves on every F.conv2d call. A full first
        step always has the same shapes (`first_step_width` frames, one stream, not the last step),
        so its kernels are laid out once, on the first such step, and kept: one more copy of the
        weights. It is on the path to first audio, and the packed kernels give the same numbers bit
        for bit (tests/integration/test_streaming_packed_first_step.py). Other steps' shapes vary with sentence lengths and batches; a
        cache of their layouts would grow with every new length, so they stay on F.conv2d. The
        packed calls are torch's own oneDNN operators (those its compiler emits for CPU
        convolutions), so they come with the pinned torch.
        """
        if (
            self.first_step_width is None
            or len(items) != 1
            or items[0].state is not None
            or items[0].high != NO_END
            or int(items[0].frames.shape[1]) != self.first_step_width
            or dtype != torch.bfloat16
            or device.type != "cpu"
            or not torch.backends.mkldnn.is_available()
            or not torch.ops.mkldnn._is_mkldnn_bf16_supported()  # packing bf16 needs native bf16
        ):
            return None
        return self._packed


@dataclass(frozen=True)
class StepOutput:
    """One stream's result of a step."""

    values: torch.Tensor
    """float32 output [channels, positions] for positions first_position ... (some may precede
    `low`, or follow `high`)."""
    first_position: int
    """Position (sentence frame index times the output's positions per frame) of values[:, 0]."""
    state: StreamState
    """Tails for the next step."""


def _forward(
    network: StreamNetwork, items: Sequence[StepInput], device: torch.device, first_width: int, dtype: torch.dtype
) -> tuple[_Step, _Signal]:
    step = _Step(items, first_width, network.weights(dtype), network.packed_first_step(items, device, dtype))
    batch = torch.zeros(len(items), int(items[0].frames.shape[0]), step.width, device=device)
    for row, item in enumerate(items):
        batch[row, :, : item.frames.shape[1]] = item.frames.to(device)
    g = None if items[0].g is None else torch.stack([item.g for item in items]).to(device).unsqueeze(2)
    rows = batch.unsqueeze(2).contiguous(memory_format=MEMORY_FORMAT)
    return step, network.forward(step, _Signal(rows, 0, 1), g)


@torch.inference_mode()
def stream_step(
    network: StreamNetwork,
    items: Sequence[StepInput],
    device: torch.device,
    first_width: int,
    dtype: torch.dtype = torch.float32,
) -> list[StepOutput]:
    """Advance several streams by their new frames in one batched call (steps of one kind: first or
    not, last or not).

    `first_width`: frames a batch of first steps is padded to at least (more than the lag in frames).
    `dtype`: the convolutions' weights (bf16 under bf16 autocast, else float32)."""
    step, y = _forward(network, items, device, first_width, dtype)
    values = y.data[:, :, 0, :].float().cpu()
    width = values.size(-1)
    return [
        StepOutput(values[row, :, : max(0, step.valid(row, width, y.scale))], step.first_position(row, y), step.new_states[row])
        for row in range(len(items))
    ]


def traced_step(network: StreamNetwork, item: StepInput, first_width: int) -> tuple[torch.Tensor, StreamState]:
    """One stream's float32 step as plain tensor operations, for an exporter to trace: (output
    [channels, positions], new tails).

    The trace holds for every step of the same kind (first or not, last or not) and any width, as
    long as the step needs no padding and no mask: a first step at least `first_width` frames wide
    starting at the stream's first real frame, a later one at least the lag past it, a last one
    ending at its last real frame (libs.models.onnx_stream checks this before every call).
    """
    if item.g is not None:
        raise ValueError("a speaker-conditioned step has no traced form")
    step = _Step([item], first_width, network.weights(torch.float32))
    rows = item.frames.unsqueeze(0).unsqueeze(2).contiguous(memory_format=MEMORY_FORMAT)
    y = network.forward(step, _Signal(rows, 0, 1), None)
    if step.masked_any or step.width != step.counts[0]:
        raise ValueError("this step pads or masks positions, so no trace of it holds for other steps")
    return y.data[0, :, 0, :], step.new_states[0]


@torch.inference_mode()
def output_geometry(network: StreamNetwork, channels: int, device: torch.device, g: torch.Tensor | None = None) -> tuple[int, int]:
    """(lag, scale): how many output positions the streamed output lags behind the input, and how
    many output positions each input frame gives (both fixed by the network's shape)."""
    probe = StepInput(torch.zeros(channels, 1), start=0, low=0, high=1, state=None, g=g)
    output = _forward(network, [probe], device, LAG_PROBE_FRAMES, torch.float32)[1]
    return output.lag, output.scale


def activation_values_per_frame(network: StreamNetwork, channels: int, device: torch.device, first_width: int) -> int:
    """Values (channels x positions) that each more frame of a stream's later step adds to the widest
    input of any of the network's convolutions: what a step's memory traffic grows with
    (`libs.models.onnx_stream` sizes its slices of a wide step by it). Two later steps after a first
    step of `first_width` frames (more than the lag), whose difference leaves the tails out."""
    first = StepInput(torch.zeros(channels, first_width), start=0, low=0, high=NO_END, state=None)
    state = stream_step(network, [first], device, first_width)[0].state
    widest = []
    for width in (WIDTH_PROBE_FRAMES, 2 * WIDTH_PROBE_FRAMES):
        later = StepInput(torch.zeros(channels, width), start=first_width, low=0, high=NO_END, state=state)
        with torch.inference_mode():
            widest.append(_forward(network, [later], device, first_width, torch.float32)[0].widest)
    return -(-(widest[1] - widest[0]) // WIDTH_PROBE_FRAMES)


def output_lag(network: StreamNetwork, channels: int, device: torch.device, g: torch.Tensor | None = None) -> int:
    """How many output positions the streamed output lags behind the input (fixed by the network's shape)."""
    return output_geometry(network, channels, device, g)[0]
