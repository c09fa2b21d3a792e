"""Mel is cut into 40 ms slices the same way however it arrives, and survives the wire exactly."""

from __future__ import annotations

import numpy as np
import pytest

from libs.audio.slicing import slice_bounds
from libs.pb.tts.common.v1 import mel_pb2
from libs.wire.mel_slices import MelFormatError, SliceCutter, cut_whole_mel, frames_of, to_message

HOP, RATE = 256, 22050


def _mel(frames: int) -> np.ndarray:
    return np.arange(80 * frames, dtype=np.float32).reshape(80, frames) / 100.0


@pytest.mark.parametrize("chunk_frames", [1, 3, 7, 50, 200])
def test_chunked_arrival_gives_the_same_slices_as_a_whole_mel(chunk_frames: int) -> None:
    mel = _mel(101)
    whole = cut_whole_mel(mel, HOP, RATE)
    cutter = SliceCutter(101, HOP, RATE)
    chunked = []
    for start in range(0, 101, chunk_frames):
        chunked += cutter.push(mel[:, start : start + chunk_frames])
    assert cutter.done
    assert [(c.slice_index, c.first_frame, c.is_last) for c in chunked] == [
        (c.slice_index, c.first_frame, c.is_last) for c in whole
    ]
    np.testing.assert_array_equal(np.concatenate([c.frames for c in chunked], axis=1), mel)
    assert [(c.first_frame, c.first_frame + c.frames.shape[1]) for c in whole] == slice_bounds(101, HOP, RATE)
    assert {c.frames.shape[1] for c in whole[:-1]} <= {3, 4}
    assert [c.is_last for c in whole].count(True) == 1 and whole[-1].is_last


def test_resumed_sentence_starts_mid_slice_and_keeps_slice_indices() -> None:
    mel = _mel(40)
    full = cut_whole_mel(mel, HOP, RATE)
    resumed = cut_whole_mel(mel, HOP, RATE, start_frame=9)
    assert resumed[0].first_frame == 9
    assert resumed[0].slice_index == next(c.slice_index for c in full if c.first_frame <= 9 < c.first_frame + c.frames.shape[1])
    np.testing.assert_array_equal(np.concatenate([c.frames for c in resumed], axis=1), mel[:, 9:])


@pytest.mark.parametrize("dtype, tolerance", [(mel_pb2.MEL_DTYPE_FLOAT32, 0.0), (mel_pb2.MEL_DTYPE_FLOAT16, 0.01)])
def test_message_round_trip(dtype: int, tolerance: float) -> None:
    cut = cut_whole_mel(_mel(8) - 5.0, HOP, RATE)[0]
    message = mel_pb2.MelSlice.FromString(
        to_message(cut, utterance_id="u", sentence_index=2, sentence_frame_count=8, dtype=dtype, phoneme_frames=[5, 3]).SerializeToString()
    )
    assert (message.sentence_index, message.first_frame, message.frame_count, message.n_mels) == (2, 0, cut.frames.shape[1], 80)
    assert list(message.alignment.phoneme_frames) == [5, 3]
    np.testing.assert_allclose(frames_of(message), cut.frames, atol=tolerance)


def test_slice_with_wrong_byte_count_is_rejected() -> None:
    message = mel_pb2.MelSlice(frame_count=2, n_mels=80, dtype=mel_pb2.MEL_DTYPE_FLOAT32, frames=b"\0" * 100)
    with pytest.raises(MelFormatError, match="need 640"):
        frames_of(message)
