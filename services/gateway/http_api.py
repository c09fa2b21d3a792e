"""The gateway's HTTP door: OpenAI's `/v1/audio/speech`, so the many tools that speak it can use the
mesh by changing their base URL.

It parses the request, calls the same synthesis API as the gRPC servicer (libs.synthesis), and maps
errors through the same status table (libs.serving.status), as OpenAI-shaped JSON:
`{"error": {"message", "type", "param", "code"}}`. Audio streams as it is produced: the encoded
bytes (`stream_format: "audio"`) or server-sent events (`"sse"`: `speech.audio.delta` with base64
audio, then `speech.audio.done`).

`POST /v1/audio/speech/captioned` takes the same body and answers when the audio is complete: JSON
with the audio (base64) and each word's start and end in seconds, or, with `caption_format: "vtt"`,
WebVTT captions (a cue per sentence, a timestamp tag before each word).
"""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import aclosing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import grpc
from sse_starlette.sse import EventSourceResponse
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from libs.encoding.encoders import encoding_of
from libs.pb.tts.v1 import tts_pb2
from libs.serving.http_limits import CLIENT_SCOPE_KEY
from libs.serving.status import grpc_status_for
from libs.synthesis.options import SynthesisOptions, resolve_options
from libs.synthesis.output import AudioChunk, SentenceInfo
from libs.synthesis.synthesizer import Synthesizer
from libs.telemetry.metrics import GatewayMetrics
from libs.telemetry.request_meter import RequestMeter
from libs.voice.registry import VoiceRegistry

_log = logging.getLogger(__name__)

METHOD: Final = "POST /v1/audio/speech"
CAPTIONED_METHOD: Final = "POST /v1/audio/speech/captioned"
CAPTION_FORMATS: Final = ("json", "vtt")
MODEL_ID: Final = "tts-mesh"
MODEL_ALIASES: Final = ("tts-1", "tts-1-hd", "gpt-4o-mini-tts")
"""OpenAI's model names, accepted so existing tools work unchanged; they all mean this service's model."""
OPENAI_VOICES: Final = (
    "alloy", "ash", "ballad", "coral", "echo", "fable", "nova", "onyx", "sage", "shimmer", "verse", "marin", "cedar",
)  # fmt: skip
"""OpenAI's built-in voice names: tools send them by default, so they speak with the default voice."""


@dataclass(frozen=True)
class ResponseFormat:
    """How one of OpenAI's `response_format` values is made here."""

    encoding: int
    """The AudioEncoding that makes it."""
    sample_rate_hz: int = 0
    """The output rate (0: the encoding's default)."""


RESPONSE_FORMATS: Final[Mapping[str, ResponseFormat]] = {
    "mp3": ResponseFormat(tts_pb2.MP3),
    "opus": ResponseFormat(tts_pb2.OGG_OPUS),
    "aac": ResponseFormat(tts_pb2.AAC),
    "flac": ResponseFormat(tts_pb2.FLAC),
    "wav": ResponseFormat(tts_pb2.WAV),
    "pcm": ResponseFormat(tts_pb2.LINEAR_PCM, 24000),  # OpenAI's pcm is 24 kHz 16-bit little-endian
}
_HTTP_STATUS: Final[Mapping[grpc.StatusCode, tuple[int, str]]] = {
    grpc.StatusCode.INVALID_ARGUMENT: (400, "invalid_request_error"),
    grpc.StatusCode.NOT_FOUND: (404, "invalid_request_error"),
    grpc.StatusCode.FAILED_PRECONDITION: (400, "invalid_request_error"),
    grpc.StatusCode.UNAUTHENTICATED: (401, "authentication_error"),
    grpc.StatusCode.PERMISSION_DENIED: (403, "permission_error"),
    grpc.StatusCode.RESOURCE_EXHAUSTED: (429, "rate_limit_error"),
    grpc.StatusCode.UNAVAILABLE: (503, "service_unavailable"),
    grpc.StatusCode.DEADLINE_EXCEEDED: (504, "timeout"),
}


class HttpError(Exception):
    """A request the HTTP door refuses, with the OpenAI error fields."""

    def __init__(self, status: int, message: str, *, type_: str = "invalid_request_error", param: str | None = None,
                 code: str | None = None, grpc_code: grpc.StatusCode = grpc.StatusCode.INVALID_ARGUMENT) -> None:  # fmt: skip
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type_, param, code
        self.grpc_code = grpc_code
        """The same outcome as a gRPC status (what the request metrics count)."""

    def response(self) -> JSONResponse:
        body = {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}
        return JSONResponse(body, status_code=self.status)


def http_error_for(error: BaseException, param: str | None = None) -> HttpError:
    """The HTTP error for a domain error, through the same status table as gRPC."""
    if isinstance(error, HttpError):
        return error
    code, message = grpc_status_for(error)
    status, type_ = _HTTP_STATUS.get(code, (500, "server_error"))
    return HttpError(status, message, type_=type_, param=param, code=code.name.lower(), grpc_code=code)


@dataclass(frozen=True)
class SpeechRequest:
    """A parsed `/v1/audio/speech` body."""

    text: str
    options: SynthesisOptions
    response_format: str
    stream_format: str


class SpeechApi:
    """The routes of the HTTP door over one synthesizer."""

    def __init__(
        self, synthesizer: Synthesizer, registry: VoiceRegistry, metrics: GatewayMetrics, max_body_bytes: int, web_dir: Path | None = None
    ) -> None:
        self._synthesizer = synthesizer
        self._registry = registry
        self._metrics = metrics
        self._max_body_bytes = max_body_bytes
        self._web_dir = web_dir

    def app(self, extra_routes: Sequence[Route] = ()) -> Starlette:
        """The ASGI application: the API (and `extra_routes`, e.g. the job routes), and the web page at `/` when there is one."""
        routes: list[Route | Mount] = [
            *extra_routes,
            Route("/v1/audio/speech", self.speech, methods=["POST"]),
            Route("/v1/audio/speech/captioned", self.captioned_speech, methods=["POST"]),
            Route("/v1/models", self.models, methods=["GET"]),
            Route("/v1/models/{model_id}", self.model, methods=["GET"]),
            Route("/v1/audio/voices", self.voices, methods=["GET"]),
        ]
        if self._web_dir is not None:
            routes.append(Mount("/", StaticFiles(directory=self._web_dir, html=True), name="page"))
        return Starlette(routes=routes)

    async def speech(self, request: Request) -> Response:
        meter = RequestMeter(self._metrics, METHOD)
        try:
            parsed = self._parse(await self._body(request))
            meter.voice(parsed.options.voice.name)
            chunks = await self._synthesizer.synthesize(parsed.text, parsed.options, None, _client(request))
        except Exception as error:  # every refusal goes through the one status table
            refused = http_error_for(error)
            meter.finished(refused.grpc_code.name)
            return refused.response()
        media_type = encoding_of(parsed.options.encoding).mime_type
        if parsed.stream_format == "sse":
            return _ClosingEventSource(_events(chunks, meter), ping=15)
        return _ClosingStream(_audio(chunks, meter), media_type=media_type)

    async def captioned_speech(self, request: Request) -> Response:
        """The whole utterance with its word times: JSON (audio in base64) or WebVTT captions."""
        meter = RequestMeter(self._metrics, CAPTIONED_METHOD)
        try:
            body = await self._body(request)
            parsed = self._parse(body)
            caption_format = _field(body, "caption_format", str, default="json")
            if caption_format not in CAPTION_FORMATS:
                raise HttpError(400, f"`caption_format` must be one of {', '.join(CAPTION_FORMATS)}", param="caption_format")
            meter.voice(parsed.options.voice.name)
            audio = bytearray()
            sentences: list[SentenceInfo] = []
            async for chunk in await self._synthesizer.synthesize(parsed.text, parsed.options, None, _client(request)):
                meter.sent(chunk.audio_duration_s)
                audio += chunk.audio
                if chunk.sentence is not None:
                    sentences.append(chunk.sentence)
        except Exception as error:
            refused = http_error_for(error)
            meter.finished(refused.grpc_code.name)
            return refused.response()
        meter.finished("OK")
        if caption_format == "vtt":
            return Response(webvtt(sentences), media_type="text/vtt")
        return JSONResponse(
            {
                "audio": base64.b64encode(bytes(audio)).decode("ascii"),
                "content_type": encoding_of(parsed.options.encoding).mime_type,
                "words": [
                    {"word": word.text, "start": round(word.start_s, 4), "end": round(word.end_s, 4)}
                    for sentence in sentences
                    for word in sentence.words
                ],
                "sentences": [
                    {
                        "text": sentence.text,
                        "start": round(sentence.audio_offset_s, 4),
                        "end": round(sentence.audio_offset_s + sentence.audio_duration_s, 4),
                    }
                    for sentence in sentences
                ],
            }
        )

    async def models(self, request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [_model(MODEL_ID), *(_model(alias) for alias in MODEL_ALIASES)]})

    async def model(self, request: Request) -> Response:
        model_id = request.path_params["model_id"]
        if model_id not in (MODEL_ID, *MODEL_ALIASES):
            return HttpError(404, f"the model {_clip(model_id)!r} does not exist; see GET /v1/models",
                             param="model", code="model_not_found").response()  # fmt: skip
        return JSONResponse(_model(model_id))

    async def voices(self, request: Request) -> Response:
        return JSONResponse(
            {
                "object": "list",
                "data": [
                    {
                        "id": voice.name,
                        "language": voice.language_code,
                        "sample_rate_hz": voice.sample_rate_hz,
                        "default": voice.name == self._registry.default_name,
                    }
                    for voice in self._registry.voices()
                ],
                "aliases": dict.fromkeys(OPENAI_VOICES, self._registry.default_name),
            }
        )

    async def _body(self, request: Request) -> Any:
        return await read_json_body(request, self._max_body_bytes, "send a shorter `input`")

    def _parse(self, body: Any) -> SpeechRequest:
        if not isinstance(body, dict):
            raise HttpError(400, "the request body must be a JSON object")
        text = _field(body, "input", str, required=True)
        model = _field(body, "model", str, required=True)
        if model not in (MODEL_ID, *MODEL_ALIASES):
            raise HttpError(404, f"the model {_clip(model)!r} does not exist; use {MODEL_ID!r} (see GET /v1/models)",
                            param="model", code="model_not_found")  # fmt: skip
        voice = body.get("voice")
        if isinstance(voice, dict):
            voice = voice.get("id")
        if not isinstance(voice, str) or not voice:
            raise HttpError(400, "`voice` must be a voice name (see GET /v1/audio/voices) or {\"id\": name}", param="voice")
        response_format = _field(body, "response_format", str, default="mp3")
        if response_format not in RESPONSE_FORMATS:
            raise HttpError(400, f"`response_format` must be one of {', '.join(RESPONSE_FORMATS)}", param="response_format")
        stream_format = _field(body, "stream_format", str, default="audio")
        if stream_format not in ("audio", "sse"):
            raise HttpError(400, "`stream_format` must be audio or sse", param="stream_format")
        speed = _field(body, "speed", (int, float), default=1.0)
        _field(body, "instructions", str, default="")  # accepted; this voice takes no style instructions
        lexicon = _field(body, "lexicon", dict, default={})  # word -> IPA, as SynthesizeRequest.lexicon
        if not all(isinstance(word, str) and isinstance(ipa, str) for word, ipa in lexicon.items()):
            raise HttpError(400, "`lexicon` must map words to IPA strings", param="lexicon")
        made = RESPONSE_FORMATS[response_format]
        try:
            options = resolve_options(
                self._registry,
                voice="" if voice in OPENAI_VOICES else voice,
                speed=float(speed),
                encoding=made.encoding,
                sample_rate_hz=made.sample_rate_hz,
                speaker_id=0,
                request_id="",
                include_alignment=False,
                lexicon=lexicon,
            )
        except Exception as error:
            param = "lexicon" if "lexicon" in str(error) else "voice" if "voice" in str(error) else "speed"
            raise http_error_for(error, param=param) from None
        return SpeechRequest(text, options, response_format, stream_format)


async def _audio(chunks: AsyncIterator[AudioChunk], meter: RequestMeter) -> AsyncIterator[bytes]:
    code = "CANCELLED"
    try:
        async with aclosing(chunks):  # a client gone mid-stream frees its place and worker streams now
            async for chunk in chunks:
                meter.sent(chunk.audio_duration_s)
                if chunk.audio:
                    yield chunk.audio
        code = "OK"
    except Exception as error:
        # Headers are sent: the status cannot change. The connection ends early; the log says why.
        code = http_error_for(error).grpc_code.name
        _log.warning("speech stream ended early: %s", error)
        raise
    finally:
        meter.finished(code)


async def _events(chunks: AsyncIterator[AudioChunk], meter: RequestMeter) -> AsyncIterator[dict[str, str]]:
    code = "CANCELLED"
    audio_s = 0.0
    try:
        async with aclosing(chunks):
            async for chunk in chunks:
                meter.sent(chunk.audio_duration_s)
                audio_s += chunk.audio_duration_s
                if chunk.audio:
                    delta = {"type": "speech.audio.delta", "audio": base64.b64encode(chunk.audio).decode("ascii")}
                    yield {"data": json.dumps(delta)}
        yield {"data": json.dumps({"type": "speech.audio.done", "usage": {"audio_seconds": round(audio_s, 3)}})}
        code = "OK"
    except Exception as error:
        refused = http_error_for(error)
        code = refused.grpc_code.name
        error_event = {"type": "error", "error": {"message": refused.message, "type": refused.type, "code": refused.code}}
        yield {"data": json.dumps(error_event)}
    finally:
        meter.finished(code)


def webvtt(sentences: list[SentenceInfo]) -> str:
    """WebVTT captions: one cue per sentence, each word preceded by the timestamp it is spoken at."""
    lines = ["WEBVTT", ""]
    for sentence in sentences:
        end_s = sentence.audio_offset_s + sentence.audio_duration_s
        words = " ".join(f"<{_vtt_time(word.start_s)}>{_vtt_escape(word.text)}" for word in sentence.words)
        lines += [f"{_vtt_time(sentence.audio_offset_s)} --> {_vtt_time(end_s)}", words or _vtt_escape(sentence.text), ""]
    return "\n".join(lines)


def _vtt_time(seconds: float) -> str:
    milliseconds = round(seconds * 1000)
    hours, milliseconds = divmod(milliseconds, 3_600_000)
    minutes, milliseconds = divmod(milliseconds, 60_000)
    return f"{hours:02d}:{minutes:02d}:{milliseconds // 1000:02d}.{milliseconds % 1000:03d}"


def _vtt_escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("-->", "--&gt;")


async def read_json_body(request: Request, max_bytes: int, what_to_do: str) -> Any:
    """The request's JSON body, read no further than `max_bytes` (413 past it, saying `what_to_do`;
    400 for a body that is not JSON)."""
    data = bytearray()
    async for part in request.stream():
        data += part
        if len(data) > max_bytes:
            raise HttpError(413, f"the request body is over {max_bytes} bytes; {what_to_do}")
    try:
        return json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise HttpError(400, f"the request body is not JSON: {error}") from None


def _field(body: dict[str, Any], name: str, kind: Any, *, required: bool = False, default: Any = None) -> Any:
    if name not in body or body[name] is None:
        if required:
            raise HttpError(400, f"`{name}` is required", param=name)
        return default
    value = body[name]
    if not isinstance(value, kind) or isinstance(value, bool):
        raise HttpError(400, f"`{name}` has the wrong type", param=name)
    return value


def _model(model_id: str) -> dict[str, Any]:
    return {"id": model_id, "object": "model", "created": 0, "owned_by": "tts-mesh"}


def _clip(text: str, limit: int = 64) -> str:
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


class _ClosesBody:
    """A streamed response that closes its body generator however the response ends.

    On a client's disconnect the response stops iterating its body in the middle and leaves the
    generator suspended: only the garbage collector would close it, much later, and until then the
    stream would hold its place in the limits and its worker streams."""

    body_iterator: Any

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)  # type: ignore[misc]
        finally:
            await self.body_iterator.aclose()


class _ClosingStream(_ClosesBody, StreamingResponse):
    pass


class _ClosingEventSource(_ClosesBody, EventSourceResponse):
    pass


def _client(request: Request) -> str:
    """Who sent `request`, as the door's client limit named it ("" if it did not)."""
    return str(request.scope.get(CLIENT_SCOPE_KEY, ""))
