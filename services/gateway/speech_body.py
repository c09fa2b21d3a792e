"""The JSON body of the HTTP door's speech and job requests: OpenAI's `/v1/audio/speech` body and
this service's additions, as one family of pydantic models. Every field is defined once, in the
model that first takes it, so it has one rule on every route:

- `SpeechFields`: what every route takes (`input`, `model`, `voice`, `instructions`, `speed`,
  `response_format`, `sample_rate_hz`); `POST /v1/audio/jobs` takes exactly these (`JobBody`).
- `LiveSpeechFields`: what a request answered while it is spoken adds (`lexicon`; a job has no
  lexicon of its own).
- `SpeechBody` (`POST /v1/audio/speech`): adds `stream_format`.
- `CaptionedSpeechBody` (`POST /v1/audio/speech/captioned`): adds `caption_format`.

As OpenAI's API does, a body is a JSON object, types are not coerced (`"1.5"` is not a number), a
parameter the route does not take is refused rather than ignored, and null is the same as leaving a
parameter out. A refused body is an HttpError (OpenAI's error shape) whose `param` is the location
pydantic gives (its top-level parameter) and whose message says what to fix.

Values are checked by the same rules as at the gRPC door (libs.synthesis.options, libs.jobs.requests):
those errors name the proto field they are about, and `PARAMS` gives its name here.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal, TypeVar

import grpc
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_core import ErrorDetails, PydanticCustomError
from starlette.requests import Request

from libs.encoding.encoders import ENCODINGS
from libs.jobs.requests import job_spec
from libs.jobs.store import JobSpec
from libs.pb.tts.v1 import tts_pb2
from libs.serving.http_errors import HttpError
from libs.synthesis.options import SynthesisOptions, resolve_options
from libs.voice.registry import VoiceRegistry
from libs.voice.tiers import tier_of_name
from libs.wire.errors import MAX_ECHO_CHARS, echo, shortened
from libs.wire.json_text import ClientJsonError, parse_client_json

MODEL_ID: Final = "tts-mesh"
MODEL_ALIASES: Final = ("tts-1", "tts-1-hd", "gpt-4o-mini-tts")
"""OpenAI's model names, accepted so existing tools work unchanged; they all mean this service's model."""
MODEL_IDS: Final = (MODEL_ID, *MODEL_ALIASES)
OPENAI_VOICES: Final = (
    "alloy", "ash", "ballad", "coral", "echo", "fable", "nova", "onyx", "sage", "shimmer", "verse", "marin", "cedar",
)  # fmt: skip
"""OpenAI's built-in voice names: tools send them by default, so they speak with the default voice."""


@dataclass(frozen=True)
class ResponseFormat:
    """How one `response_format` value is made here."""

    encoding: int
    """The AudioEncoding that makes it."""
    sample_rate_hz: int = 0
    """The output rate when the request names none (0: the encoding's default)."""


OPENAI_FORMATS: Final[Mapping[str, ResponseFormat]] = {
    "mp3": ResponseFormat(tts_pb2.MP3),
    "opus": ResponseFormat(tts_pb2.OGG_OPUS),
    "aac": ResponseFormat(tts_pb2.AAC),
    "flac": ResponseFormat(tts_pb2.FLAC),
    "wav": ResponseFormat(tts_pb2.WAV),
    "pcm": ResponseFormat(tts_pb2.LINEAR_PCM, 24000),  # OpenAI's pcm is 24 kHz 16-bit little-endian
}
RESPONSE_FORMATS: Final[Mapping[str, ResponseFormat]] = {
    **OPENAI_FORMATS,
    **{encoding.name: ResponseFormat(value) for value, encoding in ENCODINGS.items() if encoding.name not in OPENAI_FORMATS},
}
"""`response_format` (and a job's `?format=`) names: OpenAI's (mp3, opus, aac, flac, wav, pcm), then
every other encoding's own (float_pcm, ogg_opus, mulaw, alaw)."""
PARAMS: Final[Mapping[str, str]] = {
    "text": "input",
    "voice": "voice",
    "speed": "speed",
    "encoding": "response_format",
    "sample_rate_hz": "sample_rate_hz",
    "lexicon": "lexicon",
    "resume_token": "resume_token",
    "frame_ms": "frame_ms",
    "speaker": "speaker",
    "tier": "tier",
}
"""The HTTP parameter of each proto field a domain error can name (libs.serving.status.field_of)."""


class RequestBody(BaseModel):
    """A JSON body of the HTTP door: types as sent (no conversion), no parameter the route does not
    take, `null` the same as leaving a parameter out."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)

    @model_validator(mode="before")
    @classmethod
    def _null_is_left_out(cls, body: Any) -> Any:
        return {name: value for name, value in body.items() if value is not None} if isinstance(body, dict) else body


class SpeechFields(RequestBody):
    """What every speech and job route takes.

    `model` and `voice` may be left out, though OpenAI's API requires both: the official `openai`
    client always sends them, so it cannot tell, and a client written for this service (a script,
    curl, the job API) need not name the one model nor repeat the default voice. A `model` that is
    sent must be one this service has, as OpenAI's API requires (404 `model_not_found` otherwise).
    """

    input: str = Field(description="the text to speak")
    """The text to speak; the route's own limit bounds its length (a speech request's, a job's)."""
    model: str = Field(MODEL_ID, description=f"one of {', '.join(MODEL_IDS)} (see GET /v1/models)")
    """"tts-mesh" or one of OpenAI's names for its speech models, which all mean this service's model."""
    voice: str = Field("", description='a voice name (see GET /v1/audio/voices) or {"id": name}')
    """A voice name, or OpenAI's {"id": name}; OpenAI's built-in names (alloy, ...), "" and leaving it
    out mean the default voice, as an empty voice does at the gRPC door."""
    instructions: str = Field("", description="style instructions")
    """Accepted for OpenAI's clients; this service's voices take no style instructions."""
    speed: float = Field(1.0, description="the speaking rate, 0.25 to 4.0")
    """Speaking-rate multiple, 0.25 to 4.0 (0 means 1.0, as at the gRPC door)."""
    response_format: str = Field("mp3", description=f"one of {', '.join(RESPONSE_FORMATS)}")
    """One of RESPONSE_FORMATS."""
    sample_rate_hz: int = Field(0, description="the output rate in hertz, 0 for the format's default")
    """The output rate in hertz; 0 means the format's default (24,000 for OpenAI's pcm, else the encoding's)."""
    speaker: str | int = Field("", description="a multi-speaker voice's speaker, by name (see GET /v1/audio/voices) or id")
    """A speaker by name or id, as SynthesizeRequest.speaker ("": the voice's first speaker)."""

    @field_validator("model")
    @classmethod
    def _known_model(cls, model: str) -> str:
        if model not in MODEL_IDS:
            raise PydanticCustomError(
                "model_not_found", "`model` {model} does not exist here; use {known} (see GET /v1/models)",
                {"model": echo(model), "known": f"{MODEL_ID!r} or one of OpenAI's names {', '.join(MODEL_ALIASES)}"},
            )  # fmt: skip
        return model

    @field_validator("voice", mode="before")
    @classmethod
    def _voice_name(cls, voice: Any) -> Any:
        if isinstance(voice, dict) and set(voice) == {"id"}:
            voice = voice["id"]
        if not isinstance(voice, str):
            raise PydanticCustomError(
                "invalid_type", "must be a voice name (see GET /v1/audio/voices) or {example}", {"example": '{"id": name}'}
            )
        return voice

    @field_validator("response_format")
    @classmethod
    def _known_format(cls, name: str) -> str:
        if name not in RESPONSE_FORMATS:
            raise PydanticCustomError("invalid_value", "must be one of {formats}; got {name}",
                                      {"formats": ", ".join(RESPONSE_FORMATS), "name": echo(name)})  # fmt: skip
        return name

    @property
    def voice_name(self) -> str:
        """The voice to ask the registry for ("": the default)."""
        return "" if self.voice in OPENAI_VOICES else self.voice

    @property
    def encoding(self) -> int:
        """The AudioEncoding of `response_format`."""
        return RESPONSE_FORMATS[self.response_format].encoding

    @property
    def output_rate_hz(self) -> int:
        """The output rate asked for (0: the encoding's default)."""
        return self.sample_rate_hz or RESPONSE_FORMATS[self.response_format].sample_rate_hz


class LiveSpeechFields(SpeechFields):
    """What the speech routes, answered while the text is spoken, take besides."""

    lexicon: dict[str, str] = Field(default_factory=dict, description='word -> IPA, e.g. {"Nguyen": "ŋwˈɪn"}')
    """This request's pronunciations, word -> IPA, as SynthesizeRequest.lexicon."""
    tier: str = Field("", description="quality, fast or auto (see GET /v1/audio/voices); empty: the API key's default, else quality")
    """The voice's tier, as SynthesizeRequest.tier (libs.voice.tiers); the tts-tier response header says which spoke."""

    def options(self, registry: VoiceRegistry) -> SynthesisOptions:
        """The synthesis options, checked as a Synthesize request's are (errors name their field)."""
        return resolve_options(
            registry, voice=self.voice_name, speed=self.speed, encoding=self.encoding,
            sample_rate_hz=self.output_rate_hz, speaker_id=0, request_id="", include_alignment=False, lexicon=self.lexicon,
            speaker=str(self.speaker), tier=tier_of_name(self.tier),
        )  # fmt: skip


class SpeechBody(LiveSpeechFields):
    """A `POST /v1/audio/speech` body."""

    stream_format: Literal["audio", "sse"] = Field("audio", description="audio or sse")
    """"audio": the encoded bytes as they are made; "sse": server-sent events with base64 audio."""
    resume_token: str = Field("", description="the resume_token of the last event received whole, to go on from it")
    """Where a broken stream goes on: an SSE event's `resume_token` (libs.synthesis.resume); "" from the start."""
    frame_ms: int = Field(0, description="0, or 10 to 100: audio in real-time frames of that length")
    """Real-time frames for a telephone line (libs.synthesis.pacing); 0: audio as it is made."""

    def options(self, registry: VoiceRegistry) -> SynthesisOptions:
        """The synthesis options, checked as a Synthesize request's are (errors name their field)."""
        return resolve_options(
            registry, voice=self.voice_name, speed=self.speed, encoding=self.encoding, sample_rate_hz=self.output_rate_hz,
            speaker_id=0, request_id="", include_alignment=False, lexicon=self.lexicon, resume_token=self.resume_token,
            frame_ms=self.frame_ms, speaker=str(self.speaker), tier=tier_of_name(self.tier),
        )  # fmt: skip


class CaptionedSpeechBody(LiveSpeechFields):
    """A `POST /v1/audio/speech/captioned` body."""

    caption_format: Literal["json", "vtt"] = Field("json", description="json or vtt")
    """"json": the audio in base64 with each word's times; "vtt": WebVTT captions."""


class JobBody(SpeechFields):
    """A `POST /v1/audio/jobs` body."""

    def spec(self, registry: VoiceRegistry) -> JobSpec:
        """The job's options, checked as a CreateJob request's are (errors name their field)."""
        return job_spec(
            registry, voice=self.voice_name, speed=self.speed, encoding=self.encoding,
            sample_rate_hz=self.output_rate_hz, speaker_id=0, speaker=str(self.speaker),
        )  # fmt: skip


class PhonemesBody(RequestBody):
    """What `POST /v1/audio/phonemes` takes: a text, and a voice or a language to read it in."""

    input: str = Field(description="the text to read")
    """The text to read."""
    voice: str = Field("", description="a voice name (see GET /v1/audio/voices)")
    """A voice to read it as; "" with a `language`."""
    language: str = Field("", description="a BCP 47 language tag (en, en-US, zh, zh-CN)")
    """A language to read it in, before a voice for it is installed; "" with a `voice`."""


Body = TypeVar("Body", bound=RequestBody)


async def read_json(request: Request, max_bytes: int, what_to_do: str) -> Any:
    """The request's JSON body, read no further than `max_bytes` (413 past it, saying `what_to_do`;
    400 for a body that is not JSON this service reads)."""
    data = bytearray()
    async for part in request.stream():
        data += part
        if len(data) > max_bytes:
            raise HttpError(grpc.StatusCode.INVALID_ARGUMENT, f"the request body is over {max_bytes} bytes; {what_to_do}",
                            code="request_too_large", status=413)  # fmt: skip
    try:
        return parse_client_json(data)
    except ClientJsonError as error:
        raise HttpError(grpc.StatusCode.INVALID_ARGUMENT, f"the request body {error}", code="invalid_json") from None


async def read_body(request: Request, model: type[Body], max_bytes: int, what_to_do: str) -> Body:
    """The request's JSON body as `model` (`read_json`'s errors; 400 for a body that `model` refuses)."""
    return parse_body(model, await read_json(request, max_bytes, what_to_do))


def parse_body(model: type[Body], body: Any) -> Body:
    """`body` (parsed JSON) as `model`, or the HttpError for its first problem."""
    try:
        return model.model_validate(body)
    except ValidationError as refused:
        raise body_error(model, refused.errors()[0]) from None


def body_error(model: type[RequestBody], error: ErrorDetails) -> HttpError:
    """The HttpError for one of pydantic's errors: `param` is the top-level parameter of its location,
    the message names the exact place (`lexicon['Nguyen']`) and what it must be."""
    location = error["loc"]
    if not location:
        return HttpError(grpc.StatusCode.INVALID_ARGUMENT, "the request body must be a JSON object", code="invalid_type")
    param = str(location[0])
    path = f"`{param}" + "".join(f"[{part!r}]" for part in location[1:]) + "`"
    kind = error["type"]
    field = model.model_fields.get(param)
    about = f"{param}: {field.description}" if field is not None and field.description else ""
    if kind == "missing":
        message, code = f"{path} is required: {field.description if field else param}", "missing_required_parameter"
    elif kind == "extra_forbidden":
        message, code = f"unknown parameter {path}; leave it out (this route takes {', '.join(model.model_fields)})", "unknown_parameter"
    elif kind == "model_not_found":
        return HttpError(grpc.StatusCode.NOT_FOUND, error["msg"], param=param, code=kind)
    elif kind in ("invalid_type", "invalid_value"):  # this module's own rules: the message says what the value must be
        message, code = f"{path} {error['msg']}", kind
    elif kind in _TYPE_WORDS:
        message, code = f"{path} must be {_TYPE_WORDS[kind]}" + (f" ({about})" if about else ""), "invalid_type"
    elif kind == "literal_error":
        message, code = f"{path} must be {error.get('ctx', {}).get('expected', 'another value')}; got {_shown(error['input'])}", "invalid_value"
    else:
        message, code = f"{path}: {error['msg']}", "invalid_value"
    return HttpError(grpc.StatusCode.INVALID_ARGUMENT, message, param=param, code=code)


_TYPE_WORDS: Final[Mapping[str, str]] = {
    "string_type": "a string",
    "float_type": "a number",
    "int_type": "an integer",
    "dict_type": "an object",
    "bool_type": "true or false",
}
"""What pydantic's type errors ask for, in JSON's words."""


def _shown(value: Any) -> str:
    """A value a client sent, quoted for a message and cut short (libs.wire.errors.echo)."""
    return echo(value) if isinstance(value, str) else shortened(json.dumps(value), MAX_ECHO_CHARS)
