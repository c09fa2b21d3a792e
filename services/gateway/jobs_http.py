"""The HTTP door of long-form jobs, next to `/v1/audio/speech`:

- `POST /v1/audio/jobs` (the speech body, `input` up to the job limit; optional `Idempotency-Key`
  header) -> 202 with the job and its `Location`;
- `GET /v1/audio/jobs` -> the newest jobs; `GET /v1/audio/jobs/{id}` -> status, progress, error;
- `GET /v1/audio/jobs/{id}/audio[?format=mp3|opus|aac|flac|wav|pcm|mulaw|alaw|...]` -> the file;
- `DELETE /v1/audio/jobs/{id}` -> cancels it (200 with the job).

Errors are OpenAI-shaped through the same status table as the speech route (services.gateway.http_api).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from libs.encoding.encoders import ENCODINGS, encoding_of
from libs.jobs.audio import job_audio
from libs.jobs.metrics import JobMetrics
from libs.jobs.requests import check_idempotency_key, check_job_text, job_spec, job_status_for, page_bounds
from libs.jobs.store import JobRecord, JobStore
from libs.voice.registry import VoiceRegistry
from services.gateway.http_api import (
    _HTTP_STATUS,
    MODEL_ALIASES,
    MODEL_ID,
    OPENAI_VOICES,
    RESPONSE_FORMATS,
    HttpError,
    read_json_body,
)

JOBS_PATH: Final = "/v1/audio/jobs"
BODY_OVERHEAD_BYTES: Final = 64 * 1024
FORMATS: Final[Mapping[str, int]] = {
    **{encoding.name: value for value, encoding in ENCODINGS.items()},
    **{name: made.encoding for name, made in RESPONSE_FORMATS.items()},
}
"""`response_format` and `?format=` names: OpenAI's (mp3, opus, aac, flac, wav, pcm) and every encoding's own name."""


class JobsHttpApi:
    """The job routes over one job store."""

    def __init__(self, store: JobStore, registry: VoiceRegistry, metrics: JobMetrics, max_text_chars: int) -> None:
        self._store = store
        self._registry = registry
        self._metrics = metrics
        self._max_text_chars = max_text_chars
        # UTF-8 takes up to 4 bytes a character, JSON escapes up to 6 (\uXXXX).
        self._max_body_bytes = 6 * max_text_chars + BODY_OVERHEAD_BYTES

    def routes(self) -> list[Route]:
        return [
            Route(JOBS_PATH, self.create, methods=["POST"]),
            Route(JOBS_PATH, self.list, methods=["GET"]),
            Route(JOBS_PATH + "/{job_id}", self.get, methods=["GET"]),
            Route(JOBS_PATH + "/{job_id}", self.cancel, methods=["DELETE"]),
            Route(JOBS_PATH + "/{job_id}/audio", self.audio, methods=["GET"]),
        ]

    async def create(self, request: Request) -> Response:
        try:
            body = await self._body(request)
            text, spec = self._parse(body)
            key = request.headers.get("idempotency-key", "")
            check_idempotency_key(key)
            record, new = await self._store.create(text, spec, key)
        except Exception as error:
            return _error(error)
        if new:
            self._metrics.created_total.inc()
        return JSONResponse(job_json(record), status_code=202, headers={"Location": f"{JOBS_PATH}/{record.job_id}"})

    async def list(self, request: Request) -> Response:
        try:
            limit, offset = page_bounds(_int(request.query_params.get("limit", "0"), "limit"), request.query_params.get("after", ""))
            records = await self._store.list(limit + 1, offset)
        except Exception as error:
            return _error(error)
        more = len(records) > limit
        return JSONResponse(
            {"object": "list", "data": [job_json(r) for r in records[:limit]], "has_more": more, "next": str(offset + limit) if more else None}
        )

    async def get(self, request: Request) -> Response:
        try:
            return JSONResponse(job_json(await self._store.get(request.path_params["job_id"])))
        except Exception as error:
            return _error(error)

    async def cancel(self, request: Request) -> Response:
        try:
            return JSONResponse(job_json(await self._store.cancel(request.path_params["job_id"])))
        except Exception as error:
            return _error(error)

    async def audio(self, request: Request) -> Response:
        try:
            record = await self._store.get(request.path_params["job_id"])
            name = request.query_params.get("format", "")
            if name and name not in FORMATS:
                raise HttpError(400, f"`format` must be one of {', '.join(FORMATS)}", param="format")
            encoding = FORMATS[name] if name else record.spec.encoding
            pieces = await job_audio(self._store, record, encoding)
        except Exception as error:
            return _error(error)
        spec = encoding_of(encoding)
        filename = f"{record.job_id}.{spec.extension}"
        return StreamingResponse(pieces, media_type=spec.mime_type, headers={"Content-Disposition": f'attachment; filename="{filename}"'})

    async def _body(self, request: Request) -> Any:
        return await read_json_body(request, self._max_body_bytes, f"a job takes at most {self._max_text_chars} characters")

    def _parse(self, body: Any) -> tuple[str, Any]:
        if not isinstance(body, dict):
            raise HttpError(400, "the request body must be a JSON object")
        text = body.get("input")
        if not isinstance(text, str):
            raise HttpError(400, "`input` must be the text to speak", param="input")
        model = body.get("model", MODEL_ID)
        if model not in (MODEL_ID, *MODEL_ALIASES):
            raise HttpError(404, f"the model {str(model)[:64]!r} does not exist; use {MODEL_ID!r}", param="model", code="model_not_found")
        voice = body.get("voice", "")
        if isinstance(voice, dict):
            voice = voice.get("id", "")
        if not isinstance(voice, str):
            raise HttpError(400, "`voice` must be a voice name (see GET /v1/audio/voices)", param="voice")
        name = body.get("response_format", "mp3")
        if name not in FORMATS:
            raise HttpError(400, f"`response_format` must be one of {', '.join(FORMATS)}", param="response_format")
        speed = body.get("speed", 1.0)
        if not isinstance(speed, (int, float)) or isinstance(speed, bool):
            raise HttpError(400, "`speed` must be a number", param="speed")
        rate = body.get("sample_rate_hz", RESPONSE_FORMATS[name].sample_rate_hz if name in RESPONSE_FORMATS else 0)
        if not isinstance(rate, int) or isinstance(rate, bool):
            raise HttpError(400, "`sample_rate_hz` must be an integer", param="sample_rate_hz")
        check_job_text(text, self._max_text_chars)
        spec = job_spec(
            self._registry, voice="" if voice in OPENAI_VOICES else voice, speed=float(speed),
            encoding=FORMATS[name], sample_rate_hz=rate, speaker_id=0,
        )  # fmt: skip
        return text, spec


def job_json(record: JobRecord) -> dict[str, Any]:
    """A job as the HTTP API shows it."""
    return {
        "id": record.job_id,
        "object": "audio.job",
        "status": record.state,
        "error": record.error or None,
        "progress": {
            "characters_done": record.chars_done,
            "characters_total": record.text_chars,
            "sentences_done": record.sentences_done,
            "audio_seconds": round(record.audio_s, 3),
        },
        "voice": record.spec.voice,
        "response_format": encoding_of(record.spec.encoding).name,
        "sample_rate_hz": record.spec.sample_rate_hz,
        "created_at": record.created_s,
        "updated_at": record.updated_s,
        "attempts": record.attempts,
        "audio_url": f"{JOBS_PATH}/{record.job_id}/audio",
    }


def _int(text: str, name: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise HttpError(400, f"`{name}` must be an integer", param=name) from None


def _error(error: BaseException) -> JSONResponse:
    if isinstance(error, HttpError):
        return error.response()
    code, message = job_status_for(error)
    status, type_ = _HTTP_STATUS.get(code, (500, "server_error"))
    if code.name == "FAILED_PRECONDITION":
        status = 409  # the job is not in a state that allows it (not finished, a reused idempotency key)
    return HttpError(status, message, type_=type_, code=code.name.lower(), grpc_code=code).response()
