"""Mel frames <-> MelSlice messages, cut by the 40 ms slice rule (docs/ARCHITECTURE.md, "40 ms slices").

The acoustic worker produces mel in chunks of any size, and a cache hit gives a whole sentence at
once; `SliceCutter` turns either into the same slices, so the vocoder sees identical input both ways.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

import numpy as np

from libs.audio.slicing import DEFAULT_SLICE_MS, slice_bounds
from libs.pb.tts.common.v1 import mel_pb2
from libs.wire.errors import InvalidRequestError
from libs.wire.limits import MAX_SLICE_FRAMES, MEL_VALUE_LIMIT

_WIRE_DTYPES: Final = {mel_pb2.MEL_DTYPE_FLOAT32: np.dtype("<f4"), mel_pb2.MEL_DTYPE_FLOAT16: np.dtype("<f2")}


class MelFormatError(InvalidRequestError, ValueError):
    """A MelSlice whose sizes, dtype or values do not add up (the sender's fault: INVALID_ARGUMENT)."""


@dataclass(frozen=True)
class CutSlice:
    """One slice's frames and place in its sentence."""

    slice_index: int
    """0-based slice index within the sentence."""
    first_frame: int
    """Sentence frame index of the slice's first frame."""
    frames: np.ndarray
    """Log-mel, float32 [n_mels, frame_count]."""
    is_last: bool
    """Whether this is the sentence's last slice."""


class SliceCutter:
    """Cuts a sentence's mel, arriving in chunks of any size from `start_frame` on, into slices."""

    def __init__(
        self,
        frame_count: int,
        hop_length: int,
        sample_rate_hz: int,
        slice_ms: float = DEFAULT_SLICE_MS,
        start_frame: int = 0,
    ) -> None:
        if not 0 <= start_frame <= frame_count:
            raise ValueError(f"start_frame {start_frame} is outside the sentence's {frame_count} frames")
        bounds = slice_bounds(frame_count, hop_length, sample_rate_hz, slice_ms)
        # A resumed sentence starts inside a slice: that slice is sent from start_frame on, so slice
        # indices stay those of the full sentence.
        self._pending = [
            (index, max(start, start_frame), end) for index, (start, end) in enumerate(bounds) if end > start_frame
        ]
        self._last_index = len(bounds) - 1
        self._buffer: list[np.ndarray] = []
        self._buffered_from = start_frame
        self._buffered_frames = 0
        self.frame_count = frame_count

    def push(self, mel: np.ndarray) -> list[CutSlice]:
        """Add the next frames ([n_mels, n], in order); returns every slice that is now complete."""
        if mel.shape[1]:
            self._buffer.append(np.asarray(mel, dtype=np.float32))
            self._buffered_frames += mel.shape[1]
        available_end = self._buffered_from + self._buffered_frames
        if available_end > self.frame_count:
            raise ValueError(f"received frames up to {available_end}, beyond the sentence's {self.frame_count}")
        ready: list[CutSlice] = []
        while self._pending and self._pending[0][2] <= available_end:
            index, start, end = self._pending.pop(0)
            ready.append(CutSlice(index, start, self._take(end - start), index == self._last_index))
        return ready

    @property
    def done(self) -> bool:
        """Whether every slice has been cut."""
        return not self._pending

    def _take(self, frame_count: int) -> np.ndarray:
        merged = np.concatenate(self._buffer, axis=1) if len(self._buffer) > 1 else self._buffer[0]
        taken, rest = merged[:, :frame_count], merged[:, frame_count:]
        self._buffer = [rest] if rest.shape[1] else []
        self._buffered_from += frame_count
        self._buffered_frames -= frame_count
        return taken


def cut_whole_mel(
    mel: np.ndarray, hop_length: int, sample_rate_hz: int, slice_ms: float = DEFAULT_SLICE_MS, start_frame: int = 0
) -> list[CutSlice]:
    """All slices of a complete sentence mel [n_mels, frames], from `start_frame` on."""
    cutter = SliceCutter(mel.shape[1], hop_length, sample_rate_hz, slice_ms, start_frame)
    return cutter.push(mel[:, start_frame:])


def to_message(
    cut: CutSlice,
    *,
    utterance_id: str,
    sentence_index: int,
    sentence_frame_count: int,
    dtype: int = mel_pb2.MEL_DTYPE_FLOAT32,
    phoneme_frames: Sequence[int] | None = None,
) -> mel_pb2.MelSlice:
    """A MelSlice message for `cut`; frames go frame-major in `dtype`."""
    wire = _WIRE_DTYPES.get(dtype)
    if wire is None:
        raise MelFormatError(f"unsupported mel dtype {dtype}")
    message = mel_pb2.MelSlice(
        utterance_id=utterance_id,
        sentence_index=sentence_index,
        slice_index=cut.slice_index,
        first_frame=cut.first_frame,
        frame_count=cut.frames.shape[1],
        n_mels=cut.frames.shape[0],
        dtype=dtype,
        frames=np.ascontiguousarray(cut.frames.T, dtype=wire).tobytes(),
        is_last=cut.is_last,
        sentence_frame_count=sentence_frame_count,
    )
    if phoneme_frames is not None:
        message.alignment.phoneme_frames.extend(int(count) for count in phoneme_frames)
    return message


def frames_of(message: mel_pb2.MelSlice) -> np.ndarray:
    """The slice's frames as float32 [n_mels, frame_count]; MelFormatError if the sizes disagree."""
    wire = _WIRE_DTYPES.get(message.dtype)
    if wire is None:
        raise MelFormatError(f"mel slice has unsupported dtype {message.dtype}")
    if message.n_mels <= 0 or message.frame_count < 0:
        raise MelFormatError(f"mel slice has n_mels={message.n_mels}, frame_count={message.frame_count}")
    expected = message.n_mels * message.frame_count * wire.itemsize
    if len(message.frames) != expected:
        raise MelFormatError(
            f"mel slice holds {len(message.frames)} bytes; {message.frame_count} frames x {message.n_mels} bands "
            f"of {wire.itemsize} bytes need {expected}"
        )
    values = np.frombuffer(message.frames, dtype=wire).reshape(message.frame_count, message.n_mels)
    return values.T.astype(np.float32)


def checked_frames(message: mel_pb2.MelSlice, n_mels: int) -> np.ndarray:
    """The frames of a slice from an untrusted sender, as float32 [n_mels, frame_count]; MelFormatError
    unless they are `n_mels` bands of 1 to MAX_SLICE_FRAMES frames of finite log-mel values."""
    if message.n_mels != n_mels:
        raise MelFormatError(f"mel slice has {message.n_mels} bands; this model takes {n_mels}")
    if not 1 <= message.frame_count <= MAX_SLICE_FRAMES:
        raise MelFormatError(f"mel slice has frame_count {message.frame_count}; a slice holds 1 to {MAX_SLICE_FRAMES} frames")
    frames = frames_of(message)
    if not np.isfinite(frames).all():
        raise MelFormatError(f"mel slice {message.slice_index} holds NaN or infinite values; send finite log-mel")
    peak = float(np.abs(frames).max())
    if peak > MEL_VALUE_LIMIT:
        raise MelFormatError(
            f"mel slice {message.slice_index} holds a value of magnitude {peak:g}; log-mel values lie within ±{MEL_VALUE_LIMIT:g}"
        )
    return frames

