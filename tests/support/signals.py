"""Test signals with a known pitch."""

from __future__ import annotations

import numpy as np


def gliding_voice(start_hz: float, end_hz: float, samples: int, sample_rate: int = 22050) -> np.ndarray:
    """A voiced sound whose pitch glides from `start_hz` to `end_hz` as intonation does: five harmonics,
    each at 1/k of the first's amplitude, peaking near 1."""
    pitch_hz = np.linspace(start_hz, end_hz, samples)
    phase = 2 * np.pi * np.cumsum(pitch_hz) / sample_rate
    return sum(np.sin(k * phase) / k for k in range(1, 6)) / 1.5
