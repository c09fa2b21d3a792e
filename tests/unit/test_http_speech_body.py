"""The HTTP door's request body: one rule per field on the speech, captioned and job routes, and
every refusal in OpenAI's error shape with the parameter to fix taken from where the problem is
(pydantic's location, or the field a value check names), never from the message's words."""

from __future__ import annotations

from typing import Any

import grpc
import pytest

from libs.jobs.requests import check_job_text
from libs.pb.tts.v1 import tts_pb2
from libs.serving.http_errors import HttpError, http_error_for
from libs.text.errors import EmptyTextError, TextTooLongError
from libs.voice.registry import default_registry
from services.gateway.speech_body import (
    OPENAI_FORMATS,
    PARAMS,
    RESPONSE_FORMATS,
    CaptionedSpeechBody,
    JobBody,
    SpeechBody,
    SpeechFields,
    parse_body,
)

DEFAULT_VOICE = "en_US-joe-medium"
EVERY_ROUTE = [SpeechBody, CaptionedSpeechBody, JobBody]


def refusal(model: type[SpeechFields], body: Any) -> HttpError:
    with pytest.raises(HttpError) as refused:
        parse_body(model, body)
    return refused.value


def spoken_as(body: SpeechFields) -> tuple[str, float, int, int]:
    """(voice, speed, encoding, sample rate) the body is spoken with, through its route's own checks."""
    if isinstance(body, JobBody):
        spec = body.spec(default_registry())
        return spec.voice, spec.speed, spec.encoding, spec.sample_rate_hz
    assert isinstance(body, (SpeechBody, CaptionedSpeechBody))
    options = body.options(default_registry())
    return options.voice.name, options.speed, options.encoding, options.sample_rate_hz


@pytest.mark.parametrize("model", EVERY_ROUTE)
def test_only_input_is_required_and_the_rest_default_alike_on_every_route(model: type[SpeechFields]) -> None:
    body = parse_body(model, {"input": "Hello."})
    assert (body.input, body.model, body.instructions) == ("Hello.", "tts-mesh", "")
    assert spoken_as(body) == (DEFAULT_VOICE, 1.0, tts_pb2.MP3, 22050)


@pytest.mark.parametrize("model", EVERY_ROUTE)
def test_what_the_openai_client_sends_is_spoken_with_the_default_voice(model: type[SpeechFields]) -> None:
    for voice in ("alloy", "cedar", {"id": "alloy"}, {"id": DEFAULT_VOICE}, DEFAULT_VOICE, ""):
        body = parse_body(model, {"model": "tts-1", "voice": voice, "input": "Hello.", "speed": 1.25, "response_format": "wav"})
        assert spoken_as(body) == (DEFAULT_VOICE, 1.25, tts_pb2.WAV, 22050), voice


@pytest.mark.parametrize("model", EVERY_ROUTE)
def test_null_is_the_same_as_leaving_a_parameter_out(model: type[SpeechFields]) -> None:
    body = parse_body(model, {"input": "Hello.", "model": None, "voice": None, "speed": None, "response_format": None})
    assert body == parse_body(model, {"input": "Hello."})
    assert refusal(model, {"input": None}).param == "input"


@pytest.mark.parametrize("model", EVERY_ROUTE)
@pytest.mark.parametrize("name", sorted(RESPONSE_FORMATS))
def test_every_format_name_is_taken_on_every_route_and_pcm_is_24_khz_unless_a_rate_is_asked(
    model: type[SpeechFields], name: str
) -> None:
    _, _, encoding, rate_hz = spoken_as(parse_body(model, {"input": "Hello.", "response_format": name}))
    assert encoding == RESPONSE_FORMATS[name].encoding
    if name == "pcm":
        assert rate_hz == 24000
        assert spoken_as(parse_body(model, {"input": "Hello.", "response_format": "pcm", "sample_rate_hz": 16000}))[3] == 16000


def test_openai_names_come_first_among_the_formats() -> None:
    assert list(RESPONSE_FORMATS)[: len(OPENAI_FORMATS)] == ["mp3", "opus", "aac", "flac", "wav", "pcm"]
    assert {"ogg_opus", "mulaw", "alaw", "float_pcm"} <= set(RESPONSE_FORMATS)


@pytest.mark.parametrize(
    ("model", "body", "status", "param", "code"),
    [
        (SpeechBody, {"voice": "alloy"}, 400, "input", "missing_required_parameter"),
        (SpeechBody, {"input": 5}, 400, "input", "invalid_type"),
        (SpeechBody, {"input": "Hi.", "model": "whisper-1"}, 404, "model", "model_not_found"),
        (JobBody, {"input": "Hi.", "model": "whisper-1"}, 404, "model", "model_not_found"),
        (SpeechBody, {"input": "Hi.", "voice": 7}, 400, "voice", "invalid_type"),
        (JobBody, {"input": "Hi.", "voice": {"name": "alloy"}}, 400, "voice", "invalid_type"),
        (SpeechBody, {"input": "Hi.", "speed": "1.5"}, 400, "speed", "invalid_type"),
        (JobBody, {"input": "Hi.", "speed": True}, 400, "speed", "invalid_type"),
        (JobBody, {"input": "Hi.", "sample_rate_hz": 16000.0}, 400, "sample_rate_hz", "invalid_type"),
        (SpeechBody, {"input": "Hi.", "response_format": "ogg"}, 400, "response_format", "invalid_value"),
        (JobBody, {"input": "Hi.", "response_format": "ogg"}, 400, "response_format", "invalid_value"),
        (SpeechBody, {"input": "Hi.", "stream_format": "chunks"}, 400, "stream_format", "invalid_value"),
        (CaptionedSpeechBody, {"input": "Hi.", "caption_format": "srt"}, 400, "caption_format", "invalid_value"),
        (SpeechBody, {"input": "Hi.", "lexicon": {"go": 1}}, 400, "lexicon", "invalid_type"),
        (SpeechBody, {"input": "Hi.", "lexicon": ["go"]}, 400, "lexicon", "invalid_type"),
        (SpeechBody, {"input": "Hi.", "voise": "alloy"}, 400, "voise", "unknown_parameter"),
        (JobBody, {"input": "Hi.", "lexicon": {"go": "ɡoʊ"}}, 400, "lexicon", "unknown_parameter"),
        (JobBody, {"input": "Hi.", "stream_format": "sse"}, 400, "stream_format", "unknown_parameter"),
        (SpeechBody, {"input": "Hi.", "caption_format": "vtt"}, 400, "caption_format", "unknown_parameter"),
        (SpeechBody, ["Hi."], 400, None, "invalid_type"),
        (JobBody, "Hi.", 400, None, "invalid_type"),
    ],
)
def test_a_refused_body_names_the_parameter_where_pydantic_located_the_problem(
    model: type[SpeechFields], body: Any, status: int, param: str | None, code: str
) -> None:
    refused = refusal(model, body)
    assert (refused.status, refused.param, refused.code) == (status, param, code)
    error = refused.body()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == "invalid_request_error" and error["param"] == param and error["code"] == code
    if param is not None:
        assert f"`{param}" in error["message"]  # the message names what to fix


def test_messages_say_what_the_value_must_be() -> None:
    assert refusal(SpeechBody, {"input": "Hi.", "speed": "fast"}).message == (
        "`speed` must be a number (speed: the speaking rate, 0.25 to 4.0)"
    )
    assert refusal(SpeechBody, {"input": "Hi.", "lexicon": {"go": 1}}).message.startswith("`lexicon['go']` must be a string")
    assert refusal(SpeechBody, {"input": "Hi.", "stream_format": "chunks"}).message == "`stream_format` must be 'audio' or 'sse'; got 'chunks'"
    assert "mp3, opus, aac, flac, wav, pcm" in refusal(JobBody, {"input": "Hi.", "response_format": "ogg"}).message
    unknown = refusal(JobBody, {"input": "Hi.", "lexicon": {}}).message
    assert unknown.startswith("unknown parameter `lexicon`") and "input, model, voice" in unknown
    assert refusal(SpeechBody, {"voice": "alloy"}).message == "`input` is required: the text to speak"
    assert "tts-mesh" in refusal(SpeechBody, {"input": "Hi.", "model": "whisper-1"}).message


@pytest.mark.parametrize(
    ("body", "status", "param"),
    [
        ({"input": "Hi.", "speed": 9}, 400, "speed"),
        ({"input": "Hi.", "speed": float("nan")}, 400, "speed"),
        ({"input": "Hi.", "voice": "nobody"}, 404, "voice"),
        ({"input": "Hi.", "voice": {"id": "nobody"}}, 404, "voice"),
        ({"input": "Hi.", "response_format": "mulaw", "sample_rate_hz": 16000}, 400, "sample_rate_hz"),
        ({"input": "Hi.", "sample_rate_hz": 4000}, 400, "sample_rate_hz"),
    ],
)
@pytest.mark.parametrize("model", EVERY_ROUTE)
def test_a_value_the_grpc_door_refuses_is_refused_alike_naming_its_parameter(
    model: type[SpeechFields], body: dict[str, Any], status: int, param: str
) -> None:
    parsed = parse_body(model, body)  # the body's shape is fine: the value is what is wrong
    with pytest.raises(Exception) as raised:
        spoken_as(parsed)
    refused = http_error_for(raised.value, PARAMS)
    assert (refused.status, refused.param) == (status, param)
    assert refused.body()["error"]["type"] == "invalid_request_error"


def test_a_lexicon_the_voice_cannot_speak_names_lexicon() -> None:
    body = parse_body(SpeechBody, {"input": "Go.", "lexicon": {"go": "g ˈoʊ"}})
    with pytest.raises(Exception) as raised:
        body.options(default_registry())
    refused = http_error_for(raised.value, PARAMS)
    assert (refused.status, refused.param, refused.code) == (400, "lexicon", "invalid_argument")
    assert "did you mean 'ɡ'" in refused.message


@pytest.mark.parametrize("error", [EmptyTextError(), TextTooLongError(5001, 5000)])
def test_a_text_the_text_side_refuses_names_input(error: Exception) -> None:
    assert (http_error_for(error, PARAMS).status, http_error_for(error, PARAMS).param) == (400, "input")


def test_a_job_text_too_long_names_input() -> None:
    with pytest.raises(Exception) as raised:
        check_job_text("x" * 11, 10)
    refused = http_error_for(raised.value, PARAMS)
    assert (refused.status, refused.param) == (400, "input") and "at most 10" in refused.message


@pytest.mark.parametrize("text", ["!!! ... ???", "<speak><break time=\"1s\"/>...</speak>"])
def test_a_job_text_without_words_is_refused_at_once_naming_input(text: str) -> None:
    with pytest.raises(Exception) as raised:
        check_job_text(text, 1_000)
    refused = http_error_for(raised.value, PARAMS)
    assert (refused.status, refused.param) == (400, "input") and "text is empty" in refused.message


def test_an_error_about_no_one_field_has_no_param_and_a_server_fault_hides_its_details() -> None:
    refused = http_error_for(KeyError("secret internals"), PARAMS)
    assert (refused.status, refused.type, refused.param, refused.code) == (500, "server_error", None, "internal")
    assert "secret" not in refused.message
    assert refused.grpc_code == grpc.StatusCode.INTERNAL
