"""A vocoder that works at the mel frame rate and ends in an inverse STFT: the fast tier's decoder.

HiFi-GAN spends its compute after upsampling, at the audio rate (22,050 positions a second through
its last stages). This network stays at the frame rate (86 positions a second): a stack of ConvNeXt
blocks predicts each frame's spectrum (log magnitude and phase of `n_fft // 2 + 1` bins), and a fixed
inverse STFT turns the frames into samples by overlap-add. The inverse STFT is a transposed
convolution with a constant kernel (the inverse DFT basis times the synthesis window, over the
window's overlap envelope), so every layer is a convolution, a per-frame operation or that one
transposed convolution.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
from torch import nn
from torch.nn import functional as F

MAX_LOG_MAGNITUDE = 6.0
"""Log magnitudes are clipped here (e^6 is far above any real bin): an untrained or diverging head
cannot overflow the synthesis."""


@dataclass(frozen=True)
class FrameVocoderConfig:
    """The shape of a frame-rate vocoder."""

    n_mels: int = 80
    channels: int = 384
    intermediate: int = 1152
    """Channels inside each block's pointwise layers."""
    layers: int = 8
    kernel_size: int = 7
    """Frames each block's depthwise convolution sees."""
    n_fft: int = 1024
    hop_length: int = 256

    def to_dict(self) -> dict[str, int]:
        return asdict(self)


class ChannelNorm(nn.Module):
    """LayerNorm over the channels of [B, C, T], frame by frame."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(channels, eps=1e-6)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x.transpose(1, 2)).transpose(1, 2)


class ConvNeXtBlock(nn.Module):
    """Depthwise convolution over frames, then a per-frame MLP, added to the input."""

    def __init__(self, channels: int, intermediate: int, kernel_size: int) -> None:
        super().__init__()
        self.depthwise = nn.Conv1d(channels, channels, kernel_size, padding=kernel_size // 2, groups=channels)
        self.norm = ChannelNorm(channels)
        self.expand = nn.Conv1d(channels, intermediate, 1)
        self.project = nn.Conv1d(intermediate, channels, 1)
        self.scale = nn.Parameter(torch.full((channels, 1), 1.0 / 8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.project(F.gelu(self.expand(self.norm(self.depthwise(x)))))
        return x + self.scale * h


def inverse_stft_kernel(n_fft: int, hop_length: int) -> torch.Tensor:
    """[2 * (n_fft // 2 + 1), 1, n_fft]: the transposed convolution that is the inverse STFT of
    (real parts, imaginary parts) frames with a Hann window, normalised by the window's overlap."""
    bins = n_fft // 2 + 1
    window = torch.hann_window(n_fft, periodic=True, dtype=torch.float64)
    n = torch.arange(n_fft, dtype=torch.float64)
    k = torch.arange(bins, dtype=torch.float64)[:, None]
    angle = 2 * math.pi * k * n / n_fft
    weight = torch.full((bins, 1), 2.0, dtype=torch.float64)
    weight[0] = weight[-1] = 1.0  # the DC and Nyquist bins appear once in a real spectrum
    envelope = float((window**2).sum() / hop_length)  # sum of window^2 over the frames covering a sample
    real = weight * torch.cos(angle) * window / n_fft / envelope
    imaginary = -weight * torch.sin(angle) * window / n_fft / envelope
    return torch.cat([real, imaginary])[:, None, :].to(torch.float32)


class FrameVocoder(nn.Module):
    """Mel [B, n_mels, T] -> waveform [B, T * hop_length], all its work at the frame rate."""

    def __init__(self, config: FrameVocoderConfig | None = None) -> None:
        super().__init__()
        config = config or FrameVocoderConfig()
        self.config = config
        self.embed = nn.Conv1d(config.n_mels, config.channels, config.kernel_size, padding=config.kernel_size // 2)
        self.embed_norm = ChannelNorm(config.channels)
        self.blocks = nn.ModuleList(
            ConvNeXtBlock(config.channels, config.intermediate, config.kernel_size) for _ in range(config.layers)
        )
        self.out_norm = ChannelNorm(config.channels)
        self.bins = config.n_fft // 2 + 1
        self.head = nn.Conv1d(config.channels, 2 * self.bins, 1)
        self.register_buffer("synthesis", inverse_stft_kernel(config.n_fft, config.hop_length), persistent=False)

    @property
    def receptive_field_frames(self) -> int:
        """Frames each side that one frame's samples depend on: the convolutions' and the window's."""
        convolutions = (self.config.kernel_size // 2) * (1 + self.config.layers)
        return convolutions + math.ceil(self.config.n_fft / 2 / self.config.hop_length)

    def spectra(self, mel: torch.Tensor) -> torch.Tensor:
        """Each frame's spectrum, [B, 2 * bins, T]: real parts, then imaginary parts."""
        x = self.embed_norm(self.embed(mel))
        for block in self.blocks:
            x = block(x)
        log_magnitude, phase = self.head(self.out_norm(x)).split(self.bins, dim=1)
        magnitude = torch.exp(log_magnitude.clamp(max=MAX_LOG_MAGNITUDE))
        return torch.cat([magnitude * torch.cos(phase), magnitude * torch.sin(phase)], dim=1)

    def forward(self, mel: torch.Tensor) -> torch.Tensor:
        frames = mel.size(-1)
        audio = F.conv_transpose1d(self.spectra(mel), self.synthesis, stride=self.config.hop_length)
        # Frame t is centred on sample t * hop (as a centred STFT's): drop the half window before it.
        start = self.config.n_fft // 2
        return audio[:, 0, start : start + frames * self.config.hop_length]
