"""What an acoustic worker accepts in a sentence request, checked against what it serves.

A worker trusts no caller: every field is checked before any model work, and anything out of range
is an InvalidRequestError that says what to send instead (UnknownVoiceError and
ModelVersionMismatchError for the two fields that name another worker's model).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Final

from libs.pb.tts.common.v1 import mel_pb2
from libs.voice.registry import UnknownVoiceError
from libs.wire.errors import InvalidRequestError, ModelVersionMismatchError, echo
from libs.wire.limits import MAX_ID_CHARS, MAX_PHONEME_IDS, MAX_SENTENCE_FRAMES

MIN_SPEED: Final = 0.25
MAX_SPEED: Final = 4.0
MAX_NOISE_SCALE: Final = 2.0
"""Largest prior or duration noise scale: Piper voices ship 0.333 to 1.0, and far past that the
duration noise stretches phonemes without bound."""
MIN_SLICE_MS: Final = 10.0
MAX_SLICE_MS: Final = 1000.0
"""Bounds of a request's `slice_ms` (0 means 40); outside them it is INVALID_ARGUMENT, so a caller can
neither make a worker send a message for every sliver of mel nor make it hold back more than a second."""
_DTYPES: Final = (mel_pb2.MEL_DTYPE_UNSPECIFIED, mel_pb2.MEL_DTYPE_FLOAT32, mel_pb2.MEL_DTYPE_FLOAT16)


def rated_speed(speed: float, rate: float) -> float:
    """The speed of a sentence that SSML asks for at `rate` times a request's `speed`: their product,
    held within the speeds a worker takes (a slow request's `<prosody rate="slow">` is the slowest
    speed, not a refusal in the middle of the stream)."""
    return min(max(speed * rate, MIN_SPEED), MAX_SPEED)


def check_sentence_request(
    *,
    utterance_id: str,
    sentence_index: int,
    phoneme_ids: Sequence[int],
    voice: str,
    speaker_id: int,
    speed: float,
    noise_scale: float,
    noise_w: float,
    start_frame: int,
    slice_ms: float,
    dtype: int,
    expected_model_version: str,
    worker_voice: str,
    worker_model_version: str,
    num_speakers: int,
    vocabulary_size: int,
    spoken_first_id: int = 0,
    spoken_end_id: int = 0,
) -> None:
    """Validate an acoustic worker's sentence request against what the worker serves."""
    if voice and voice != worker_voice:
        raise UnknownVoiceError(f"this stream speaks voice {worker_voice!r}, not {echo(voice)}; open a stream per voice")
    if expected_model_version and expected_model_version != worker_model_version:
        raise ModelVersionMismatchError(
            f"caller expects model {echo(expected_model_version)}; this worker runs {worker_model_version!r}"
        )
    if len(utterance_id) > MAX_ID_CHARS:
        raise InvalidRequestError(f"utterance_id is {len(utterance_id)} characters long; use at most {MAX_ID_CHARS}")
    if sentence_index < 0:
        raise InvalidRequestError(f"sentence_index {sentence_index} is negative; sentences count from 0")
    if not phoneme_ids:
        raise InvalidRequestError("phoneme_ids is empty; a sentence needs at least one phoneme id")
    if len(phoneme_ids) > MAX_PHONEME_IDS:
        raise InvalidRequestError(
            f"phoneme_ids holds {len(phoneme_ids)} ids; a sentence may have at most {MAX_PHONEME_IDS}: split it"
        )
    spoken_end = spoken_end_id or len(phoneme_ids)
    if not 0 <= spoken_first_id < spoken_end <= len(phoneme_ids):
        raise InvalidRequestError(
            f"spoken ids {spoken_first_id}..{spoken_end_id} are not a span of the sentence's {len(phoneme_ids)} ids; "
            "need 0 <= spoken_first_id < spoken_end_id <= the id count (0 and 0 speak them all)"
        )
    lowest, highest = min(phoneme_ids), max(phoneme_ids)
    if lowest < 0 or highest >= vocabulary_size:
        bad = lowest if lowest < 0 else highest
        raise InvalidRequestError(f"phoneme id {bad} is not in this voice's vocabulary; ids run from 0 to {vocabulary_size - 1}")
    if not 0 <= speaker_id < num_speakers:
        raise InvalidRequestError(f"speaker_id {speaker_id} is outside 0..{num_speakers - 1}")
    if not (math.isfinite(speed) and MIN_SPEED <= speed <= MAX_SPEED):
        raise InvalidRequestError(f"speed {speed} is outside {MIN_SPEED}..{MAX_SPEED}")
    for name, scale in (("noise_scale", noise_scale), ("noise_w", noise_w)):
        if not (math.isfinite(scale) and 0.0 <= scale <= MAX_NOISE_SCALE):
            raise InvalidRequestError(f"{name} {scale} is outside 0..{MAX_NOISE_SCALE}; the voice's config has the usual value")
    if not 0 <= start_frame < MAX_SENTENCE_FRAMES:
        raise InvalidRequestError(f"start_frame {start_frame} is outside 0..{MAX_SENTENCE_FRAMES - 1}")
    if not (slice_ms == 0 or (math.isfinite(slice_ms) and MIN_SLICE_MS <= slice_ms <= MAX_SLICE_MS)):
        raise InvalidRequestError(f"slice_ms {slice_ms} is outside {MIN_SLICE_MS:g}..{MAX_SLICE_MS:g} (0 means 40)")
    if dtype not in _DTYPES:
        raise InvalidRequestError(f"dtype {dtype} is not a mel dtype; use MEL_DTYPE_FLOAT32 or MEL_DTYPE_FLOAT16")


def check_sentence_frames(sentence_index: int, frame_count: int, start_frame: int, frame_duration_s: float) -> None:
    """Validate a planned sentence's length, and where a resumed request starts in it."""
    if frame_count > MAX_SENTENCE_FRAMES:
        raise InvalidRequestError(
            f"sentence {sentence_index} would last {frame_count * frame_duration_s:.0f} s; a sentence may last at most "
            f"{MAX_SENTENCE_FRAMES * frame_duration_s:.0f} s: split the text or speak faster"
        )
    if start_frame >= frame_count:
        raise InvalidRequestError(f"start_frame {start_frame} is past the sentence's {frame_count} frames")


class SentenceOrder:
    """What one acoustic stream has asked for so far: sentences of one utterance, in increasing order."""

    def __init__(self) -> None:
        self._utterance_id: str | None = None
        self._last_index = -1

    def check(self, utterance_id: str, sentence_index: int) -> None:
        """Validate the next request's utterance and sentence against the stream's earlier ones."""
        if self._utterance_id is not None and utterance_id != self._utterance_id:
            raise InvalidRequestError("every request of a stream must carry the utterance_id of its first one")
        if sentence_index <= self._last_index:
            raise InvalidRequestError(
                f"sentence_index {sentence_index} after sentence {self._last_index}; a stream asks for each sentence "
                "once, in increasing order (a resume opens a new stream)"
            )
        self._utterance_id, self._last_index = utterance_id, sentence_index
