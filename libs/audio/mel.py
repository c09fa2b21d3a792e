"""The mel recipe every part of the mesh agrees on (the public HiFi-GAN one).

A frame is `hop_length` samples; a waveform of N samples (N a multiple of the hop) gives exactly
N / hop frames, because the signal is reflect-padded by (n_fft - hop) / 2 on both sides and the
STFT is not centred.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Final

import numpy as np
import torch

DEFAULT_SAMPLE_RATE_HZ: Final = 22050
DEFAULT_N_FFT: Final = 1024
DEFAULT_HOP_LENGTH: Final = 256
DEFAULT_WIN_LENGTH: Final = 1024
DEFAULT_N_MELS: Final = 80
DEFAULT_FMIN_HZ: Final = 0.0
DEFAULT_FMAX_HZ: Final = 8000.0
LOG_FLOOR: Final = 1e-5
MAGNITUDE_EPSILON: Final = 1e-9


@dataclass(frozen=True)
class MelConfig:
    """Parameters of the log-mel spectrogram."""

    sample_rate_hz: int = DEFAULT_SAMPLE_RATE_HZ
    """Audio sample rate."""
    n_fft: int = DEFAULT_N_FFT
    """FFT size in samples."""
    hop_length: int = DEFAULT_HOP_LENGTH
    """Samples between frames; one mel frame stands for this many samples."""
    win_length: int = DEFAULT_WIN_LENGTH
    """Hann window length in samples."""
    n_mels: int = DEFAULT_N_MELS
    """Number of mel bands."""
    fmin_hz: float = DEFAULT_FMIN_HZ
    """Lowest mel filter edge."""
    fmax_hz: float = DEFAULT_FMAX_HZ
    """Highest mel filter edge."""

    @property
    def frame_s(self) -> float:
        """Duration of one frame in seconds."""
        return self.hop_length / self.sample_rate_hz


@lru_cache(maxsize=8)
def mel_filterbank(config: MelConfig) -> torch.Tensor:
    """Slaney-normalised mel filters [n_mels, n_fft // 2 + 1], as librosa makes them (made once per
    config: a training loop takes the mel of every batch; the tensor is shared, so never changed)."""
    import librosa  # only the training and measuring code needs librosa

    filters = librosa.filters.mel(
        sr=config.sample_rate_hz,
        n_fft=config.n_fft,
        n_mels=config.n_mels,
        fmin=config.fmin_hz,
        fmax=config.fmax_hz,
        htk=False,
        norm="slaney",
    )
    return torch.from_numpy(filters).float()


def mel_spectrogram(
    audio: torch.Tensor | np.ndarray, config: MelConfig = MelConfig(), filterbank: torch.Tensor | None = None
) -> torch.Tensor:
    """Log-mel of `audio` ([samples] or [batch, samples], float in [-1, 1]) -> [batch?, n_mels, frames],
    on the audio's device. `filterbank` (on that device) stands in for `mel_filterbank(config)`: where
    librosa is not installed, or to keep the filters on a GPU."""
    waveform = torch.as_tensor(audio, dtype=torch.float32)
    squeeze = waveform.dim() == 1
    if squeeze:
        waveform = waveform.unsqueeze(0)
    pad = (config.n_fft - config.hop_length) // 2
    padded = torch.nn.functional.pad(waveform.unsqueeze(1), (pad, pad), mode="reflect").squeeze(1)
    spec = torch.stft(
        padded,
        n_fft=config.n_fft,
        hop_length=config.hop_length,
        win_length=config.win_length,
        window=torch.hann_window(config.win_length, device=waveform.device),
        center=False,
        normalized=False,
        onesided=True,
        return_complex=True,
    )
    magnitude = torch.sqrt(spec.real.pow(2) + spec.imag.pow(2) + MAGNITUDE_EPSILON)
    filters = mel_filterbank(config) if filterbank is None else filterbank
    mel = torch.log(torch.clamp(filters @ magnitude, min=LOG_FLOOR))
    return mel.squeeze(0) if squeeze else mel
