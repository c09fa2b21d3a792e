"""What a front door does with a job request before it reaches the store: the text checked, the
options resolved as for a stream (libs.synthesis.options), errors mapped to gRPC status codes."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Final

import grpc

from libs.jobs.audio import JobAudioUnavailableError
from libs.jobs.chunks import ObjectStoreError
from libs.jobs.sealed import TamperedJobDataError
from libs.jobs.store import CANCELLED, FAILED, QUEUED, RUNNING, SUCCEEDED, IdempotencyConflictError, JobNotFoundError, JobSpec
from libs.pb.tts.v1 import jobs_pb2
from libs.serving.status import grpc_status_for
from libs.synthesis.options import resolve_options
from libs.text.errors import EmptyTextError
from libs.text.normalize import check_not_empty
from libs.text.ssml import SsmlError, looks_like_ssml, parse_ssml, spoken_segments
from libs.voice.registry import VoiceRegistry
from libs.wire.errors import InvalidRequestError

_log = logging.getLogger(__name__)
MAX_IDEMPOTENCY_KEY_CHARS: Final = 256
DEFAULT_PAGE_SIZE: Final = 50
MAX_PAGE_SIZE: Final = 1000
MAX_PAGE_TOKEN_DIGITS: Final = 18
"""A page token is an offset this service wrote: one of more digits than this is none of its own."""
STATE_VALUES: Final = {
    QUEUED: jobs_pb2.JOB_STATE_QUEUED,
    RUNNING: jobs_pb2.JOB_STATE_RUNNING,
    SUCCEEDED: jobs_pb2.JOB_STATE_SUCCEEDED,
    FAILED: jobs_pb2.JOB_STATE_FAILED,
    CANCELLED: jobs_pb2.JOB_STATE_CANCELLED,
}


def job_spec(
    registry: VoiceRegistry, *, voice: str, speed: float, encoding: int, sample_rate_hz: int, speaker_id: int, speaker: str = ""
) -> JobSpec:
    """The job's options, checked exactly as a Synthesize request's are (InvalidRequestError, UnknownVoiceError)."""
    options = resolve_options(
        registry, voice=voice, speed=speed, encoding=encoding, sample_rate_hz=sample_rate_hz,
        speaker_id=speaker_id, request_id="", include_alignment=False, speaker=speaker,
    )  # fmt: skip
    return JobSpec(options.voice.name, options.speed, options.encoding, options.sample_rate_hz, options.speaker_id)


@dataclass(frozen=True)
class PageNames:
    """What a door calls the paging fields, for its error messages."""

    size: str = "page_size"
    token: str = "page_token"
    next_token: str = "next_page_token"


GRPC_PAGE_NAMES: Final = PageNames()


def check_job_text(text: str, max_chars: int) -> None:
    """InvalidRequestError for a text no job can take: empty, only spaces and punctuation, too long, or
    SSML (a text that starts with <speak>, as for a stream) outside the subset or without words.
    Whether espeak-ng finds words in what is left (a script the voice cannot read) shows when it runs."""
    if not text.strip():
        raise InvalidRequestError("the text is empty; send the text to speak", field="text")
    if len(text) > max_chars:
        raise InvalidRequestError(f"the text is {len(text)} characters long; a job takes at most {max_chars}", field="text")
    try:
        if looks_like_ssml(text):
            spoken_segments(parse_ssml(text))
        else:
            check_not_empty(text)  # only punctuation: refused now, as a stream refuses it, not failed later
    except (SsmlError, EmptyTextError) as error:
        raise InvalidRequestError(str(error), field="text") from None


def check_idempotency_key(key: str) -> None:
    if len(key) > MAX_IDEMPOTENCY_KEY_CHARS:
        raise InvalidRequestError(
            f"the idempotency key is {len(key)} characters long; use at most {MAX_IDEMPOTENCY_KEY_CHARS}", field="idempotency_key"
        )


def page_bounds(page_size: int, page_token: str, names: PageNames = GRPC_PAGE_NAMES) -> tuple[int, int]:
    """(limit, offset) of a list request; errors name the field to fix by its proto name and, in
    their message, as `names` (the door's own names)."""
    if page_size < 0 or page_size > MAX_PAGE_SIZE:
        raise InvalidRequestError(
            f"{names.size} {page_size} is out of range; use 1 to {MAX_PAGE_SIZE}, or 0 for {DEFAULT_PAGE_SIZE}", field="page_size"
        )
    if page_token and not (page_token.isascii() and page_token.isdecimal() and len(page_token) <= MAX_PAGE_TOKEN_DIGITS):
        raise InvalidRequestError(
            f"{names.token} is not one this service gave; send the {names.next_token} of the previous page", field="page_token"
        )
    return page_size or DEFAULT_PAGE_SIZE, int(page_token or 0)


def job_status_for(error: BaseException) -> tuple[grpc.StatusCode, str]:
    """The status a client gets for `error`: job errors here, every other one through the one status table."""
    if isinstance(error, JobNotFoundError):
        return grpc.StatusCode.NOT_FOUND, str(error)
    if isinstance(error, (IdempotencyConflictError, JobAudioUnavailableError)):
        return grpc.StatusCode.FAILED_PRECONDITION, str(error)
    if isinstance(error, TamperedJobDataError):
        return grpc.StatusCode.DATA_LOSS, str(error)
    if isinstance(error, ObjectStoreError):  # its details name the bucket: for the log, not the client
        _log.warning("%s", error)
        return grpc.StatusCode.UNAVAILABLE, "the job audio store is unreachable; try again later"
    return grpc_status_for(error)
