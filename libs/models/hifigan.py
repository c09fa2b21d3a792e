"""HiFi-GAN generator (Kong et al. 2020), parameter-compatible with the public checkpoints.

The same generator is the decoder of VITS and Piper voices; the differences (input channels,
weight norm on the outer convolutions, bias of the last one) are settings of `GeneratorConfig`.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any, Final

import torch
from torch import nn
from torch.nn import functional as F

from libs.models.commons import (
    accept_any_weight_norm_form,
    add_weight_norm,
    conv_padding,
    sequence_mask,
    strip_weight_norm,
)

DEFAULT_LRELU_SLOPE: Final = 0.1
# HiFi-GAN, VITS and Piper all call F.leaky_relu without a slope before conv_post, i.e. torch's
# default 0.01 (checked in the exported Piper graph too). Parity depends on keeping it.
DEFAULT_POST_LRELU_SLOPE: Final = 0.01
OUTER_KERNEL_SIZE: Final = 7
INIT_STD: Final = 0.01


@dataclass(frozen=True)
class GeneratorConfig:
    """Shape of a HiFi-GAN generator; the field names follow the public config.json."""

    resblock: str = "1"
    """Residual block type: "1" (conv pairs, V1/V2) or "2" (single convs, V3)."""
    upsample_rates: tuple[int, ...] = (8, 8, 2, 2)
    """Stride of each transposed convolution; their product is the hop length in samples."""
    upsample_kernel_sizes: tuple[int, ...] = (16, 16, 4, 4)
    """Kernel size of each transposed convolution."""
    upsample_initial_channel: int = 512
    """Channels after conv_pre; halved by every upsampling stage."""
    resblock_kernel_sizes: tuple[int, ...] = (3, 7, 11)
    """Kernel size of each parallel residual block in a stage."""
    resblock_dilation_sizes: tuple[tuple[int, ...], ...] = ((1, 3, 5), (1, 3, 5), (1, 3, 5))
    """Dilations of the convolutions inside each parallel residual block."""
    in_channels: int = 80
    """Input channels: 80 for a mel spectrogram, 192 for a VITS/Piper latent."""
    io_weight_norm: bool = True
    """Weight norm on conv_pre and conv_post (public HiFi-GAN: yes; VITS decoder: no)."""
    post_bias: bool = True
    """Bias on conv_post (public HiFi-GAN: yes; VITS decoder: no)."""
    gin_channels: int = 0
    """Speaker-embedding channels added after conv_pre (0: no conditioning)."""
    lrelu_slope: float = DEFAULT_LRELU_SLOPE
    """Leaky ReLU slope before every upsampling and inside the residual blocks."""
    post_lrelu_slope: float = DEFAULT_POST_LRELU_SLOPE
    """Leaky ReLU slope before conv_post."""

    @property
    def hop_length(self) -> int:
        """Output samples per input frame."""
        return math.prod(self.upsample_rates)

    @staticmethod
    def from_dict(config: dict[str, Any]) -> GeneratorConfig:
        """Read a public HiFi-GAN config.json dict (training-only keys are ignored)."""
        known = {f.name for f in fields(GeneratorConfig)}
        values: dict[str, Any] = {key: value for key, value in config.items() if key in known}
        if "num_mels" in config and "in_channels" not in config:
            values["in_channels"] = int(config["num_mels"])
        for key in ("upsample_rates", "upsample_kernel_sizes", "resblock_kernel_sizes"):
            if key in values:
                values[key] = tuple(int(v) for v in values[key])
        if "resblock_dilation_sizes" in values:
            values["resblock_dilation_sizes"] = tuple(tuple(int(d) for d in ds) for ds in values["resblock_dilation_sizes"])
        if "resblock" in values:
            values["resblock"] = str(values["resblock"])
        return GeneratorConfig(**values)

    def to_dict(self) -> dict[str, Any]:
        """A config.json dict that public HiFi-GAN code and `from_dict` both read."""
        values = asdict(self)
        for key in ("upsample_rates", "upsample_kernel_sizes", "resblock_kernel_sizes"):
            values[key] = list(values[key])
        values["resblock_dilation_sizes"] = [list(ds) for ds in self.resblock_dilation_sizes]
        values["num_mels"] = self.in_channels
        return values


HIFIGAN_V1: Final = GeneratorConfig()
HIFIGAN_V2: Final = replace(HIFIGAN_V1, upsample_initial_channel=128)
HIFIGAN_V3: Final = GeneratorConfig(
    resblock="2",
    upsample_rates=(8, 8, 4),
    upsample_kernel_sizes=(16, 16, 8),
    upsample_initial_channel=256,
    resblock_kernel_sizes=(3, 5, 7),
    resblock_dilation_sizes=((1, 2), (2, 6), (3, 12)),
)


def piper_medium_decoder_config(gin_channels: int = 0) -> GeneratorConfig:
    """The decoder of Piper "medium" voices: a V3 body on the 192-channel latent, no outer weight norm."""
    return replace(HIFIGAN_V3, in_channels=192, io_weight_norm=False, post_bias=False, gin_channels=gin_channels)


def _init_conv(module: nn.Module) -> None:
    nn.init.normal_(module.weight, 0.0, INIT_STD)


def _masked(x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    return x if mask is None else x * mask


class ResBlock1(nn.Module):
    """Residual block of V1/V2: per dilation, a dilated conv then an undilated conv, each after a leaky ReLU."""

    def __init__(self, channels: int, kernel_size: int, dilations: tuple[int, ...], lrelu_slope: float) -> None:
        super().__init__()
        self.lrelu_slope = lrelu_slope
        self.convs1 = nn.ModuleList(
            nn.Conv1d(channels, channels, kernel_size, dilation=d, padding=conv_padding(kernel_size, d)) for d in dilations
        )
        self.convs2 = nn.ModuleList(
            nn.Conv1d(channels, channels, kernel_size, padding=conv_padding(kernel_size)) for _ in dilations
        )
        for conv in (*self.convs1, *self.convs2):
            _init_conv(conv)
            add_weight_norm(conv)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """x [b, c, t] -> [b, c, t]; `mask` [b, 1, t] zeroes padding before every convolution."""
        for dilated, plain in zip(self.convs1, self.convs2, strict=False):
            h = dilated(_masked(F.leaky_relu(x, self.lrelu_slope), mask))
            h = plain(_masked(F.leaky_relu(h, self.lrelu_slope), mask))
            x = x + h
        return x

    def remove_weight_norm(self) -> None:
        """Fold weight norm into plain weights for inference."""
        for conv in (*self.convs1, *self.convs2):
            strip_weight_norm(conv)


class ResBlock2(nn.Module):
    """Residual block of V3: one dilated conv per dilation, each after a leaky ReLU."""

    def __init__(self, channels: int, kernel_size: int, dilations: tuple[int, ...], lrelu_slope: float) -> None:
        super().__init__()
        self.lrelu_slope = lrelu_slope
        self.convs = nn.ModuleList(
            nn.Conv1d(channels, channels, kernel_size, dilation=d, padding=conv_padding(kernel_size, d)) for d in dilations
        )
        for conv in self.convs:
            _init_conv(conv)
            add_weight_norm(conv)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """x [b, c, t] -> [b, c, t]; `mask` [b, 1, t] zeroes padding before every convolution."""
        for conv in self.convs:
            x = x + conv(_masked(F.leaky_relu(x, self.lrelu_slope), mask))
        return x

    def remove_weight_norm(self) -> None:
        """Fold weight norm into plain weights for inference."""
        for conv in self.convs:
            strip_weight_norm(conv)


class Generator(nn.Module):
    """Frames [b, in_channels, frames] -> waveform [b, 1, frames * hop_length] in [-1, 1]."""

    def __init__(self, config: GeneratorConfig) -> None:
        super().__init__()
        self.config = config
        self.num_kernels = len(config.resblock_kernel_sizes)
        channels = config.upsample_initial_channel
        self.conv_pre = nn.Conv1d(config.in_channels, channels, OUTER_KERNEL_SIZE, padding=OUTER_KERNEL_SIZE // 2)
        if config.io_weight_norm:
            add_weight_norm(self.conv_pre)
        block = {"1": ResBlock1, "2": ResBlock2}[config.resblock]

        self.ups = nn.ModuleList()
        self.resblocks = nn.ModuleList()
        for rate, kernel in zip(config.upsample_rates, config.upsample_kernel_sizes, strict=False):
            up = nn.ConvTranspose1d(channels, channels // 2, kernel, rate, padding=(kernel - rate) // 2)
            _init_conv(up)
            self.ups.append(add_weight_norm(up))
            channels //= 2
            for size, dilations in zip(config.resblock_kernel_sizes, config.resblock_dilation_sizes, strict=False):
                self.resblocks.append(block(channels, size, tuple(dilations), config.lrelu_slope))

        self.conv_post = nn.Conv1d(channels, 1, OUTER_KERNEL_SIZE, padding=OUTER_KERNEL_SIZE // 2, bias=config.post_bias)
        _init_conv(self.conv_post)
        if config.io_weight_norm:
            add_weight_norm(self.conv_post)
        if config.gin_channels:
            self.cond = nn.Conv1d(config.gin_channels, config.upsample_initial_channel, 1)
        accept_any_weight_norm_form(self)

    def forward(
        self,
        x: torch.Tensor,
        lengths: torch.Tensor | None = None,
        g: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Vocode `x` [b, in_channels, frames].

        `lengths` [b] (frames) marks the valid part of each item of a padded batch: the padding is
        zeroed before every convolution at every resolution, so each item comes out exactly as it
        would alone, and its output past lengths * hop_length is zero. `g` [b, gin, 1] conditions
        on a speaker.
        """
        return self._vocode(x, lengths, g, None)

    def forward_stages(
        self,
        x: torch.Tensor,
        lengths: torch.Tensor | None = None,
        g: torch.Tensor | None = None,
    ) -> tuple[list[torch.Tensor], torch.Tensor]:
        """`forward`, with what each upsampling stage hands the next (its residual blocks' mean,
        [b, channels, frames * the stage's scale]): a student learns from its teacher's stages."""
        stages: list[torch.Tensor] = []
        return stages, self._vocode(x, lengths, g, stages)

    def _vocode(
        self, x: torch.Tensor, lengths: torch.Tensor | None, g: torch.Tensor | None, stages: list[torch.Tensor] | None
    ) -> torch.Tensor:
        """The waveform; each stage's output is appended to `stages` where one is given (`forward`
        keeps none, so serving holds no activation longer than it needs)."""
        frame_count = x.size(-1)
        scale = 1
        mask = None if lengths is None else self._mask(lengths, frame_count, scale)
        x = self.conv_pre(_masked(x, mask))
        if g is not None:
            x = x + self.cond(g)
        for stage, (up, rate) in enumerate(zip(self.ups, self.config.upsample_rates, strict=False)):
            x = up(_masked(F.leaky_relu(x, self.config.lrelu_slope), mask))
            scale *= rate
            mask = None if lengths is None else self._mask(lengths, frame_count, scale)
            blocks = self.resblocks[stage * self.num_kernels : (stage + 1) * self.num_kernels]
            total = blocks[0](x, mask)
            for block in blocks[1:]:
                total = total + block(x, mask)
            x = total / self.num_kernels
            if stages is not None:
                stages.append(x)
        x = self.conv_post(_masked(F.leaky_relu(x, self.config.post_lrelu_slope), mask))
        return _masked(torch.tanh(x), mask)

    @staticmethod
    def _mask(lengths: torch.Tensor, frame_count: int, scale: int) -> torch.Tensor:
        return sequence_mask(lengths.to(torch.long) * scale, frame_count * scale).unsqueeze(1).to(torch.float32)

    def remove_weight_norm(self) -> None:
        """Fold every weight norm into plain weights (do this once before inference: it is faster)."""
        for module in (self.conv_pre, self.conv_post, *self.ups):
            strip_weight_norm(module)
        for block in self.resblocks:
            block.remove_weight_norm()


def receptive_field_frames(config: GeneratorConfig) -> int:
    """Input frames of context each side that one frame's output samples depend on.

    Walks back from the samples of one frame through conv_post, each stage's residual blocks (the
    widest of the parallel blocks) and transposed convolution, and conv_pre, tracking the exact
    span of positions needed. Chunks fed with this much real context on both sides vocode exactly
    like the whole utterance.
    """
    half_outer = OUTER_KERNEL_SIZE // 2
    first, last = -half_outer, config.hop_length - 1 + half_outer
    for rate, kernel in reversed(list(zip(config.upsample_rates, config.upsample_kernel_sizes, strict=False))):
        reach = max(
            _resblock_reach(config.resblock, size, dilations)
            for size, dilations in zip(config.resblock_kernel_sizes, config.resblock_dilation_sizes, strict=False)
        )
        first, last = first - reach, last + reach
        padding = (kernel - rate) // 2
        # Output t of a transposed conv sums inputs i with 0 <= t + padding - i * rate < kernel.
        first = -((-(first + padding - kernel + 1)) // rate)
        last = (last + padding) // rate
    first, last = first - half_outer, last + half_outer
    return max(-first, last)


def _resblock_reach(resblock: str, kernel_size: int, dilations: tuple[int, ...]) -> int:
    half = (kernel_size - 1) // 2
    if resblock == "1":
        return sum(half * d + half for d in dilations)
    return sum(half * d for d in dilations)


def load_hifigan_checkpoint(checkpoint_path: str | Path, config_json_path: str | Path | None = None) -> Generator:
    """Load a public HiFi-GAN checkpoint ({'generator': state_dict}, config.json beside it by default).

    Weight-normed parameters may be in the old `weight_g`/`weight_v` form. The returned generator
    is in eval mode with weight norm removed, ready for inference.
    """
    checkpoint_path = Path(checkpoint_path)
    config_json_path = Path(config_json_path) if config_json_path else checkpoint_path.parent / "config.json"
    config = GeneratorConfig.from_dict(json.loads(config_json_path.read_text()))
    checkpoint = torch.load(checkpoint_path, map_location="cpu", weights_only=True)
    state_dict = checkpoint.get("generator", checkpoint)
    generator = Generator(config)
    generator.load_state_dict(state_dict)
    generator.remove_weight_norm()
    return generator.eval()
