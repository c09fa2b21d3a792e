"""Gathering a sentence's audio head (its first `head_ms` of samples) from the vocoder's pieces, to cache it."""

from __future__ import annotations

import numpy as np

from libs.cache.codec import AudioHead


class HeadCollector:
    """Gathers the first `head_samples` of one sentence from the vocoder's pieces, in order."""

    def __init__(self, head_samples: int, sample_rate_hz: int, model_version: str) -> None:
        self._wanted = head_samples
        self._sample_rate_hz = sample_rate_hz
        self._model_version = model_version
        self._pieces: list[np.ndarray] = []
        self._count = 0
        self.spoiled = False
        """Set when pieces came from another model or rate (a failover): nothing is worth keeping."""

    def add(self, samples: np.ndarray, sample_rate_hz: int, model_version: str, is_last: bool) -> AudioHead | None:
        """Take the sentence's next samples; returns the head once it is complete (or the sentence ended)."""
        if self.spoiled or self._count >= self._wanted:
            return None
        if model_version != self._model_version or sample_rate_hz != self._sample_rate_hz or not model_version:
            self.spoiled = True
            return None
        take = samples[: self._wanted - self._count]
        self._pieces.append(np.asarray(take, dtype=np.float32))
        self._count += len(take)
        if self._count < self._wanted and not is_last:
            return None
        self._count = self._wanted  # complete: later pieces are ignored
        return AudioHead(self._model_version, self._sample_rate_hz, np.concatenate(self._pieces))
