"""Float samples -> the bytes a client asked for: encoding and, when asked, resampling.

Resampling uses libsoxr (the `soxr` package) in streaming mode, so audio can be converted slice by
slice as it is produced. Each sentence is resampled as its own stream and flushed at its end, so a
sentence's output length is exactly round(input_length * out_rate / in_rate).
"""

from __future__ import annotations

from typing import Final

import numpy as np

from libs.pb.tts.v1 import tts_pb2

MIN_OUTPUT_SAMPLE_RATE_HZ: Final = 8000
MAX_OUTPUT_SAMPLE_RATE_HZ: Final = 48000


def float_to_int16(samples: np.ndarray) -> np.ndarray:
    """Float samples in [-1, 1] -> int16, clipped and rounded (not truncated, which would bias toward 0)."""
    scaled = np.clip(np.asarray(samples, dtype=np.float32), -1.0, 1.0) * 32767.0
    return np.rint(scaled).astype(np.int16)


def encode_samples(samples: np.ndarray, encoding: int) -> bytes:
    """Float samples -> wire bytes in `encoding` (an AudioEncoding value; UNSPECIFIED means LINEAR_PCM)."""
    if encoding in (tts_pb2.AUDIO_ENCODING_UNSPECIFIED, tts_pb2.LINEAR_PCM):
        return float_to_int16(samples).astype("<i2").tobytes()
    if encoding == tts_pb2.FLOAT_PCM:
        return np.asarray(samples, dtype="<f4").tobytes()
    raise ValueError(f"unsupported audio encoding {encoding}")


class SentenceResampler:
    """Converts one sentence's float samples from `input_rate_hz` to `output_rate_hz`, chunk by chunk."""

    def __init__(self, input_rate_hz: int, output_rate_hz: int) -> None:
        self.input_rate_hz = input_rate_hz
        self.output_rate_hz = output_rate_hz
        self._stream = None
        if input_rate_hz != output_rate_hz:
            import soxr  # only needed when a client asks for another rate

            self._stream = soxr.ResampleStream(input_rate_hz, output_rate_hz, 1, dtype="float32", quality="HQ")

    def push(self, samples: np.ndarray, last: bool = False) -> np.ndarray:
        """Resample the next chunk; with `last`, also flush what the filter still holds."""
        chunk = np.ascontiguousarray(samples, dtype=np.float32)
        if self._stream is None:
            return chunk
        return self._stream.resample_chunk(chunk, last=last)
