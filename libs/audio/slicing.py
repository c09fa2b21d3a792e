"""The slice rule: slice k holds every frame whose start time falls in [k*slice, (k+1)*slice)."""

from __future__ import annotations

from typing import Final

DEFAULT_SLICE_MS: Final = 40.0


def first_frame_of_slice(slice_index: int, hop_length: int, sample_rate_hz: int, slice_ms: float = DEFAULT_SLICE_MS) -> int:
    """The first frame whose start time is at or after the start of slice `slice_index`."""
    slice_samples_x1000 = round(slice_ms * sample_rate_hz)
    start_x1000 = slice_index * slice_samples_x1000
    # smallest f with f*hop*1000 >= start_x1000
    return -(-start_x1000 // (hop_length * 1000))


def slice_bounds(frame_count: int, hop_length: int, sample_rate_hz: int, slice_ms: float = DEFAULT_SLICE_MS) -> list[tuple[int, int]]:
    """[start, end) frame ranges of every slice of an utterance of `frame_count` frames, in order."""
    bounds: list[tuple[int, int]] = []
    slice_index = 0
    start = 0
    while start < frame_count:
        end = min(frame_count, first_frame_of_slice(slice_index + 1, hop_length, sample_rate_hz, slice_ms))
        if end > start:
            bounds.append((start, end))
        start = end
        slice_index += 1
    return bounds
