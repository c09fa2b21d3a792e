"""Per-sentence vocoder bookkeeping: order, resume priming, sample indices and each sentence's tier (stand-in stream)."""

from __future__ import annotations

import numpy as np
import pytest

from libs.pb.tts.common.v1 import mel_pb2
from libs.voice.vocode_session import SentenceSession, StreamSlices
from libs.wire.errors import InvalidRequestError

HOP = 4


class RecordingStream:
    """Stand-in for VocoderStream: one sample per hop position, valued by its frame index, emitted from
    emit_from; each step emits everything but the last 2 frames (the end emits those too)."""

    def __init__(self, origin_frame: int, emit_from_frame: int) -> None:
        self.origin_frame, self.emit_from_frame = origin_frame, emit_from_frame
        self.received = origin_frame
        self.emitted = emit_from_frame
        self.ended = False
        self.done = False
        self.in_parts = False
        self.step_continues = False  # every step runs whole

    def add(self, mel: np.ndarray) -> None:
        self.received += mel.shape[1]

    def end(self) -> None:
        self.ended = True

    def step_ready(self) -> bool:
        return not self.done and (self.ended or self.received - 2 > self.emitted)

    def step(self) -> np.ndarray:
        if self.ended:
            self.done = True
            return self._emit(self.received)
        return self._emit(max(self.emitted, self.received - 2))  # 2 frames of look-ahead

    def _emit(self, until: int) -> np.ndarray:
        frames = np.arange(self.emitted, until)
        self.emitted = until
        return np.repeat(frames, HOP).astype(np.float32)


def _feed(session: SentenceSession, first: int, count: int, context_only: bool, is_last: bool) -> list:
    """Accept one slice, then run every step it made ready; the blocks returned."""
    session.accept(first, _frames(count), context_only=context_only, is_last=is_last)
    blocks = []
    while session.has_step():
        blocks.append(session.step())
    return [block for block in blocks if block is not None]


def _frames(count: int) -> np.ndarray:
    return np.zeros((80, count), dtype=np.float32)


def test_sample_indices_are_contiguous_and_cover_the_sentence() -> None:
    opened = []
    session = SentenceSession(0, 0, HOP, lambda o, e: opened.append((o, e)) or RecordingStream(o, e))
    blocks = []
    for first, count, last in [(0, 3, False), (3, 4, False), (7, 3, True)]:
        session.check_slice(first, context_only=False)
        blocks.extend(_feed(session, first, count, context_only=False, is_last=last))
    assert opened == [(0, 0)]
    samples = np.concatenate([b.samples for b in blocks])
    np.testing.assert_array_equal(samples, np.repeat(np.arange(10), HOP))
    assert [b.first_sample for b in blocks] == [0, 4, 20]
    assert blocks[-1].is_last and session.finished


def test_resume_primes_with_context_and_emits_from_the_first_real_slice() -> None:
    opened = []
    session = SentenceSession(3, 10, HOP, lambda o, e: opened.append((o, e)) or RecordingStream(o, e))
    session.check_slice(10, context_only=True)
    assert _feed(session, 10, 4, context_only=True, is_last=False) == []
    session.check_slice(14, context_only=False)
    [block] = _feed(session, 14, 4, context_only=False, is_last=True)
    assert opened == [(10, 14)]
    assert block.first_sample == 14 * HOP and block.is_last and session.finished
    np.testing.assert_array_equal(block.samples, np.repeat(np.arange(14, 18), HOP))


def test_gaps_context_after_audio_and_slices_after_the_end_are_rejected() -> None:
    session = SentenceSession(0, 0, HOP, RecordingStream)
    session.check_slice(0, context_only=False)
    _feed(session, 0, 3, context_only=False, is_last=False)
    with pytest.raises(InvalidRequestError, match="expected 3"):
        session.check_slice(5, context_only=False)
    with pytest.raises(InvalidRequestError, match="context-only"):
        session.check_slice(3, context_only=True)
    _feed(session, 3, 1, context_only=False, is_last=True)
    with pytest.raises(InvalidRequestError, match="already ended"):
        session.check_slice(4, context_only=False)


def _mel_slice(sentence: int, first: int, count: int, total: int) -> mel_pb2.MelSlice:
    return mel_pb2.MelSlice(
        utterance_id="u", sentence_index=sentence, first_frame=first, frame_count=count, n_mels=80,
        dtype=mel_pb2.MEL_DTYPE_FLOAT32, frames=_frames(count).T.tobytes(), is_last=first + count == total,
        sentence_frame_count=total,
    )  # fmt: skip


def test_each_sentence_opens_on_its_own_tier_and_keeps_it_to_its_end() -> None:
    opened: list[str] = []

    def opener(tier: str):  # type: ignore[no-untyped-def]
        if tier not in ("", "quality", "fast"):
            raise InvalidRequestError(f"no {tier!r} tier here", field="tier")

        def open_stream(origin: int, emit_from: int) -> RecordingStream:
            opened.append(tier)
            return RecordingStream(origin, emit_from)

        return open_stream

    slices = StreamSlices(80, HOP, opener)
    assert slices.accept(_mel_slice(0, 0, 4, 8), False, "quality").tier == "quality"
    with pytest.raises(InvalidRequestError, match="began in tier 'quality'"):  # never a seam inside a sentence
        slices.accept(_mel_slice(0, 4, 4, 8), False, "fast")
    session = slices.accept(_mel_slice(0, 4, 4, 8), False, "quality")
    while session.has_step():
        session.step()
    assert slices.accept(_mel_slice(1, 0, 4, 4), False, "fast").tier == "fast"  # the next sentence may change tier
    while slices.session is not None and slices.session.has_step():
        slices.session.step()
    with pytest.raises(InvalidRequestError, match="tier"):
        slices.accept(_mel_slice(2, 0, 4, 4), False, "turbo")
    assert opened == ["quality", "fast"]
