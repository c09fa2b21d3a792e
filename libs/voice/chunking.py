"""Exact chunked inference over frame sequences, for any stack of non-causal convolutions.

A network whose every output frame depends on at most `context_frames` input frames on each side
gives, for the output frames [start, end), exactly what it gives on the whole sequence when it is
fed the input window [start - context, end + context] clipped to the sequence, and the output is
trimmed back to [start, end). Clipping at the sequence's true edges keeps the network's normal
edge padding there, which is what whole-sequence inference does too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

# Vocoder side: steps of a stateful stream (libs.models.streaming), which never recomputes context;
# its output trails the mel by the network's lag (`VocoderEngine.lag_frames`). The first step is small,
# so first audio comes early, and so is the second: a listener's first audio is held until the audio
# it holds outlasts the wait for its next piece, and on a small CPU (a quarter of a core) a second step
# of 64 frames held a lone listener's first audio about a quarter longer than one of 32 does (0.6 s
# against 0.49; docs/performance.md). Later steps double up to 128 frames (1.5 s of audio), few enough
# steps per sentence that their fixed costs (a message, a scheduling decision) stay small, short enough
# that no step holds a core for long. Where the activations of a step that wide outgrow a core's cache,
# the onnxruntime path runs it in slices (libs.models.onnx_stream); docs/performance.md has the
# measurements.
DEFAULT_FIRST_CHUNK_FRAMES: Final = 32
DEFAULT_CHUNK_GROWTH: Final = 2.0
DEFAULT_MAX_CHUNK_FRAMES: Final = 128
DEFAULT_FIRST_CHUNKS: Final = 2
# A stream's last step (whatever was left when the sentence ended) is padded to a multiple of this: a
# convolution width the CPU library has not seen costs far more to set up than the padding costs to
# compute, and a few buckets stay within its cache of set-ups.
LAST_STEP_BUCKET_FRAMES: Final = 16
# Acoustic side: each chunk ends where the vocoder's next step can run, so a listener's next audio
# waits on no more acoustic work than it needs. The vocoder's steps end at frames 32, 64, 128, 256 and
# then every 128 frames (384, 512, ...), and the 40 ms slices that hold those frames end at 32, 66, 128,
# 259 (22050 Hz / 256: a slice is 3.45 frames), so chunks of 33, 33, then doubling to 132 (ends 33, 66,
# 132, 264, then every 132: 396, 528, ...) unlock each of the vocoder's steps with one chunk more
# (tests/unit/test_chunk_schedules.py checks it). In a burst the listeners that started together reach
# the same step at about the same time, each waiting on its own chunk and vocoder step: a chunk that
# also covered the step after (264 frames where 132 unlock the step) made that wait half as long again,
# and it was where bursts below capacity ran dry (docs/performance.md). The flow streams (no context is
# recomputed) and a chunk's fixed cost is about a millisecond, so chunks no larger than the step they
# feed cost little.
DEFAULT_ACOUSTIC_FIRST_CHUNK_FRAMES: Final = 33
DEFAULT_ACOUSTIC_CHUNK_GROWTH: Final = 2.0
DEFAULT_ACOUSTIC_MAX_CHUNK_FRAMES: Final = 132


@dataclass(frozen=True)
class Window:
    """Input frames to feed the network so that output frames [start, end) come out exact."""

    input_start: int
    """First input frame fed (inclusive)."""
    input_end: int
    """Last input frame fed (exclusive)."""
    start: int
    """First output frame kept (inclusive)."""
    end: int
    """Last output frame kept (exclusive)."""

    @property
    def trim_left(self) -> int:
        """Output frames to drop at the front of the window's output."""
        return self.start - self.input_start

    @property
    def kept(self) -> int:
        """Output frames kept."""
        return self.end - self.start


def context_window(start: int, end: int, total_frames: int, context_frames: int) -> Window:
    """The input window that makes output frames [start, end) of a `total_frames` sequence exact."""
    if not 0 <= start < end <= total_frames:
        raise ValueError(f"need 0 <= start < end <= total_frames, got {start}, {end}, {total_frames}")
    return Window(max(0, start - context_frames), min(total_frames, end + context_frames), start, end)


@dataclass(frozen=True)
class ChunkSchedule:
    """How many frames each successive chunk of a stream covers.

    The first chunk is small so that first audio comes early; later chunks grow geometrically so
    that the context recomputed around each chunk stays a small share of the work, while each
    chunk still finishes long before the audio already sent has played.
    """

    first_chunk_frames: int = DEFAULT_FIRST_CHUNK_FRAMES
    """Frames in the first chunk."""
    growth: float = DEFAULT_CHUNK_GROWTH
    """Each chunk may be this many times the previous one."""
    max_chunk_frames: int = DEFAULT_MAX_CHUNK_FRAMES
    """Upper bound of a chunk, so that no single step stalls the stream."""
    first_chunks: int = 1
    """Chunks of the first chunk's size before they grow."""

    def __post_init__(self) -> None:
        if self.first_chunk_frames < 1 or self.max_chunk_frames < self.first_chunk_frames or self.growth < 1.0 or self.first_chunks < 1:
            raise ValueError(f"invalid chunk schedule {self}")

    def chunk_frames(self, chunk_index: int) -> int:
        """Target size of chunk number `chunk_index` (0-based)."""
        size = self.first_chunk_frames * self.growth ** max(0, chunk_index - self.first_chunks + 1)
        return int(min(self.max_chunk_frames, size))

    def step_ends(self, total_frames: int, lag_frames: int = 0) -> list[int]:
        """Where each step of a streaming network ends in a sentence of `total_frames`: the first takes
        the first chunk and the network's `lag_frames` of prior samples, each later one the next chunk.
        A step that would leave less than half of the next chunk takes the rest too (within
        `max_chunk_frames`): a step's fixed cost buys little for a few frames, and a short sentence's
        first step then gives its listener the whole sentence at once. Fixed by the sentence's length
        alone, so a resumed stream replays the very same steps."""
        ends: list[int] = []
        position = 0
        while position < total_frames:
            index = len(ends)
            end = min(total_frames, position + self.chunk_frames(index) + (lag_frames if index == 0 else 0))
            rest = total_frames - end
            if 0 < rest < self.chunk_frames(index + 1) / 2 and end - position + rest <= self.max_chunk_frames + lag_frames:
                end = total_frames
            ends.append(end)
            position = end
        return ends

    def bounds(self, total_frames: int, start_frame: int = 0) -> list[tuple[int, int]]:
        """[start, end) of the chunks that cover frames start_frame..total_frames.

        Chunk boundaries are fixed by frame index from the start of the sentence, whatever
        `start_frame` is: a stream resumed mid-sentence recomputes the chunk it resumes in over
        the very same window, so its samples are bit-identical to the uninterrupted stream's.
        """
        bounds: list[tuple[int, int]] = []
        start = 0
        while start < total_frames:
            end = min(total_frames, start + self.chunk_frames(len(bounds)))
            bounds.append((start, end))
            start = end
        return [(begin, end) for begin, end in bounds if end > start_frame]

    def version_part(self) -> str:
        """The schedule as a model-version part: where a sentence's steps end moves the output by
        float32 round-off (each step's width is its own arithmetic)."""
        return f"steps={self.first_chunk_frames},{self.growth:g},{self.max_chunk_frames},{self.first_chunks}"


ACOUSTIC_SCHEDULE: Final = ChunkSchedule(
    first_chunk_frames=DEFAULT_ACOUSTIC_FIRST_CHUNK_FRAMES,
    growth=DEFAULT_ACOUSTIC_CHUNK_GROWTH,
    max_chunk_frames=DEFAULT_ACOUSTIC_MAX_CHUNK_FRAMES,
    first_chunks=DEFAULT_FIRST_CHUNKS,  # one chunk per vocoder step
)
"""Default chunking of the acoustic engine's mel."""
VOCODER_SCHEDULE: Final = ChunkSchedule(first_chunks=DEFAULT_FIRST_CHUNKS)
"""Default chunking of the vocoder engine's streams."""
