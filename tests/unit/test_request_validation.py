"""Request validation and the one table of gRPC status codes."""

from __future__ import annotations

import grpc
import pytest

from libs.jobs.requests import DEFAULT_PAGE_SIZE, page_bounds
from libs.pb.tts.v1 import tts_pb2
from libs.serving.status import field_of, grpc_status_for
from libs.synthesis.options import resolve_options
from libs.text.errors import EmptyTextError, InvalidTextError, TextTooLongError
from libs.text.frontend import TextFrontend
from libs.voice.checks import check_sentence_request
from libs.voice.registry import UnknownVoiceError, default_registry
from libs.wire.errors import DownstreamError, InvalidRequestError, ModelVersionMismatchError, NoWorkerError

DEFAULTS = dict(voice="", speed=0.0, encoding=0, sample_rate_hz=0, speaker_id=0, request_id="", include_alignment=False)


def test_zero_values_mean_the_documented_defaults() -> None:
    options = resolve_options(default_registry(), **DEFAULTS)
    assert options.voice.name == "en_US-joe-medium"
    assert options.speed == 1.0
    assert options.encoding == tts_pb2.LINEAR_PCM
    assert options.sample_rate_hz == 22050
    assert len(options.request_id) == 32


@pytest.mark.parametrize("speed", [0.24, 4.01, -1.0, float("nan"), float("inf")])
def test_speed_out_of_range_is_invalid_argument(speed: float) -> None:
    with pytest.raises(InvalidRequestError, match=r"0\.25 to 4\.0"):
        resolve_options(default_registry(), **dict(DEFAULTS, speed=speed))


@pytest.mark.parametrize("speed", [0.25, 4.0, 1.5])
def test_speed_limits_are_inclusive(speed: float) -> None:
    assert resolve_options(default_registry(), **dict(DEFAULTS, speed=speed)).speed == speed


def test_unknown_voice_encoding_rate_and_speaker_are_rejected_with_the_valid_choices() -> None:
    registry = default_registry()
    with pytest.raises(UnknownVoiceError, match="en_US-joe-medium"):
        resolve_options(registry, **dict(DEFAULTS, voice="fr_FR-nobody"))
    with pytest.raises(InvalidRequestError, match="LINEAR_PCM"):
        resolve_options(registry, **dict(DEFAULTS, encoding=42))
    with pytest.raises(InvalidRequestError, match="8000 to 48000"):
        resolve_options(registry, **dict(DEFAULTS, sample_rate_hz=4000))
    with pytest.raises(InvalidRequestError, match="speaker_id 1"):
        resolve_options(registry, **dict(DEFAULTS, speaker_id=1))
    for speaker in ("\u00b2", "\u2460", "9" * 5000):  # digits to str.isdigit, not to int()
        with pytest.raises(InvalidRequestError, match="has no speaker"):
            registry.default.speaker_id(speaker)


def test_text_checks_state_the_limit_and_count_the_text_as_sent() -> None:
    frontend = TextFrontend({"_": [0]}, max_text_chars=10)
    with pytest.raises(EmptyTextError, match="empty"):
        frontend.chunks(" \n\t ")
    with pytest.raises(TextTooLongError, match="limit is 10 characters"):
        frontend.chunks("x" * 11)
    # Whitespace that normalisation would collapse still counts: the limit bounds the work on what was sent.
    with pytest.raises(TextTooLongError, match="11 characters long"):
        frontend.chunks("Hi." + " " * 8)
    assert frontend.chunks("Hello.") == ["Hello."]


def test_sentence_request_checks_model_version_and_voice() -> None:
    base = dict(
        utterance_id="u", sentence_index=0, phoneme_ids=[1, 2], voice="v", speaker_id=0, speed=1.0, noise_scale=0.667,
        noise_w=0.8, start_frame=0, slice_ms=0.0, dtype=0, expected_model_version="m1", worker_voice="v",
        worker_model_version="m1", num_speakers=1, vocabulary_size=256,
    )  # fmt: skip
    check_sentence_request(**base)
    with pytest.raises(ModelVersionMismatchError):
        check_sentence_request(**dict(base, expected_model_version="m0"))
    with pytest.raises(UnknownVoiceError):
        check_sentence_request(**dict(base, voice="w"))
    with pytest.raises(InvalidRequestError):
        check_sentence_request(**dict(base, phoneme_ids=[]))


@pytest.mark.parametrize(
    "error, code",
    [
        (InvalidRequestError("x"), grpc.StatusCode.INVALID_ARGUMENT),
        (EmptyTextError(), grpc.StatusCode.INVALID_ARGUMENT),
        (TextTooLongError(11, 10), grpc.StatusCode.INVALID_ARGUMENT),
        (InvalidTextError(3, "bad byte"), grpc.StatusCode.INVALID_ARGUMENT),
        (UnknownVoiceError("x"), grpc.StatusCode.NOT_FOUND),
        (ModelVersionMismatchError("x"), grpc.StatusCode.FAILED_PRECONDITION),
        (NoWorkerError("x"), grpc.StatusCode.UNAVAILABLE),
        (DownstreamError(grpc.StatusCode.RESOURCE_EXHAUSTED, "x"), grpc.StatusCode.RESOURCE_EXHAUSTED),
        (KeyError("secret internals"), grpc.StatusCode.INTERNAL),
    ],
)
def test_status_table(error: Exception, code: grpc.StatusCode) -> None:
    got, message = grpc_status_for(error)
    assert got == code
    assert "secret" not in message


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        (dict(voice="fr_FR-nobody"), "voice"),
        (dict(speed=9.0), "speed"),
        (dict(encoding=42), "encoding"),
        (dict(sample_rate_hz=4000), "sample_rate_hz"),
        (dict(speaker_id=1), "speaker_id"),
        (dict(request_id="r" * 1000), "request_id"),
        (dict(lexicon={"go": "g ˈoʊ"}), "lexicon"),
    ],
)
def test_a_refused_option_names_its_field_for_every_door(fields: dict[str, object], field: str) -> None:
    with pytest.raises((InvalidRequestError, UnknownVoiceError)) as refused:
        resolve_options(default_registry(), **{**DEFAULTS, **fields})  # type: ignore[arg-type]
    assert field_of(refused.value) == field


def test_text_errors_are_about_the_text_and_other_errors_about_no_field() -> None:
    assert field_of(EmptyTextError()) == field_of(TextTooLongError(11, 10)) == "text"
    assert field_of(InvalidRequestError("the first message must carry `config`")) == ""
    assert field_of(NoWorkerError("x")) == field_of(KeyError("x")) == ""


def test_a_page_token_is_an_offset_this_service_wrote() -> None:
    assert page_bounds(0, "") == (DEFAULT_PAGE_SIZE, 0)
    assert page_bounds(10, "20") == (10, 20)
    for token in ("x", "-1", "\u00b2", "9" * 5000):  # digits to str.isdigit that int() refuses or cannot hold
        with pytest.raises(InvalidRequestError, match="page_token"):
            page_bounds(10, token)
