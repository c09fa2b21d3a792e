"""Whether a cached sentence suits the models about to read it (docs/ARCHITECTURE.md, "Cache").

The codec (libs.cache.codec) checks that a value is well formed; these check that it is a mel this
voice's vocoder can take for this very sentence, and a head this vocoder could have made. Redis is
shared and outlives deployments, so the pipeline trusts neither: an entry that fails is deleted
and the sentence synthesised again. Each check returns what is wrong, or None.
"""

from __future__ import annotations

from typing import Final

import numpy as np

from libs.cache.codec import AudioHead, CachedMel
from libs.wire.limits import MAX_SENTENCE_FRAMES, MEL_VALUE_LIMIT

SAMPLE_LIMIT: Final = 4.0
"""Largest magnitude of a cached sample: vocoder output stays within ±1 (a little over on clipping peaks)."""


def mel_problem(cached: CachedMel, *, n_mels: int, phoneme_count: int) -> str | None:
    """What makes `cached` unusable as the mel of a sentence of `phoneme_count` phoneme ids for a
    model of `n_mels` bands, or None."""
    mel = cached.mel
    if mel.ndim != 2 or mel.shape[0] != n_mels:
        return f"mel has shape {list(mel.shape)}; the model takes {n_mels} bands"
    frame_count = mel.shape[1]
    if not 1 <= frame_count <= MAX_SENTENCE_FRAMES:
        return f"mel has {frame_count} frames; a sentence has 1 to {MAX_SENTENCE_FRAMES}"
    alignment = cached.phoneme_frames
    if len(alignment) != phoneme_count:
        return f"alignment covers {len(alignment)} phoneme ids; the sentence has {phoneme_count}"
    if min(alignment) < 0 or sum(alignment) != frame_count:
        return f"alignment adds up to {sum(alignment)} frames; the mel has {frame_count}"
    if not np.isfinite(mel).all():
        return "mel holds values that are not finite"
    peak = float(np.abs(mel).max())
    if peak > MEL_VALUE_LIMIT:
        return f"mel holds a value of magnitude {peak:g}, beyond the ±{MEL_VALUE_LIMIT:g} of a log-mel"
    return None


def head_problem(head: AudioHead, *, sample_rate_hz: int, head_ms: float, frame_count: int, hop_length: int) -> str | None:
    """What makes `head` unusable as the first audio of a sentence of `frame_count` frames from a
    vocoder at `sample_rate_hz` with heads of `head_ms`, or None."""
    if head.sample_rate_hz != sample_rate_hz:
        return f"head is at {head.sample_rate_hz} Hz; the vocoder makes {sample_rate_hz} Hz"
    longest = min(round(head_ms / 1000.0 * sample_rate_hz), frame_count * hop_length)
    if len(head.samples) > longest:
        return f"head holds {len(head.samples)} samples; a head of this sentence holds at most {longest}"
    samples = head.samples
    if len(samples) and not (np.isfinite(samples).all() and float(np.abs(samples).max()) <= SAMPLE_LIMIT):
        return f"head holds samples that are not finite or beyond ±{SAMPLE_LIMIT:g}"
    return None
