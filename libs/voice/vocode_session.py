"""Per-sentence bookkeeping of a vocoder stream: frame order, context-only priming, sample indices.

A resumed stream may start mid-sentence: its first slices are sent as context only (vocoded as
left context but not returned), so the returned samples are exactly those the broken stream would
have produced. Context slices are held until the first slice to emit arrives, because only then is
it known where emission starts. Samples carry their index within the sentence so the gateway can
drop anything the client already has.

Taking a slice (`accept`) is bookkeeping; vocoding (`step`) is model work, one step at a time, so a
server answers after every step even when one message brings a whole sentence.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol

import numpy as np

from libs.wire.errors import InvalidRequestError


class VocoderStreamLike(Protocol):
    """What a session needs from a vocoder stream (libs.voice.vocoder_engine.VocoderStream)."""

    def add(self, mel: np.ndarray) -> None: ...

    def end(self) -> None: ...

    def step_ready(self) -> bool: ...

    def step(self) -> np.ndarray: ...

    @property
    def done(self) -> bool: ...


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
    """One sentence's slices going into one vocoder stream. `step` does model work: call it off the event loop."""

    def __init__(self, sentence_index: int, first_frame: int, hop_length: int, open_stream: OpenStream) -> None:
        self.sentence_index = sentence_index
        self._hop_length = hop_length
        self._open_stream = open_stream
        self._origin_frame = first_frame
        self._next_frame = first_frame
        self._ended = False
        self._context: list[np.ndarray] = []
        self._stream: VocoderStreamLike | None = None
        self._next_sample = 0

    @property
    def finished(self) -> bool:
        """Whether the sentence's last samples have been produced."""
        return self._stream is not None and self._stream.done

    def check_slice(self, first_frame: int, context_only: bool) -> None:
        """Reject a slice out of order, after the sentence's end, or context after emitted audio."""
        if self._ended:
            raise InvalidRequestError(f"sentence {self.sentence_index} already ended with is_last")
        if first_frame != self._next_frame:
            raise InvalidRequestError(
                f"sentence {self.sentence_index}: slice starts at frame {first_frame}, expected {self._next_frame} (no gaps)"
            )
        if context_only and self._stream is not None:
            raise InvalidRequestError("context-only slices must come before the first slice to emit")

    def accept(self, first_frame: int, frames: np.ndarray, context_only: bool, is_last: bool) -> None:
        """Take a checked slice [n_mels, n] (no model work)."""
        self._next_frame = first_frame + frames.shape[1]
        if context_only:
            if is_last:
                raise InvalidRequestError(f"sentence {self.sentence_index} ended with context-only slices")
            self._context.append(frames)
            return
        if self._stream is None:
            try:
                self._stream = self._open_stream(self._origin_frame, first_frame)
            except ValueError as error:  # e.g. too little context before a resumed stream's first emitted frame
                raise InvalidRequestError(str(error)) from None
            self._next_sample = first_frame * self._hop_length
            if self._context:
                self._stream.add(np.concatenate(self._context, axis=1))
                self._context = []
        self._stream.add(frames)
        if is_last:
            self._ended = True
            self._stream.end()

    def has_step(self) -> bool:
        """Whether `step` has work to do now."""
        return self._stream is not None and self._stream.step_ready()

    def step(self) -> SampleBlock | None:
        """Run one vocoding step; return its samples, if any (the sentence's last block always)."""
        assert self._stream is not None, "step() before any slice to emit"
        samples = self._stream.step()
        is_last = self._stream.done
        if not len(samples) and not is_last:
            return None
        block = SampleBlock(first_sample=self._next_sample, samples=samples, is_last=is_last)
        self._next_sample += len(samples)
        return block
