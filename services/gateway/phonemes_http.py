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

import grpc
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from libs.serving.http_errors import HttpError
from libs.synthesis.phoneme_reading import PhonemeReader, UnknownLanguageError
from libs.telemetry.metrics import GatewayMetrics
from libs.voice.registry import UnknownVoiceError
from libs.wire.errors import InvalidRequestError
from services.gateway.http_api import http_error_for
from services.gateway.speech_body import PhonemesBody, read_body

PHONEMES_PATH: Final = "/v1/audio/phonemes"
METHOD: Final = "POST /v1/audio/phonemes"


def phoneme_routes(reader: PhonemeReader, metrics: GatewayMetrics, max_body_bytes: int) -> list[Route]:
    """The route of the reading, to add to the HTTP door's app."""

    async def phonemes(request: Request) -> Response:
        try:
            body = await read_body(request, PhonemesBody, max_body_bytes, "send a shorter `input`")
            if not body.input:
                raise HttpError(grpc.StatusCode.INVALID_ARGUMENT, "`input` is required: the text to read", param="input",
                                code="missing_required_parameter")  # fmt: skip
            param = "language" if body.language and not body.voice else "voice"
            try:
                reading = await reader.read(body.input, body.voice or None, body.language or None)
            except UnknownLanguageError as error:
                raise HttpError(grpc.StatusCode.INVALID_ARGUMENT, str(error), param="language", code="unknown_language") from None
            except UnknownVoiceError as error:
                raise HttpError(grpc.StatusCode.INVALID_ARGUMENT, str(error), param="voice", code="unknown_voice") from None
            except InvalidRequestError as error:
                raise HttpError(grpc.StatusCode.INVALID_ARGUMENT, str(error), param=param) from None
        except Exception as error:
            refused = http_error_for(error)
            metrics.requests_total.labels(method=METHOD, code=refused.grpc_code.name).inc()
            return refused.response()
        metrics.requests_total.labels(method=METHOD, code="OK").inc()
        return JSONResponse(reading.to_json())

    return [Route(PHONEMES_PATH, phonemes, methods=["POST"])]
