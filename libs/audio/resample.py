"""Streaming resampling with libsoxr (the `soxr` package), sentence by sentence.

Audio can be converted slice by slice as it is produced. Each sentence is resampled as its own
stream and flushed at its end, so a sentence's output length is exactly
round(input_length * out_rate / in_rate).
"""

from __future__ import annotations

import numpy as np


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
