"""Audio leaves the mesh through one stateful encoder per utterance: float samples in, the bytes of
the client's encoding out.

An encoder sees every sample of the utterance in order, at the output rate, and may hold some back
(a codec fills its frames); `finish` gives what it still holds. Each encoding is one class here,
registered in `ENCODERS` under its `AudioEncoding` value.
"""

from __future__ import annotations

from typing import Callable, Final, Mapping, Protocol

import numpy as np

from libs.pb.tts.v1 import tts_pb2


class AudioEncoder(Protocol):
    """Encodes one utterance's samples as they come."""

    def encode(self, samples: np.ndarray) -> bytes:
        """The bytes for the next float32 mono samples in [-1, 1] (possibly none yet)."""
        ...

    def finish(self) -> bytes:
        """The bytes still held back, at the end of the utterance."""
        ...


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


ENCODERS: Final[Mapping[int, Callable[[int], AudioEncoder]]] = {
    tts_pb2.LINEAR_PCM: LinearPcmEncoder,
    tts_pb2.FLOAT_PCM: FloatPcmEncoder,
}
"""Each supported AudioEncoding and the encoder class that makes it (called with the output rate)."""


def encoder_for(encoding: int, sample_rate_hz: int) -> AudioEncoder:
    """A fresh encoder for one utterance in `encoding` (UNSPECIFIED means LINEAR_PCM) at `sample_rate_hz`."""
    if encoding == tts_pb2.AUDIO_ENCODING_UNSPECIFIED:
        encoding = tts_pb2.LINEAR_PCM
    make = ENCODERS.get(encoding)
    if make is None:
        raise ValueError(f"unsupported audio encoding {encoding}")
    return make(sample_rate_hz)
