"""The fast tier's decoder: its inverse STFT is exactly the inverse of a centred Hann STFT, its
output has a frame's hop of samples per frame, and a frame reaches no further than its receptive field."""

from __future__ import annotations

import torch
from torch.nn import functional as F

from libs.models.frame_vocoder import FrameVocoder, FrameVocoderConfig, inverse_stft_kernel

SMALL = FrameVocoderConfig(channels=32, intermediate=64, layers=2)


def test_the_synthesis_kernel_inverts_a_centred_hann_stft() -> None:
    n_fft, hop = 1024, 256
    audio = torch.randn(1, hop * 40, generator=torch.Generator().manual_seed(0))
    spectrum = torch.stft(audio, n_fft, hop, window=torch.hann_window(n_fft), return_complex=True)
    frames = torch.cat([spectrum.real, spectrum.imag], dim=1)
    rebuilt = F.conv_transpose1d(frames, inverse_stft_kernel(n_fft, hop), stride=hop)[:, 0, n_fft // 2 :]
    interior = slice(n_fft, audio.size(1) - n_fft)  # the edges lack the overlap of a full window
    assert (rebuilt[:, interior] - audio[:, interior]).abs().max() < 1e-4


def test_a_frame_makes_one_hop_of_samples_and_reaches_no_further_than_its_receptive_field() -> None:
    torch.manual_seed(0)
    model = FrameVocoder(SMALL).eval()
    mel = torch.randn(1, 80, 120)
    with torch.no_grad():
        audio = model(mel)
        moved = mel.clone()
        moved[:, :, 60] += 1.0
        changed = (model(moved) - audio).abs()[0] > 0
    assert audio.shape == (1, 120 * 256) and torch.isfinite(audio).all()
    reach = model.receptive_field_frames * 256
    where = changed.nonzero()[:, 0]
    assert where.numel() > 0
    assert where.min() >= 60 * 256 - reach and where.max() < 61 * 256 + reach
