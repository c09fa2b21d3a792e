"""The mel cache with a span around every lookup and write, so a trace shows what Redis cost."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from libs.mesh.mel_cache import MelCache
from libs.mesh.mel_codec import CachedMel
from libs.telemetry.tracing import ATTR_CACHE_HIT, SPAN_CACHE_LOOKUP, SPAN_CACHE_WRITE, step_span


class TracedMelCache(MelCache):
    """`MelCache` whose `get` and `put` are `tts.cache.lookup` / `tts.cache.write` spans."""

    async def get(self, key: str) -> CachedMel | None:
        """As MelCache.get, in a lookup span that records whether it hit."""
        with step_span(SPAN_CACHE_LOOKUP) as span:
            cached = await super().get(key)
            span.set_attribute(ATTR_CACHE_HIT, cached is not None)
            return cached

    async def put(self, key: str, mel: np.ndarray, phoneme_frames: Sequence[int] = ()) -> bool:
        """As MelCache.put, in a write span that records whether Redis took the value."""
        with step_span(SPAN_CACHE_WRITE, {"tts.cache.frames": int(mel.shape[-1])}) as span:
            stored = await super().put(key, mel, phoneme_frames)
            span.set_attribute("tts.cache.stored", stored)
            return stored
