"""Request validation: client fields -> checked, defaulted synthesis options, or InvalidRequestError."""

from __future__ import annotations

import math
import uuid
from dataclasses import dataclass
from typing import Final, Sequence

from libs.mesh.errors import InvalidRequestError, ModelVersionMismatchError
from libs.mesh.pcm import MAX_OUTPUT_SAMPLE_RATE_HZ, MIN_OUTPUT_SAMPLE_RATE_HZ
from libs.pb.tts.v1 import tts_pb2
from libs.voice.registry import UnknownVoiceError, Voice, VoiceRegistry

MIN_SPEED: Final = 0.25
MAX_SPEED: Final = 4.0
MAX_REQUEST_ID_CHARS: Final = 128
SUPPORTED_ENCODINGS: Final = (tts_pb2.LINEAR_PCM, tts_pb2.FLOAT_PCM)


@dataclass(frozen=True)
class SynthesisOptions:
    """Everything about a request except its text, validated and with defaults applied."""

    voice: Voice
    """The voice to speak with."""
    speed: float
    """Speaking-rate multiple, in [MIN_SPEED, MAX_SPEED]."""
    encoding: int
    """AudioEncoding of the output (never UNSPECIFIED)."""
    sample_rate_hz: int
    """Output sample rate."""
    speaker_id: int
    """Speaker index within the voice."""
    request_id: str
    """The caller's request id, or a generated one."""
    include_alignment: bool
    """Whether sentences carry per-phoneme durations."""


def check_text(text: str, max_text_chars: int) -> str:
    """Reject empty, whitespace-only and over-long text; returns the text unchanged."""
    if not text or not text.strip():
        raise InvalidRequestError("text is empty; send at least one word to speak")
    if len(text) > max_text_chars:
        raise InvalidRequestError(
            f"text is {len(text)} characters long; the limit is {max_text_chars} characters. "
            "Split it into several requests, or use StreamingSynthesize"
        )
    return text


def resolve_options(
    registry: VoiceRegistry,
    *,
    voice: str,
    speed: float,
    encoding: int,
    sample_rate_hz: int,
    speaker_id: int,
    request_id: str,
    include_alignment: bool,
) -> SynthesisOptions:
    """Validate the non-text fields of a request (UnknownVoiceError for an unknown voice)."""
    chosen = registry.get(voice)
    if speed == 0:
        speed = 1.0
    if not math.isfinite(speed) or not MIN_SPEED <= speed <= MAX_SPEED:
        raise InvalidRequestError(f"speed {speed} is out of range; use {MIN_SPEED} to {MAX_SPEED} (0 means 1.0)")
    if encoding == tts_pb2.AUDIO_ENCODING_UNSPECIFIED:
        encoding = tts_pb2.LINEAR_PCM
    if encoding not in SUPPORTED_ENCODINGS:
        names = ", ".join(tts_pb2.AudioEncoding.Name(value) for value in SUPPORTED_ENCODINGS)
        raise InvalidRequestError(f"audio encoding {encoding} is not supported; use one of {names}")
    if sample_rate_hz == 0:
        sample_rate_hz = chosen.sample_rate_hz
    if not MIN_OUTPUT_SAMPLE_RATE_HZ <= sample_rate_hz <= MAX_OUTPUT_SAMPLE_RATE_HZ:
        raise InvalidRequestError(
            f"sample_rate_hz {sample_rate_hz} is not supported; use {MIN_OUTPUT_SAMPLE_RATE_HZ} to "
            f"{MAX_OUTPUT_SAMPLE_RATE_HZ} Hz, or 0 for the voice's own {chosen.sample_rate_hz} Hz"
        )
    if not 0 <= speaker_id < chosen.num_speakers:
        raise InvalidRequestError(
            f"speaker_id {speaker_id} does not exist in voice {chosen.name!r}; use 0 to {chosen.num_speakers - 1}"
        )
    if len(request_id) > MAX_REQUEST_ID_CHARS:
        raise InvalidRequestError(f"request_id is longer than {MAX_REQUEST_ID_CHARS} characters")
    return SynthesisOptions(
        voice=chosen,
        speed=float(speed),
        encoding=encoding,
        sample_rate_hz=sample_rate_hz,
        speaker_id=speaker_id,
        request_id=request_id or uuid.uuid4().hex,
        include_alignment=include_alignment,
    )


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
