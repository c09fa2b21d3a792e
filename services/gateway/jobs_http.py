"""The HTTP door of long-form jobs, next to `/v1/audio/speech`:

- `POST /v1/audio/jobs` (the speech body without `lexicon` and `stream_format`, services.gateway.speech_body;
  `input` up to the job limit; optional `Idempotency-Key` header) -> 202 with the job and its `Location`;
- `GET /v1/audio/jobs` -> the newest jobs; `GET /v1/audio/jobs/{id}` -> status, progress, error;
- `GET /v1/audio/jobs/{id}/audio[?format=mp3|opus|aac|flac|wav|pcm|mulaw|alaw|...]` -> the file;
- `GET /v1/audio/jobs/{id}/captions[?format=vtt|srt]` -> its captions, on the file's timeline;
- `POST /v1/audio/jobs/{id}/cancel` -> stops it if it has not ended (200 with the job, as CancelJob);
- `DELETE /v1/audio/jobs/{id}` -> cancels it if it has not ended and removes it and its audio (200
  with `{"id", "object": "audio.job", "deleted": true}`, as DeleteJob).

Each verb means what the gRPC method of the same name does (protos/tts/v1/jobs.proto). Errors are
OpenAI-shaped through the same status table as the speech routes (libs.serving.http_errors).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import grpc
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from libs.encoding.encoders import encoding_of
from libs.jobs.audio import job_audio
from libs.jobs.captions import CAPTION_FORMATS, MEDIA_TYPES, job_captions
from libs.jobs.metrics import JobMetrics
from libs.jobs.requests import PageNames, check_idempotency_key, check_job_text, job_status_for, page_bounds
from libs.jobs.store import JobRecord, JobStore
from libs.serving import http_errors as errors
from libs.serving.http_errors import HttpError
from libs.voice.registry import VoiceRegistry
from libs.wire.errors import echo
from services.gateway.speech_body import PARAMS, RESPONSE_FORMATS, JobBody, read_body

JOBS_PATH: Final = "/v1/audio/jobs"
BODY_OVERHEAD_BYTES: Final = 64 * 1024
PAGE_NAMES: Final = PageNames(size="limit", token="after", next_token="next")
JOB_PARAMS: Final[Mapping[str, str]] = {**PARAMS, "page_size": "limit", "page_token": "after"}
"""The HTTP parameter of each proto field a job error can name."""


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
            Route(JOBS_PATH + "/{job_id}", self.delete, methods=["DELETE"]),
            Route(JOBS_PATH + "/{job_id}/cancel", self.cancel, methods=["POST"]),
            Route(JOBS_PATH + "/{job_id}/audio", self.audio, methods=["GET"]),
            Route(JOBS_PATH + "/{job_id}/captions", self.captions, methods=["GET"]),
        ]

    async def create(self, request: Request) -> Response:
        try:
            body = await read_body(request, JobBody, self._max_body_bytes, f"a job takes at most {self._max_text_chars} characters")
            check_job_text(body.input, self._max_text_chars)
            spec = body.spec(self._registry)
            key = request.headers.get("idempotency-key", "")
            check_idempotency_key(key)
            record, new = await self._store.create(body.input, spec, key)
        except Exception as error:
            return http_error_for(error).response()
        if new:
            self._metrics.created_total.inc()
        return JSONResponse(job_json(record), status_code=202, headers={"Location": f"{JOBS_PATH}/{record.job_id}"})

    async def list(self, request: Request) -> Response:
        try:
            limit, offset = page_bounds(_int(request.query_params.get("limit", "0"), "limit"), request.query_params.get("after", ""), PAGE_NAMES)
            records = await self._store.list(limit + 1, offset)
        except Exception as error:
            return http_error_for(error).response()
        more = len(records) > limit
        return JSONResponse(
            {"object": "list", "data": [job_json(r) for r in records[:limit]], "has_more": more, "next": str(offset + limit) if more else None}
        )

    async def get(self, request: Request) -> Response:
        try:
            return JSONResponse(job_json(await self._store.get(request.path_params["job_id"])))
        except Exception as error:
            return http_error_for(error).response()

    async def cancel(self, request: Request) -> Response:
        """Stop a job that has not ended (its runner stops within a second); an ended job is returned as it is."""
        try:
            return JSONResponse(job_json(await self._store.cancel(request.path_params["job_id"])))
        except Exception as error:
            return http_error_for(error).response()

    async def delete(self, request: Request) -> Response:
        """Cancel a job that has not ended, and remove it and its audio."""
        job_id = request.path_params["job_id"]
        try:
            await self._store.delete(job_id)
        except Exception as error:
            return http_error_for(error).response()
        return JSONResponse({"id": job_id, "object": "audio.job", "deleted": True})

    async def audio(self, request: Request) -> Response:
        try:
            record = await self._store.get(request.path_params["job_id"])
            name = request.query_params.get("format", "")
            if name and name not in RESPONSE_FORMATS:
                raise HttpError(grpc.StatusCode.INVALID_ARGUMENT, f"`format` must be one of {', '.join(RESPONSE_FORMATS)}; got {echo(name)}",
                                param="format", code="invalid_value")  # fmt: skip
            encoding = RESPONSE_FORMATS[name].encoding if name else record.spec.encoding
            pieces = await job_audio(self._store, record, encoding)
        except Exception as error:
            return http_error_for(error).response()
        spec = encoding_of(encoding)
        filename = f"{record.job_id}.{spec.extension}"
        return StreamingResponse(pieces, media_type=spec.mime_type, headers={"Content-Disposition": f'attachment; filename="{filename}"'})


    async def captions(self, request: Request) -> Response:
        """The finished job's captions, WebVTT (`?format=vtt`, the default, a timestamp before each word) or SRT."""
        try:
            record = await self._store.get(request.path_params["job_id"])
            name = request.query_params.get("format", "vtt")
            if name not in CAPTION_FORMATS:
                raise HttpError(grpc.StatusCode.INVALID_ARGUMENT, f"`format` must be one of {', '.join(CAPTION_FORMATS)}; got {echo(name)}",
                                param="format", code="invalid_value")  # fmt: skip
            text = await job_captions(self._store, record, name)
        except Exception as error:
            return http_error_for(error).response()
        filename = f"{record.job_id}.{name}"
        return Response(text, media_type=MEDIA_TYPES[name], headers={"Content-Disposition": f'attachment; filename="{filename}"'})


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
        "captions_url": f"{JOBS_PATH}/{record.job_id}/captions",
    }


def http_error_for(error: BaseException) -> HttpError:
    """The HTTP error of the job routes for `error`: job errors, then the one status table (libs.jobs.requests.job_status_for)."""
    return errors.http_error_for(error, JOB_PARAMS, job_status_for)


def _int(text: str, name: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise HttpError(grpc.StatusCode.INVALID_ARGUMENT, f"`{name}` must be an integer; got {echo(text)}", param=name, code="invalid_type") from None
