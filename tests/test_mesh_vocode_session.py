"""Per-sentence vocoder bookkeeping: order, resume priming and sample indices (stand-in stream)."""

from __future__ import annotations

import numpy as np
import pytest

from libs.mesh.errors import InvalidRequestError
from libs.mesh.vocode_session import SentenceSession

HOP = 4


class RecordingStream:
    """Stand-in for VocoderStream: one sample per hop position, valued by its frame index, emitted from emit_from."""

    def __init__(self, origin_frame: int, emit_from_frame: int) -> None:
        self.origin_frame, self.emit_from_frame = origin_frame, emit_from_frame
        self.received = origin_frame
        self.emitted = emit_from_frame

    def push(self, mel: np.ndarray) -> np.ndarray:
        self.received += mel.shape[1]
        return self._emit(max(self.emitted, self.received - 2))  # 2 frames of look-ahead

    def finish(self) -> np.ndarray:
        return self._emit(self.received)

    def _emit(self, until: int) -> np.ndarray:
        frames = np.arange(self.emitted, until)
        self.emitted = until
        return np.repeat(frames, HOP).astype(np.float32)


def _frames(count: int) -> np.ndarray:
    return np.zeros((80, count), dtype=np.float32)


def test_sample_indices_are_contiguous_and_cover_the_sentence() -> None:
    opened = []
    session = SentenceSession(0, 0, HOP, lambda o, e: opened.append((o, e)) or RecordingStream(o, e))
    blocks = []
    for first, count, last in [(0, 3, False), (3, 4, False), (7, 3, True)]:
        session.check_slice(first, context_only=False)
        blocks.append(session.feed(first, _frames(count), context_only=False, is_last=last))
    blocks = [b for b in blocks if b is not None]
    assert opened == [(0, 0)]
    samples = np.concatenate([b.samples for b in blocks])
    np.testing.assert_array_equal(samples, np.repeat(np.arange(10), HOP))
    assert [b.first_sample for b in blocks] == [0, 4, 20]
    assert blocks[-1].is_last and session.finished


def test_resume_primes_with_context_and_emits_from_the_first_real_slice() -> None:
    opened = []
    session = SentenceSession(3, 10, HOP, lambda o, e: opened.append((o, e)) or RecordingStream(o, e))
    session.check_slice(10, context_only=True)
    assert session.feed(10, _frames(4), context_only=True, is_last=False) is None
    session.check_slice(14, context_only=False)
    block = session.feed(14, _frames(4), context_only=False, is_last=True)
    assert opened == [(10, 14)]
    assert block is not None and block.first_sample == 14 * HOP
    np.testing.assert_array_equal(block.samples, np.repeat(np.arange(14, 18), HOP))


def test_gaps_context_after_audio_and_slices_after_the_end_are_rejected() -> None:
    session = SentenceSession(0, 0, HOP, RecordingStream)
    session.check_slice(0, context_only=False)
    session.feed(0, _frames(3), context_only=False, is_last=False)
    with pytest.raises(InvalidRequestError, match="expected 3"):
        session.check_slice(5, context_only=False)
    with pytest.raises(InvalidRequestError, match="context-only"):
        session.check_slice(3, context_only=True)
    session.feed(3, _frames(1), context_only=False, is_last=True)
    with pytest.raises(InvalidRequestError, match="already ended"):
        session.check_slice(4, context_only=False)
