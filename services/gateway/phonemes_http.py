"""`POST /v1/audio/phonemes`: how a text will be read, for a voice or a language alone.

Body: `{"input": "...", "voice": "NAME"}` or `{"input": "...", "language": "zh-CN"}` (BCP 47).
Answer: `{"voice", "language", "espeak_voice", "front_end", "sentences": [{"text", "phonemes",
"phoneme_ids", "pinyin"?}]}` (`pinyin` for Mandarin: numbered, one syllable per character, neutral
tone 5, as said). Errors are OpenAI-shaped (`{"error": {"message", "type", "param", "code"}}`): 400
for an unknown voice or language (naming the known ones), empty text or a missing field, 413 for a
body over the door's limit. The reading itself runs in libs.synthesis.phoneme_reading.
"""

from __future__ import annotations

from typing import Final

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from libs.synthesis.phoneme_reading import PhonemeReader, UnknownLanguageError
from libs.telemetry.metrics import GatewayMetrics
from libs.voice.registry import UnknownVoiceError
from libs.wire.errors import InvalidRequestError
from services.gateway.http_api import HttpError, http_error_for, read_json_body

PHONEMES_PATH: Final = "/v1/audio/phonemes"
METHOD: Final = "POST /v1/audio/phonemes"


def phoneme_routes(reader: PhonemeReader, metrics: GatewayMetrics, max_body_bytes: int) -> list[Route]:
    """The route of the reading, to add to the HTTP door's app."""

    async def phonemes(request: Request) -> Response:
        try:
            body = await read_json_body(request, max_body_bytes, "send a shorter `input`")
            if not isinstance(body, dict):
                raise HttpError(400, "the request body must be a JSON object")
            text = _string(body, "input", required=True)
            voice, language = _string(body, "voice"), _string(body, "language")
            param = "language" if language and not voice else "voice"
            try:
                reading = await reader.read(text, voice or None, language or None)
            except UnknownLanguageError as error:
                raise HttpError(400, str(error), param="language", code="unknown_language") from None
            except UnknownVoiceError as error:
                raise HttpError(400, str(error), param="voice", code="unknown_voice") from None
            except InvalidRequestError as error:
                raise HttpError(400, str(error), param=param) from None
        except Exception as error:
            refused = http_error_for(error)
            metrics.requests_total.labels(method=METHOD, code=refused.grpc_code.name).inc()
            return refused.response()
        metrics.requests_total.labels(method=METHOD, code="OK").inc()
        return JSONResponse(reading.to_json())

    return [Route(PHONEMES_PATH, phonemes, methods=["POST"])]


def _string(body: dict, name: str, *, required: bool = False) -> str:
    value = body.get(name)
    if value is None or value == "":
        if required:
            raise HttpError(400, f"`{name}` is required", param=name)
        return ""
    if not isinstance(value, str):
        raise HttpError(400, f"`{name}` must be a string", param=name)
    return value
