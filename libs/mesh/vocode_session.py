"""Per-sentence bookkeeping of a vocoder stream: frame order, context-only priming, sample indices.

A resumed stream may start mid-sentence: its first slices are sent as context only (vocoded as
left context but not returned), so the returned samples are exactly those the broken stream would
have produced. Context slices are held until the first slice to emit arrives, because only then is
it known where emission starts. Samples carry their index within the sentence so the gateway can
drop anything the client already has.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol

import numpy as np

from libs.mesh.errors import InvalidRequestError


class VocoderStreamLike(Protocol):
    """What a session needs from a vocoder stream (libs.voice.engine.VocoderStream)."""

    def push(self, mel: np.ndarray) -> np.ndarray: ...

    def finish(self) -> np.ndarray: ...


OpenStream = Callable[[int, int], VocoderStreamLike]
"""`open_stream(origin_frame, emit_from_frame)`, as VocoderEngine.open_stream."""


@dataclass(frozen=True)
class SampleBlock:
    """Samples to send, with their place in the sentence."""

    first_sample: int
    """Index of samples[0] within the sentence's waveform."""
    samples: np.ndarray
    """float32 mono samples."""
    is_last: bool
    """Whether these end the sentence."""


class SentenceSession:
    """One sentence's slices going into one vocoder stream. `feed` does model work: call it off the event loop."""

    def __init__(self, sentence_index: int, first_frame: int, hop_length: int, open_stream: OpenStream) -> None:
        self.sentence_index = sentence_index
        self.finished = False
        self._hop_length = hop_length
        self._open_stream = open_stream
        self._origin_frame = first_frame
        self._next_frame = first_frame
        self._context: list[np.ndarray] = []
        self._stream: VocoderStreamLike | None = None
        self._next_sample = 0

    def check_slice(self, first_frame: int, context_only: bool) -> None:
        """Reject a slice out of order, after the sentence's end, or context after emitted audio."""
        if self.finished:
            raise InvalidRequestError(f"sentence {self.sentence_index} already ended with is_last")
        if first_frame != self._next_frame:
            raise InvalidRequestError(
                f"sentence {self.sentence_index}: slice starts at frame {first_frame}, expected {self._next_frame} (no gaps)"
            )
        if context_only and self._stream is not None:
            raise InvalidRequestError("context-only slices must come before the first slice to emit")

    def feed(self, first_frame: int, frames: np.ndarray, context_only: bool, is_last: bool) -> SampleBlock | None:
        """Take a checked slice [n_mels, n]; return the samples that became exact, if any."""
        self._next_frame = first_frame + frames.shape[1]
        if context_only:
            if is_last:
                raise InvalidRequestError(f"sentence {self.sentence_index} ended with context-only slices")
            self._context.append(frames)
            return None
        samples = np.zeros(0, dtype=np.float32)
        if self._stream is None:
            try:
                self._stream = self._open_stream(self._origin_frame, first_frame)
            except ValueError as error:  # e.g. too little context before a resumed stream's first emitted frame
                raise InvalidRequestError(str(error)) from None
            self._next_sample = first_frame * self._hop_length
            if self._context:
                samples = self._stream.push(np.concatenate(self._context, axis=1))
                self._context = []
        samples = np.concatenate([samples, self._stream.push(frames)])
        if is_last:
            samples = np.concatenate([samples, self._stream.finish()])
            self.finished = True
        if not len(samples) and not is_last:
            return None
        block = SampleBlock(first_sample=self._next_sample, samples=samples, is_last=is_last)
        self._next_sample += len(samples)
        return block
