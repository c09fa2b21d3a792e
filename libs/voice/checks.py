"""What an acoustic worker accepts in a sentence request, checked against what it serves."""

from __future__ import annotations

import math
from typing import Final, Sequence

from libs.voice.registry import UnknownVoiceError
from libs.wire.errors import InvalidRequestError, ModelVersionMismatchError

MIN_SPEED: Final = 0.25
MAX_SPEED: Final = 4.0


def check_sentence_request(
    *,
    phoneme_ids: Sequence[int],
    voice: str,
    speaker_id: int,
    speed: float,
    start_frame: int,
    slice_ms: float,
    expected_model_version: str,
    worker_voice: str,
    worker_model_version: str,
    num_speakers: int,
) -> None:
    """Validate an acoustic worker's sentence request against what the worker serves."""
    if voice and voice != worker_voice:
        raise UnknownVoiceError(f"this worker speaks voice {worker_voice!r}, not {voice!r}")
    if expected_model_version and expected_model_version != worker_model_version:
        raise ModelVersionMismatchError(
            f"caller expects model {expected_model_version!r}; this worker runs {worker_model_version!r}"
        )
    if not phoneme_ids:
        raise InvalidRequestError("phoneme_ids is empty")
    if min(phoneme_ids) < 0:
        raise InvalidRequestError("phoneme_ids must not be negative")
    if not 0 <= speaker_id < num_speakers:
        raise InvalidRequestError(f"speaker_id {speaker_id} is outside 0..{num_speakers - 1}")
    if not (math.isfinite(speed) and MIN_SPEED <= speed <= MAX_SPEED):
        raise InvalidRequestError(f"speed {speed} is outside {MIN_SPEED}..{MAX_SPEED}")
    if start_frame < 0:
        raise InvalidRequestError(f"start_frame {start_frame} is negative")
    if not (math.isfinite(slice_ms) and slice_ms >= 0):
        raise InvalidRequestError(f"slice_ms {slice_ms} must be positive (0 means 40)")
