"""Uncompressed PCM: the samples as the client asked for them, with no header."""

from __future__ import annotations

import numpy as np


def float_to_int16(samples: np.ndarray) -> np.ndarray:
    """Float samples in [-1, 1] -> int16, clipped and rounded (not truncated, which would bias toward 0)."""
    scaled = np.clip(np.asarray(samples, dtype=np.float32), -1.0, 1.0) * 32767.0
    return np.rint(scaled).astype(np.int16)


class LinearPcmEncoder:
    """LINEAR_PCM: signed 16-bit little-endian, no header."""

    def __init__(self, sample_rate_hz: int) -> None:
        self.sample_rate_hz = sample_rate_hz

    def encode(self, samples: np.ndarray) -> bytes:
        return float_to_int16(samples).astype("<i2").tobytes()

    def finish(self) -> bytes:
        return b""


class FloatPcmEncoder:
    """FLOAT_PCM: 32-bit float little-endian, no header."""

    def __init__(self, sample_rate_hz: int) -> None:
        self.sample_rate_hz = sample_rate_hz

    def encode(self, samples: np.ndarray) -> bytes:
        return np.asarray(samples, dtype="<f4").tobytes()

    def finish(self) -> bytes:
        return b""
