"""The gateway's HTTP door: OpenAI's `/v1/audio/speech`, so the many tools that speak it can use the
mesh by changing their base URL.

It parses the request (services.gateway.speech_body, the body the job routes share), calls the same
synthesis API as the gRPC servicer (libs.synthesis), and maps errors through the same status table
(libs.serving.status), as OpenAI-shaped JSON (libs.serving.http_errors), unknown routes and methods
included. Audio streams as it is produced: the encoded bytes (`stream_format: "audio"`) or
server-sent events (`"sse"`: `speech.audio.sentence` with a sentence's words before its audio,
`speech.audio.delta` with base64 audio and, in an uncompressed format, its `resume_token`, then
`speech.audio.done`). `resume_token` and `frame_ms` in the body resume a broken stream and pace
audio in real-time frames, as at the gRPC door.

`POST /v1/audio/speech/captioned` takes the same body (`caption_format` in place of `stream_format`)
and answers when the audio is complete: JSON with the audio (base64) and each word's start and end
in seconds, or, with `caption_format: "vtt"`, WebVTT captions (a cue per sentence, a timestamp tag
before each word).
"""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from contextlib import aclosing
from pathlib import Path
from typing import Any, Final

import grpc
from sse_starlette.sse import EventSourceResponse
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Match, Mount, Route
from starlette.staticfiles import StaticFiles

from libs.encoding.encoders import encoding_of
from libs.serving import http_errors as errors
from libs.serving.http_errors import HttpError, openai_shaped_app
from libs.serving.http_limits import CLIENT_SCOPE_KEY, TIER_SCOPE_KEY
from libs.synthesis import captions
from libs.synthesis.captions import Cue
from libs.synthesis.options import SynthesisOptions, with_default_tier
from libs.synthesis.output import AudioChunk, SentenceInfo
from libs.synthesis.pacing import as_asked
from libs.synthesis.synthesizer import Synthesizer
from libs.telemetry.metrics import GatewayMetrics
from libs.telemetry.request_meter import RequestMeter
from libs.voice.registry import VoiceRegistry
from libs.wire.errors import echo
from libs.wire.headers import TIER_METADATA_KEY
from services.gateway.speech_body import (
    MODEL_ALIASES,
    MODEL_ID,
    MODEL_IDS,
    OPENAI_VOICES,
    PARAMS,
    Body,
    CaptionedSpeechBody,
    SpeechBody,
    read_body,
)

_log = logging.getLogger(__name__)

METHOD: Final = "POST /v1/audio/speech"
CAPTIONED_METHOD: Final = "POST /v1/audio/speech/captioned"
API_PREFIX: Final = "/v1/"


def http_error_for(error: BaseException) -> HttpError:
    """The HTTP error of the speech routes for `error`, through the one status table."""
    return errors.http_error_for(error, PARAMS)


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
            routes.append(_PageMount("/", StaticFiles(directory=self._web_dir, html=True), name="page"))
        return openai_shaped_app(routes)

    async def speech(self, request: Request) -> Response:
        meter = RequestMeter(self._metrics, METHOD)
        try:
            body = await self._body(request, SpeechBody)
            options = with_default_tier(body.options(self._registry), str(request.scope.get(TIER_SCOPE_KEY, "")))
            meter.voice(options.voice.name)
            spoken = await self._synthesizer.synthesize(body.input, options, None, _client(request))
            options = spoken.options  # with the tier it was admitted in; each resume token names its sentence's
            # The headers go with the first audio: they name the tier it starts in, and a failure before
            # it is still an HTTP error.
            chunks = await _started(as_asked(spoken, options))  # real-time frames when asked for
        except Exception as error:  # every refusal goes through the one status table
            refused = http_error_for(error)
            meter.finished(refused.grpc_code.name)
            return refused.response()
        headers = {TIER_METADATA_KEY: spoken.tier}
        if body.stream_format == "sse":
            return _ClosingEventSource(_events(chunks, meter, options), ping=15, headers=headers)
        return _ClosingStream(_audio(chunks, meter), media_type=encoding_of(options.encoding).mime_type, headers=headers)

    async def captioned_speech(self, request: Request) -> Response:
        """The whole utterance with its word times: JSON (audio in base64) or WebVTT captions."""
        meter = RequestMeter(self._metrics, CAPTIONED_METHOD)
        try:
            body = await self._body(request, CaptionedSpeechBody)
            options = with_default_tier(body.options(self._registry), str(request.scope.get(TIER_SCOPE_KEY, "")))
            meter.voice(options.voice.name)
            audio = bytearray()
            sentences: list[SentenceInfo] = []
            spoken = await self._synthesizer.synthesize(body.input, options, None, _client(request))
            async for chunk in spoken:
                meter.sent(chunk.audio_duration_s)
                audio += chunk.audio
                if chunk.sentence is not None:
                    sentences.append(chunk.sentence)
        except Exception as error:
            refused = http_error_for(error)
            meter.finished(refused.grpc_code.name)
            return refused.response()
        meter.finished("OK")
        headers = {TIER_METADATA_KEY: spoken.tier}
        if body.caption_format == "vtt":
            return Response(webvtt(sentences), media_type="text/vtt", headers=headers)
        return JSONResponse(
            headers=headers,
            content={
                "audio": base64.b64encode(bytes(audio)).decode("ascii"),
                "content_type": encoding_of(options.encoding).mime_type,
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
            },
        )

    async def models(self, request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [_model(MODEL_ID), *(_model(alias) for alias in MODEL_ALIASES)]})

    async def model(self, request: Request) -> Response:
        model_id = request.path_params["model_id"]
        if model_id not in MODEL_IDS:
            return HttpError(grpc.StatusCode.NOT_FOUND, f"the model {echo(model_id)} does not exist; see GET /v1/models",
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
                        "quality": voice.quality,
                        "num_speakers": voice.num_speakers,
                        "speakers": voice.speakers(),
                        "tiers": list(voice.tiers),
                        "default": voice.name == self._registry.default_name,
                    }
                    for voice in self._registry.voices()
                ],
                "aliases": dict.fromkeys(OPENAI_VOICES, self._registry.default_name),
            }
        )

    async def _body(self, request: Request, model: type[Body]) -> Body:
        return await read_body(request, model, self._max_body_bytes, "send a shorter `input`")


def closing_stream(body: AsyncIterator[bytes], media_type: str) -> Response:
    """A streamed response whose body is closed however the response ends (a client gone mid-stream)."""
    return _ClosingStream(body, media_type=media_type)


def audio_bytes(chunks: AsyncIterator[AudioChunk], meter: RequestMeter) -> AsyncIterator[bytes]:
    """The encoded bytes of `chunks` as they come, measured by `meter`."""
    return _audio(chunks, meter)


async def _started(chunks: AsyncIterator[AudioChunk]) -> AsyncGenerator[AudioChunk, None]:
    """`chunks` once its first has come (closed if that fails)."""
    try:
        first = await anext(chunks, None)
    except BaseException:
        async with aclosing(chunks):  # type: ignore[type-var]
            raise

    async def resumed() -> AsyncGenerator[AudioChunk, None]:
        async with aclosing(chunks):
            if first is not None:
                yield first
            async for chunk in chunks:
                yield chunk

    return resumed()


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


async def _events(chunks: AsyncIterator[AudioChunk], meter: RequestMeter, options: SynthesisOptions) -> AsyncIterator[dict[str, str]]:
    code = "CANCELLED"
    audio_s = 0.0
    try:
        async with aclosing(chunks):
            async for chunk in chunks:
                meter.sent(chunk.audio_duration_s)
                audio_s += chunk.audio_duration_s
                if chunk.sentence is not None:  # its words, as soon as they are known (before its audio)
                    yield {"data": json.dumps(_sentence_event(chunk.sentence))}
                if chunk.audio:
                    delta: dict[str, Any] = {"type": "speech.audio.delta", "audio": base64.b64encode(chunk.audio).decode("ascii")}
                    if chunk.resume is not None:
                        delta["resume_token"] = options.resume_token(chunk.resume)
                    yield {"data": json.dumps(delta)}
        yield {"data": json.dumps({"type": "speech.audio.done", "usage": {"audio_seconds": round(audio_s, 3)}})}
        code = "OK"
    except Exception as error:
        refused = http_error_for(error)
        code = refused.grpc_code.name
        yield {"data": json.dumps({"type": "error", **refused.body()})}
    finally:
        meter.finished(code)


def _sentence_event(sentence: SentenceInfo) -> dict[str, Any]:
    """`speech.audio.sentence`: a sentence about to be heard, its words and their times in seconds."""
    return {
        "type": "speech.audio.sentence", "index": sentence.index, "text": sentence.text,
        "start": round(sentence.audio_offset_s, 4), "end": round(sentence.audio_offset_s + sentence.audio_duration_s, 4),
        "words": [{"word": word.text, "start": round(word.start_s, 4), "end": round(word.end_s, 4)} for word in sentence.words],
    }  # fmt: skip


def webvtt(sentences: list[SentenceInfo]) -> str:
    """WebVTT captions: one cue per sentence, each word preceded by the timestamp it is spoken at."""
    return captions.webvtt([Cue(s.audio_offset_s, s.audio_offset_s + s.audio_duration_s, s.text, s.words) for s in sentences])


def _model(model_id: str) -> dict[str, Any]:
    return {"id": model_id, "object": "model", "created": 0, "owned_by": "tts-mesh"}


class _PageMount(Mount):
    """The web page's files at `/`, for every path but the API's: under `/v1/` the API routes alone
    answer, so a known route asked with another method is 405 (with `Allow`) and an unknown one 404,
    rather than a file that is not there."""

    def matches(self, scope: Any) -> tuple[Match, Any]:
        if str(scope.get("path", "")).startswith(API_PREFIX):
            return Match.NONE, {}
        return super().matches(scope)


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
