"""HiFi-GAN's discriminators (Kong et al. 2020, section 2.2) and its least-squares GAN losses, at a
width chosen for training a small student vocoder.

The multi-period discriminator looks at the waveform folded into columns of period p (2, 3, 5, 7, 11),
so each sub-discriminator sees one phase of every p-th sample; the multi-scale discriminator looks at
the waveform, and at it average-pooled twice, with grouped 1-D convolutions. Each returns its score
map and the feature maps of every layer (for the feature-matching loss). Only training uses them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import torch
from torch import nn
from torch.nn import functional as F
from torch.nn.utils import parametrizations

LRELU_SLOPE: Final = 0.1
DEFAULT_PERIODS: Final = (2, 3, 5, 7, 11)
DEFAULT_SCALES: Final = 3


@dataclass(frozen=True)
class DiscriminatorConfig:
    """Widths of the discriminators; the paper's are (32, 128, 512, 1024, 1024) and (128, 128, 256, 512, 1024, 1024, 1024)."""

    periods: tuple[int, ...] = DEFAULT_PERIODS
    """Periods of the multi-period discriminator's sub-discriminators."""
    period_channels: tuple[int, ...] = (32, 64, 128, 256, 256)
    """Output channels of each period sub-discriminator's 2-D convolutions (the last at stride 1)."""
    scales: int = DEFAULT_SCALES
    """Sub-discriminators of the multi-scale discriminator: the waveform, then average-pooled by 2 each."""
    scale_channels: tuple[int, ...] = (32, 32, 64, 128, 256, 256, 256)
    """Output channels of each scale sub-discriminator's 1-D convolutions."""


Features = list[torch.Tensor]


class PeriodDiscriminator(nn.Module):
    """One sub-discriminator of the multi-period discriminator."""

    def __init__(self, period: int, channels: tuple[int, ...]) -> None:
        super().__init__()
        self.period = period
        layers, previous = [], 1
        for index, width in enumerate(channels):
            stride = 1 if index == len(channels) - 1 else 3
            layers.append(parametrizations.weight_norm(nn.Conv2d(previous, width, (5, 1), (stride, 1), padding=(2, 0))))
            previous = width
        self.convs = nn.ModuleList(layers)
        self.conv_post = parametrizations.weight_norm(nn.Conv2d(previous, 1, (3, 1), 1, padding=(1, 0)))

    def forward(self, audio: torch.Tensor) -> tuple[torch.Tensor, Features]:
        """audio [B, 1, samples] -> (scores [B, n], features of every layer)."""
        batch, channels, samples = audio.shape
        if samples % self.period:
            audio = F.pad(audio, (0, self.period - samples % self.period), mode="reflect")
        return _scored(self.convs, self.conv_post, audio.view(batch, channels, -1, self.period))


class ScaleDiscriminator(nn.Module):
    """One sub-discriminator of the multi-scale discriminator."""

    KERNELS: Final = (15, 41, 41, 41, 41, 41, 5)
    STRIDES: Final = (1, 2, 2, 4, 4, 1, 1)
    GROUPS: Final = (1, 4, 16, 16, 16, 16, 1)

    def __init__(self, channels: tuple[int, ...]) -> None:
        super().__init__()
        if len(channels) != len(self.KERNELS):
            raise ValueError(f"a scale discriminator has {len(self.KERNELS)} layers, not {len(channels)}")
        layers, previous = [], 1
        for width, kernel, stride, groups in zip(channels, self.KERNELS, self.STRIDES, self.GROUPS, strict=True):
            groups = _fitting_groups(groups, previous, width)
            layers.append(parametrizations.weight_norm(nn.Conv1d(previous, width, kernel, stride, groups=groups, padding=kernel // 2)))
            previous = width
        self.convs = nn.ModuleList(layers)
        self.conv_post = parametrizations.weight_norm(nn.Conv1d(previous, 1, 3, 1, padding=1))

    def forward(self, audio: torch.Tensor) -> tuple[torch.Tensor, Features]:
        """audio [B, 1, samples] -> (scores [B, n], features of every layer)."""
        return _scored(self.convs, self.conv_post, audio)


def _scored(convs: nn.ModuleList, conv_post: nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, Features]:
    """A sub-discriminator's layers over `x`: (its scores flattened per item, every layer's output)."""
    features = []
    for conv in convs:
        x = F.leaky_relu(conv(x), LRELU_SLOPE)
        features.append(x)
    x = conv_post(x)
    features.append(x)
    return x.flatten(1), features


def _fitting_groups(groups: int, in_channels: int, out_channels: int) -> int:
    """The largest group count no more than `groups` that divides both channel counts."""
    while in_channels % groups or out_channels % groups:
        groups -= 1
    return groups


class Discriminators(nn.Module):
    """The multi-period and multi-scale discriminators together."""

    def __init__(self, config: DiscriminatorConfig | None = None) -> None:
        super().__init__()
        config = config or DiscriminatorConfig()
        self.config = config
        self.periods = nn.ModuleList(PeriodDiscriminator(period, config.period_channels) for period in config.periods)
        self.scales = nn.ModuleList(ScaleDiscriminator(config.scale_channels) for _ in range(config.scales))

    def forward(self, audio: torch.Tensor) -> tuple[list[torch.Tensor], list[Features]]:
        """audio [B, samples] -> (scores of every sub-discriminator, their features)."""
        audio = audio.unsqueeze(1)
        scores, features = [], []
        for discriminator in self.periods:
            score, maps = discriminator(audio)
            scores.append(score)
            features.append(maps)
        scaled = audio
        for index, discriminator in enumerate(self.scales):
            if index:
                scaled = F.avg_pool1d(scaled, 4, 2, padding=2)
            score, maps = discriminator(scaled)
            scores.append(score)
            features.append(maps)
        return scores, features


def discriminator_loss(real_scores: list[torch.Tensor], fake_scores: list[torch.Tensor]) -> torch.Tensor:
    """Least-squares loss of the discriminators: real toward 1, generated toward 0."""
    return sum(((1 - real) ** 2).mean() + (fake**2).mean() for real, fake in zip(real_scores, fake_scores, strict=True))  # type: ignore[return-value]


def generator_adversarial_loss(fake_scores: list[torch.Tensor]) -> torch.Tensor:
    """Least-squares loss of the generator: its audio scored toward 1."""
    return sum(((1 - fake) ** 2).mean() for fake in fake_scores)  # type: ignore[return-value]


def feature_matching_loss(real_features: list[Features], fake_features: list[Features]) -> torch.Tensor:
    """L1 between the discriminators' feature maps of real and generated audio, summed over layers."""
    total = 0.0
    for real_maps, fake_maps in zip(real_features, fake_features, strict=True):
        for real, fake in zip(real_maps, fake_maps, strict=True):
            total = total + (real.detach() - fake).abs().mean()
    return total  # type: ignore[return-value]
