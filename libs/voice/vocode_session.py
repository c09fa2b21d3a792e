"""Per-sentence bookkeeping of a vocoder stream: frame order, context-only priming, sample indices.

A resumed stream may start mid-sentence: its first slices are sent as context only (vocoded as
left context but not returned), so the returned samples are exactly those the broken stream would
have produced. Context slices are held until the first slice to emit arrives, because only then is
it known where emission starts. Samples carry their index within the sentence so the gateway can
drop anything the client already has.

Taking a slice (`accept`) is bookkeeping; vocoding (`step`) is model work, one step at a time, so a
server answers after every step even when one message brings a whole sentence.

A worker trusts no caller: `StreamSlices` checks every slice of a stream (its utterance, sentence
and frame numbers, its bands and values) before any of it reaches a session, so a bad one is an
InvalidRequestError that says what to fix, never a crash or a model fed garbage.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from libs.wire.errors import InvalidRequestError, echo
from libs.wire.limits import MAX_ID_CHARS, MAX_SENTENCE_FRAMES
from libs.wire.mel_slices import checked_frames


class VocoderStreamLike(Protocol):
    """What a session needs from a vocoder stream (libs.voice.vocoder_engine.VocoderStream)."""

    def add(self, mel: np.ndarray) -> None: ...

    def end(self) -> None: ...

    def step_ready(self) -> bool: ...

    def step(self) -> np.ndarray: ...

    in_parts: bool

    @property
    def step_continues(self) -> bool: ...

    @property
    def done(self) -> bool: ...

    @property
    def next_step_frames(self) -> int: ...


OpenStream = Callable[[int, int], VocoderStreamLike]
"""`open_stream(origin_frame, emit_from_frame)`, as VocoderEngine.open_stream."""
OpenerOfTier = Callable[[str], OpenStream]
"""The `OpenStream` of a voice's tier ("": the stream's own; libs.voice.tiers)."""


@dataclass(frozen=True)
class SampleBlock:
    """Samples to send, with their place in the sentence."""

    first_sample: int
    """Index of samples[0] within the sentence's waveform."""
    samples: np.ndarray
    """float32 mono samples."""
    is_last: bool
    """Whether these end the sentence."""
    step_continues: bool = False
    """Whether more parts of the same step follow (`SentenceSession.in_parts`)."""


class SentenceSession:
    """One sentence's slices going into one vocoder stream. `step` does model work: call it off the event loop."""

    def __init__(self, sentence_index: int, first_frame: int, hop_length: int, open_stream: OpenStream, tier: str = "") -> None:
        self.sentence_index = sentence_index
        self.tier = tier
        """The voice's tier it is spoken in, as its first request named it ("": the stream's)."""
        self._hop_length = hop_length
        self._open_stream = open_stream
        self._origin_frame = first_frame
        self._next_frame = first_frame
        self._ended = False
        self._context: list[np.ndarray] = []
        self._stream: VocoderStreamLike | None = None
        self._next_sample = 0

    @property
    def next_sample(self) -> int:
        """Index in the sentence's waveform of the next sample `step` gives."""
        return self._next_sample

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
                f"sentence {self.sentence_index}: slice starts at frame {first_frame}, expected {self._next_frame} "
                "(no gaps, no overlaps)"
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

    @property
    def next_step_frames(self) -> int:
        """Mel frames the next step takes (what it costs by)."""
        return self._stream.next_step_frames if self._stream is not None else 0

    @property
    def step_continues(self) -> bool:
        """Whether a step is half done: `step` runs its next part whatever `in_parts` now says."""
        return self._stream is not None and self._stream.step_continues

    @property
    def in_parts(self) -> bool:
        """Whether the next step taken runs a part at a time (libs.voice.vocoder_engine.VocoderStream.in_parts)."""
        return self._stream is not None and self._stream.in_parts

    @in_parts.setter
    def in_parts(self, value: bool) -> None:
        if self._stream is not None:
            self._stream.in_parts = value

    def step(self) -> SampleBlock | None:
        """Run one vocoding step; return its samples, if any (the sentence's last block always)."""
        assert self._stream is not None, "step() before any slice to emit"
        samples = self._stream.step()
        is_last = self._stream.done
        if not len(samples) and not is_last:
            return None
        block = SampleBlock(first_sample=self._next_sample, samples=samples, is_last=is_last, step_continues=self._stream.step_continues)
        self._next_sample += len(samples)
        return block


class StreamSlices:
    """One Vocode stream's slices, each checked, then handed to its sentence's session.

    Sentences of one utterance come in increasing order, each one whole before the next begins.
    Every slice of a sentence names the same total frame count (at most MAX_SENTENCE_FRAMES), lies
    inside it, and the one that reaches its end is marked is_last. Context-only slices lie inside
    the sentence too, which bounds how much context a resume may send.
    """

    def __init__(self, n_mels: int, hop_length: int, opener: OpenerOfTier) -> None:
        self._n_mels = n_mels
        self._hop_length = hop_length
        self._opener = opener
        self._utterance_id: str | None = None
        self._frame_count = 0  # of the current sentence
        self.session: SentenceSession | None = None
        """The sentence being vocoded (None before the first slice)."""

    @property
    def unfinished(self) -> SentenceSession | None:
        """The session of a sentence that has not ended, if any (a stream must not end inside one)."""
        session = self.session
        return session if session is not None and not session.finished else None

    def accept(self, mel_slice: Any, context_only: bool, tier: str = "") -> SentenceSession:
        """Check `mel_slice` (a MelSlice), spoken in `tier` ("": the stream's), and give it to its
        sentence's session; returns that session. A sentence keeps the tier its first slice came with."""
        self._check_utterance(mel_slice.utterance_id)
        session = self.session
        new_sentence = session is None or mel_slice.sentence_index != session.sentence_index
        if new_sentence:
            self._check_new_sentence(mel_slice)
        frames = checked_frames(mel_slice, self._n_mels)
        self._check_frames(mel_slice, frame_count=mel_slice.sentence_frame_count if new_sentence else self._frame_count)
        if new_sentence:
            open_stream = self._opener(tier)  # an unknown tier is refused before the sentence is taken
            session = SentenceSession(mel_slice.sentence_index, mel_slice.first_frame, self._hop_length, open_stream, tier)
        assert session is not None
        if tier != session.tier:
            raise InvalidRequestError(
                f"sentence {session.sentence_index} began in tier {echo(session.tier)}; every request of a sentence "
                f"names the same tier (this one names {echo(tier)})"
            )
        session.check_slice(mel_slice.first_frame, context_only)
        session.accept(mel_slice.first_frame, frames, context_only, mel_slice.is_last)
        self.session, self._frame_count = session, mel_slice.sentence_frame_count
        return session

    def _check_utterance(self, utterance_id: str) -> None:
        if self._utterance_id is None:
            if len(utterance_id) > MAX_ID_CHARS:
                raise InvalidRequestError(f"utterance_id is {len(utterance_id)} characters long; use at most {MAX_ID_CHARS}")
            self._utterance_id = utterance_id
        elif utterance_id != self._utterance_id:
            raise InvalidRequestError("every slice of a stream must carry the utterance_id of its first slice")

    def _check_new_sentence(self, mel_slice: Any) -> None:
        session, index = self.session, mel_slice.sentence_index
        if session is not None and not session.finished:
            raise InvalidRequestError(f"sentence {session.sentence_index} ended without a slice marked is_last")
        if index < 0:
            raise InvalidRequestError(f"sentence_index {index} is negative; sentences count from 0")
        if session is not None and index < session.sentence_index:
            raise InvalidRequestError(
                f"sentence {index} came after sentence {session.sentence_index}; send sentences in increasing order"
            )
        if not 1 <= mel_slice.sentence_frame_count <= MAX_SENTENCE_FRAMES:
            raise InvalidRequestError(
                f"sentence_frame_count {mel_slice.sentence_frame_count} is outside 1..{MAX_SENTENCE_FRAMES}"
            )

    def _check_frames(self, mel_slice: Any, frame_count: int) -> None:
        """The slice's place in its sentence: inside it, with is_last exactly on the sentence's last frame."""
        index = mel_slice.sentence_index
        if mel_slice.sentence_frame_count != frame_count:
            raise InvalidRequestError(
                f"sentence {index}: slice says the sentence has {mel_slice.sentence_frame_count} frames; "
                f"its first slice said {frame_count}"
            )
        if mel_slice.slice_index < 0 or mel_slice.first_frame < 0:
            raise InvalidRequestError(f"sentence {index}: slice_index and first_frame must not be negative")
        end = mel_slice.first_frame + mel_slice.frame_count
        if end > frame_count:
            raise InvalidRequestError(f"sentence {index}: slice ends at frame {end}, past the sentence's {frame_count} frames")
        if mel_slice.is_last != (end == frame_count):
            raise InvalidRequestError(
                f"sentence {index}: the slice that ends at frame {frame_count} (the sentence's last) and only that "
                f"one is marked is_last; this one ends at frame {end} with is_last={mel_slice.is_last}"
            )
