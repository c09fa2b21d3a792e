"""The two small networks that put the §3 mel contract between the acoustic model and the vocoder.

`MelHead` turns the VITS flow latent z [B, 192, T] into the log-mel of docs/ARCHITECTURE.md ("Mel recipe") [B, 80, T] (the
acoustic side). `MelAdapter` turns that mel back into a latent the Piper decoder body can vocode
(the vocoder side), so MelAdapter + decoder is a HiFi-GAN generator that takes mel.

Both are plain non-causal convolution stacks: no normalisation over the sequence, no attention,
zero padding only at the sequence edges. Each output frame therefore depends on exactly
`receptive_field_frames` input frames on either side, and chunked inference with that much real
context on both sides reproduces whole-sequence output.
"""

from __future__ import annotations

import copy
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Final

import torch
from torch import nn

from libs.models.commons import sequence_mask
from libs.models.hifigan import Generator, GeneratorConfig
from libs.models.hifigan import receptive_field_frames as generator_receptive_field_frames
from libs.models.voice_files import DECODER_FILE, MEL_ADAPTER_FILE

LATENT_CHANNELS: Final = 192
N_MELS: Final = 80
LEAKY_RELU_SLOPE: Final = 0.1


@dataclass(frozen=True)
class ConvStackConfig:
    """Shape of a residual convolution stack mapping one frame-rate feature to another."""

    in_channels: int
    """Channels of the input feature."""
    out_channels: int
    """Channels of the output feature."""
    hidden_channels: int = 256
    """Width of the residual stream."""
    input_kernel_size: int = 3
    """Kernel of the first convolution (odd)."""
    block_kernel_size: int = 3
    """Kernel of the dilated convolution inside each residual block (odd)."""
    block_dilations: tuple[int, ...] = (1, 2, 1)
    """Dilation of each residual block; one block per entry."""
    output_kernel_size: int = 3
    """Kernel of the last convolution (odd)."""

    def to_dict(self) -> dict:
        """Plain JSON-ready dict."""
        data = asdict(self)
        data["block_dilations"] = list(self.block_dilations)
        return data

    @classmethod
    def from_dict(cls, data: dict) -> ConvStackConfig:
        """Inverse of `to_dict`."""
        values = dict(data)
        values["block_dilations"] = tuple(values["block_dilations"])
        return cls(**values)

    @property
    def receptive_field_frames(self) -> int:
        """Input frames each output frame sees on each side."""
        half = lambda kernel, dilation=1: (kernel - 1) * dilation // 2  # noqa: E731
        return (
            half(self.input_kernel_size)
            + sum(half(self.block_kernel_size, d) for d in self.block_dilations)
            + half(self.output_kernel_size)
        )


def _default_head_config() -> ConvStackConfig:
    return ConvStackConfig(in_channels=LATENT_CHANNELS, out_channels=N_MELS)


def _default_adapter_config() -> ConvStackConfig:
    return ConvStackConfig(in_channels=N_MELS, out_channels=LATENT_CHANNELS, block_dilations=(1, 2, 4, 1))


@dataclass(frozen=True)
class MelHeadConfig:
    """Settings of the latent -> mel head."""

    stack: ConvStackConfig = field(default_factory=_default_head_config)
    """The convolution stack (latent channels in, mel bands out)."""


@dataclass(frozen=True)
class MelAdapterConfig:
    """Settings of the mel -> latent adapter in front of the decoder body."""

    stack: ConvStackConfig = field(default_factory=_default_adapter_config)
    """The convolution stack (mel bands in, latent channels out)."""


def _same_conv(in_channels: int, out_channels: int, kernel_size: int, dilation: int = 1) -> nn.Conv1d:
    if kernel_size % 2 != 1:
        raise ValueError(f"kernel_size must be odd for a symmetric receptive field, got {kernel_size}")
    padding = (kernel_size - 1) * dilation // 2
    return nn.Conv1d(in_channels, out_channels, kernel_size, dilation=dilation, padding=padding)


def _masked(x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    return x if mask is None else x * mask


class ResidualBlock(nn.Module):
    """LeakyReLU -> dilated conv -> LeakyReLU -> 1x1 conv, added to the input."""

    def __init__(self, channels: int, kernel_size: int, dilation: int) -> None:
        super().__init__()
        self.dilated = _same_conv(channels, channels, kernel_size, dilation)
        self.pointwise = nn.Conv1d(channels, channels, 1)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """x [B, C, T] -> [B, C, T]; `mask` [B, 1, T] zeroes padding before the dilated conv."""
        h = self.dilated(_masked(nn.functional.leaky_relu(x, LEAKY_RELU_SLOPE), mask))
        # The 1x1 conv mixes no frames: padding cannot leak through it.
        return x + self.pointwise(nn.functional.leaky_relu(h, LEAKY_RELU_SLOPE))


class ConvStack(nn.Module):
    """Per-channel standardise -> conv -> residual blocks -> conv -> de-standardise.

    The standardisation constants are fixed buffers set from training data (`set_statistics`),
    never statistics of the sequence being processed, so they do not break chunking.
    """

    def __init__(self, config: ConvStackConfig) -> None:
        super().__init__()
        self.config = config
        self.register_buffer("input_mean", torch.zeros(1, config.in_channels, 1))
        self.register_buffer("input_std", torch.ones(1, config.in_channels, 1))
        self.register_buffer("output_mean", torch.zeros(1, config.out_channels, 1))
        self.register_buffer("output_std", torch.ones(1, config.out_channels, 1))
        self.conv_in = _same_conv(config.in_channels, config.hidden_channels, config.input_kernel_size)
        self.blocks = nn.ModuleList(
            ResidualBlock(config.hidden_channels, config.block_kernel_size, d) for d in config.block_dilations
        )
        self.conv_out = _same_conv(config.hidden_channels, config.out_channels, config.output_kernel_size)

    @property
    def receptive_field_frames(self) -> int:
        """Input frames each output frame sees on each side."""
        return self.config.receptive_field_frames

    @torch.no_grad()
    def set_statistics(self, inputs: torch.Tensor, outputs: torch.Tensor) -> None:
        """Fix the standardisation from training features [N, C, T] (or [C, T]) of both sides."""
        for name, tensor in (("input", inputs), ("output", outputs)):
            flat = tensor.transpose(0, 1).reshape(tensor.shape[-2], -1) if tensor.dim() == 3 else tensor
            getattr(self, f"{name}_mean").copy_(flat.mean(dim=1).view(1, -1, 1))
            getattr(self, f"{name}_std").copy_(flat.std(dim=1).clamp(min=1e-3).view(1, -1, 1))

    def forward(self, x: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
        """[B, in_channels, T] -> [B, out_channels, T].

        `lengths` [B] (frames) marks the valid part of each item of a padded batch: padding is
        zeroed before every convolution, as the zero padding at a sequence's edge is, so each item
        comes out as it would alone; its output past its length is zero.
        """
        mask = None if lengths is None else sequence_mask(lengths.to(torch.long), x.size(-1)).unsqueeze(1).to(x.dtype)
        h = self.conv_in(_masked((x - self.input_mean) / self.input_std, mask))
        for block in self.blocks:
            h = block(h, mask)
        h = self.conv_out(_masked(nn.functional.leaky_relu(h, LEAKY_RELU_SLOPE), mask))
        return _masked(h * self.output_std + self.output_mean, mask)


class MelHead(ConvStack):
    """Flow latent z [B, 192, T] -> log-mel [B, 80, T] (one mel frame per latent frame)."""

    def __init__(self, config: MelHeadConfig = MelHeadConfig()) -> None:
        super().__init__(config.stack)
        self.head_config = config


class MelAdapter(ConvStack):
    """Log-mel [B, 80, T] -> latent [B, 192, T] for the Piper decoder body (the vocoder's input side)."""

    def __init__(self, config: MelAdapterConfig = MelAdapterConfig()) -> None:
        super().__init__(config.stack)
        self.adapter_config = config


class MelVocoder(nn.Module):
    """A HiFi-GAN generator that takes the §3 mel: MelAdapter in front of the Piper decoder body, or
    (adapter None) a public HiFi-GAN generator that takes mel itself."""

    def __init__(self, adapter: MelAdapter | None, decoder: Generator, speakers: nn.Embedding | None = None) -> None:
        """`speakers`: a multi-speaker voice's speaker embeddings (its acoustic model's), whose rows
        condition the decoder; None for a decoder without speaker conditioning."""
        super().__init__()
        self.adapter = adapter
        self.decoder = decoder
        self.speakers = speakers

    def speaker_conditioning(self, speaker_id: int) -> torch.Tensor | None:
        """The decoder's conditioning [gin, 1] for `speaker_id`, or None for a one-speaker decoder."""
        if self.speakers is None or not self.decoder.config.gin_channels:
            return None
        with torch.inference_mode():
            return self.speakers.weight[speaker_id].detach().clone().unsqueeze(-1)

    @property
    def receptive_field_frames(self) -> int:
        """Mel frames of context each side that one frame's samples depend on (adapter + decoder)."""
        adapter_frames = self.adapter.receptive_field_frames if self.adapter is not None else 0
        return adapter_frames + generator_receptive_field_frames(self.decoder.config)

    def forward(self, mel: torch.Tensor, lengths: torch.Tensor | None = None, g: torch.Tensor | None = None) -> torch.Tensor:
        """Log-mel [B, 80, T] -> waveform [B, T * hop]; `lengths` [B] (frames) masks a padded batch;
        `g` [B, gin, 1] is each item's speaker conditioning (`speaker_conditioning`)."""
        return self.decoder(self._features(mel, lengths), lengths, g).squeeze(1)

    def forward_stages(self, mel: torch.Tensor) -> tuple[list[torch.Tensor], torch.Tensor]:
        """The decoder's stage activations (`Generator.forward_stages`) and waveform [B, T * hop] of an unpadded batch."""
        stages, waveform = self.decoder.forward_stages(self._features(mel))
        return stages, waveform.squeeze(1)

    def _features(self, mel: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
        """What the decoder takes: the mel itself, or the adapter's features of it."""
        return mel if self.adapter is None else self.adapter(mel, lengths)


def save_stack(module: ConvStack, weights_path: Path) -> None:
    """Write `module`'s state dict to `weights_path` and its config to the same name with .json."""
    weights_path = Path(weights_path)
    torch.save(module.state_dict(), weights_path)
    weights_path.with_suffix(".json").write_text(json.dumps(module.config.to_dict(), indent=2) + "\n")


def _load_stack_config(weights_path: Path) -> ConvStackConfig:
    return ConvStackConfig.from_dict(json.loads(Path(weights_path).with_suffix(".json").read_text()))


def load_mel_head(weights_path: Path) -> MelHead:
    """A `MelHead` with the weights at `weights_path` (config in the .json beside it), in eval mode.

    The default voice's file is assets/voices/en_US-joe-medium/ + MEL_HEAD_FILE.
    """
    head = MelHead(MelHeadConfig(stack=_load_stack_config(weights_path)))
    head.load_state_dict(torch.load(weights_path, map_location="cpu", weights_only=True))
    return head.eval()


def load_mel_adapter(weights_path: Path) -> MelAdapter:
    """A `MelAdapter` with the weights at `weights_path` (config in the .json beside it), in eval mode.

    The default voice's file is assets/voices/en_US-joe-medium/ + MEL_ADAPTER_FILE.
    """
    adapter = MelAdapter(MelAdapterConfig(stack=_load_stack_config(weights_path)))
    adapter.load_state_dict(torch.load(weights_path, map_location="cpu", weights_only=True))
    return adapter.eval()


def load_mel_vocoder(voice_dir: Path, piper_decoder: Generator, speakers: nn.Embedding | None = None) -> MelVocoder:
    """The voice's vocoder: its MelAdapter in front of a copy of `piper_decoder`, carrying the
    tuned decoder weights of DECODER_FILE when the voice build made them, conditioned by `speakers`
    (a multi-speaker voice's embeddings). In eval mode."""
    decoder = copy.deepcopy(piper_decoder)
    decoder_path = Path(voice_dir) / DECODER_FILE
    if decoder_path.exists():
        decoder.load_state_dict(torch.load(decoder_path, map_location="cpu", weights_only=True))
    return MelVocoder(load_mel_adapter(Path(voice_dir) / MEL_ADAPTER_FILE), decoder, copy.deepcopy(speakers)).eval()


def save_fast_vocoder(generator: Generator, weights_path: Path) -> None:
    """Write a fast-tier generator's weights (weight norm folded) to `weights_path`, its config beside it."""
    plain = copy.deepcopy(generator).eval()
    plain.remove_weight_norm()
    torch.save(plain.state_dict(), weights_path)
    Path(weights_path).with_suffix(".json").write_text(json.dumps(generator.config.to_dict(), indent=2) + "\n")


def load_fast_vocoder(weights_path: Path) -> MelVocoder:
    """The fast tier's vocoder of the voice whose file is `weights_path` (libs.voice.tiers.FAST_VOCODER_FILE): a
    generator that takes the mel itself, no adapter, weight norm folded. In eval mode."""
    config = GeneratorConfig.from_dict(json.loads(Path(weights_path).with_suffix(".json").read_text()))
    generator = Generator(config)
    generator.remove_weight_norm()
    generator.load_state_dict(torch.load(weights_path, map_location="cpu", weights_only=True))
    return MelVocoder(None, generator).eval()
