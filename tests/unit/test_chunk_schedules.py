"""The acoustic worker's chunks line up with the vocoder's steps: each of the vocoder's steps can run
as soon as one more acoustic chunk is in, never waiting for a chunk after it, and no chunk covers
more than the step it unlocks needs, so a listener's next audio never waits on the step after's."""

from __future__ import annotations

import itertools

import pytest

from libs.audio.slicing import slice_bounds
from libs.voice.chunking import ACOUSTIC_SCHEDULE, VOCODER_SCHEDULE

HOP_LENGTH = 256
SAMPLE_RATE_HZ = 22_050
SENTENCE_FRAMES = 2_000
"""Long enough that no chunk looked at here is a sentence's last (which the vocoder takes whole)."""


def _frames_sent(chunk_end: int) -> int:
    """Frames the vocoder has once the acoustic mel up to `chunk_end` is cut into whole 40 ms slices."""
    return max(end for start, end in slice_bounds(SENTENCE_FRAMES, HOP_LENGTH, SAMPLE_RATE_HZ) if end <= chunk_end)


STEPS_CHECKED = 12
"""A dozen steps: past the schedules' growth (both reach their largest step by the fourth)."""


@pytest.mark.parametrize("step", range(STEPS_CHECKED))
def test_each_vocoder_step_needs_no_acoustic_chunk_beyond_the_next(step: int) -> None:
    vocoder_ends = list(itertools.accumulate(VOCODER_SCHEDULE.chunk_frames(index) for index in range(step + 1)))
    acoustic_ends = [end for _, end in ACOUSTIC_SCHEDULE.bounds(SENTENCE_FRAMES)]
    needed = vocoder_ends[step]
    # The acoustic chunk that unlocks this step is at most the step's own index: the first chunk
    # gives first audio, the second the listener's next audio, and so on.
    assert _frames_sent(acoustic_ends[step]) >= needed, (
        f"the vocoder's step {step} needs frames up to {needed}, but acoustic chunk {step} sends only "
        f"{_frames_sent(acoustic_ends[step])} in whole slices"
    )


def test_the_second_acoustic_chunk_is_short() -> None:
    # A started listener waits on it: it is a step of about 100 frames, not the rest of the sentence.
    assert ACOUSTIC_SCHEDULE.chunk_frames(1) <= 128


@pytest.mark.parametrize("step", range(1, STEPS_CHECKED))
def test_no_acoustic_chunk_also_covers_the_next_vocoder_step(step: int) -> None:
    # The chunk in front of a step is that step's work and no more: one that also unlocked the step
    # after made every listener of a burst wait on twice the acoustic work at the same moment.
    vocoder_ends = list(itertools.accumulate(VOCODER_SCHEDULE.chunk_frames(index) for index in range(step + 2)))
    acoustic_ends = [end for _, end in ACOUSTIC_SCHEDULE.bounds(SENTENCE_FRAMES)]
    assert _frames_sent(acoustic_ends[step]) < vocoder_ends[step + 1], (
        f"acoustic chunk {step} sends frames up to {_frames_sent(acoustic_ends[step])}, enough for the vocoder's step "
        f"{step + 1} (up to {vocoder_ends[step + 1]}) as well as its step {step}"
    )
