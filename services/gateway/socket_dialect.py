"""This service's WebSocket dialect, `/v1/audio/speech/stream` (docs/api.md, "WebSocket").

The first message is `start`: the HTTP speech body's fields, with the same rules
(services.gateway.speech_body: `voice`, `speed`, `response_format`, `sample_rate_hz`, `lexicon`, ...),
plus `audio` (`binary`: each audio message is followed by a binary frame of the bytes; `base64`:
the bytes are inside it) and `frame_ms` (real-time frames). Then `text` pieces (plain text, or an
SSML document whole as a context's first text), `flush`, `close` and `cancel`, each for a
`context_id` ("0" when left out). Out come `ready`, then per context `audio` (a sentence's first
carries the sentence, its words and their times, as gRPC's first piece does), `mark`, `flushed`,
`done`, `cancelled` (what was heard) and `error` (with the gRPC status name as `code`). Times are
milliseconds on the context's timeline.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from typing import Any, Final, Literal

import grpc
from pydantic import Field, ValidationError

from libs.serving.http_errors import HttpError
from libs.synthesis.options import SynthesisOptions, resolve_options, with_resume
from libs.synthesis.output import AudioChunk, SentenceInfo
from libs.synthesis.transcript import CharTimes, Heard, ms
from libs.voice.registry import VoiceRegistry
from libs.voice.tiers import tier_of_name
from services.gateway.socket_commands import Cancel, Close, Command, Flush, KeepAlive, Text
from services.gateway.speech_body import LiveSpeechFields, RequestBody, body_error

PATH: Final = "/v1/audio/speech/stream"
DEFAULT_CONTEXT: Final = "0"
MAX_CONTEXT_ID_CHARS: Final = 128


class SocketStart(LiveSpeechFields):
    """The first message: the speech body's fields (`input` optional: the default context's first
    text), how audio travels, and real-time frames."""

    type: Literal["start"] = Field(description='"start"')
    input: str = Field("", description="text for context \"0\" to begin with (optional)")
    response_format: str = Field("pcm", description="as for /v1/audio/speech; pcm (24 kHz 16-bit) by default")
    audio: Literal["binary", "base64"] = Field("binary", description="binary frames, or base64 inside the audio events")
    """How audio travels: a binary frame after each audio event, or base64 inside it."""
    frame_ms: int = Field(0, description="0, or 10 to 100: audio in real-time frames of that length")
    """Real-time frames (libs.synthesis.pacing); 0: audio as it is made."""

    def socket_options(self, registry: VoiceRegistry) -> SynthesisOptions:
        """The options every context of the socket speaks with (errors name their field)."""
        return resolve_options(
            registry, voice=self.voice_name, speed=self.speed, encoding=self.encoding, sample_rate_hz=self.output_rate_hz,
            speaker_id=0, request_id="", include_alignment=False, lexicon=self.lexicon, frame_ms=self.frame_ms,
            tier=tier_of_name(self.tier),
        )  # fmt: skip


class _Message(RequestBody):
    context_id: str = Field(DEFAULT_CONTEXT, max_length=MAX_CONTEXT_ID_CHARS, description="the context")


class TextMessage(_Message):
    type: Literal["text"]
    text: str = Field(description="the next piece of text (joined as sent)")
    flush: bool = Field(False, description="speak what is held at once")
    resume_token: str = Field("", description="a context's first text only: go on from this token")


class FlushMessage(_Message):
    type: Literal["flush"]


class CloseMessage(RequestBody):
    type: Literal["close"]
    context_id: str | None = Field(None, description="the context whose text is complete; none: all, then the socket")


class CancelMessage(_Message):
    type: Literal["cancel"]
    played_ms: float | None = Field(None, ge=0, description="how much of the context's audio the client played")


class KeepAliveMessage(RequestBody):
    type: Literal["keep_alive"]


MESSAGES: Final[Mapping[str, type[RequestBody]]] = {
    "text": TextMessage, "flush": FlushMessage, "close": CloseMessage, "cancel": CancelMessage, "keep_alive": KeepAliveMessage,
}  # fmt: skip


def parse_start(message: Any) -> SocketStart:
    """The first message as `SocketStart`, or the HttpError for its first problem."""
    try:
        return SocketStart.model_validate(message)
    except ValidationError as refused:
        raise body_error(SocketStart, refused.errors()[0]) from None


class OurDialect:
    """This service's own messages and events."""

    def __init__(self, start: SocketStart) -> None:
        self.audio_as_binary = start.audio == "binary"
        self._start = start

    def commands(self, message: Any) -> Sequence[Command]:
        kind = message.get("type") if isinstance(message, dict) else None
        model = MESSAGES.get(kind) if isinstance(kind, str) else None
        if model is None:
            raise HttpError(grpc.StatusCode.INVALID_ARGUMENT, f"`type` must be one of {', '.join(MESSAGES)}", param="type", code="invalid_value")
        try:
            parsed: Any = model.model_validate(message)
        except ValidationError as refused:
            raise body_error(model, refused.errors()[0]) from None
        if isinstance(parsed, TextMessage):
            return [Text(parsed.context_id, parsed.text, parsed.flush, parsed.resume_token)]
        if isinstance(parsed, FlushMessage):
            return [Flush(parsed.context_id)]
        if isinstance(parsed, CloseMessage):
            return [Close(parsed.context_id)]
        if isinstance(parsed, CancelMessage):
            return [Cancel(parsed.context_id, parsed.played_ms)]
        return [KeepAlive()]

    def ready(self, options: SynthesisOptions) -> dict[str, Any]:
        return {
            "type": "ready", "voice": options.voice.name, "response_format": self._start.response_format,
            "sample_rate_hz": options.sample_rate_hz, "audio": self._start.audio, "frame_ms": options.frame_ms,
        }  # fmt: skip

    def sentence(self, context_id: str, sentence: SentenceInfo) -> list[dict[str, Any]]:
        """The sentence's SSML marks (its words ride on its first audio event, as on gRPC's first piece)."""
        return [{"type": "mark", "context_id": context_id, "name": mark.name, "time_ms": ms(mark.time_s)} for mark in sentence.marks]

    def audio(self, context_id: str, chunk: AudioChunk, token: str, chars: CharTimes | None) -> dict[str, Any]:
        event: dict[str, Any] = {
            "type": "audio", "context_id": context_id, "sentence_index": chunk.sentence_index,
            "offset_ms": ms(chunk.audio_offset_s), "duration_ms": ms(chunk.audio_duration_s), "sentence_end": chunk.sentence_end,
        }  # fmt: skip
        if chunk.sentence is not None:  # the sentence's first audio: its words and times, before its bytes
            sentence = chunk.sentence
            event["sentence"] = {
                "index": sentence.index, "text": sentence.text, "start_ms": ms(sentence.audio_offset_s),
                "duration_ms": ms(sentence.audio_duration_s),
                "words": [{"word": word.text, "start_ms": ms(word.start_s), "end_ms": ms(word.end_s)} for word in sentence.words],
            }  # fmt: skip
        if token:
            event["resume_token"] = token
        if self.audio_as_binary:
            event["bytes"] = len(chunk.audio)
        else:
            event["audio"] = base64.b64encode(chunk.audio).decode("ascii")
        return event

    def flushed(self, context_id: str) -> dict[str, Any]:
        return {"type": "flushed", "context_id": context_id}

    def done(self, context_id: str, audio_s: float) -> dict[str, Any]:
        return {"type": "done", "context_id": context_id, "audio_ms": ms(audio_s)}

    def cancelled(self, context_id: str, heard: Heard) -> dict[str, Any]:
        return {
            "type": "cancelled", "context_id": context_id, "played_ms": heard.played_ms, "heard_text": heard.text,
            "heard_words": [{"word": word.text, "start_ms": ms(word.start_s), "end_ms": ms(word.end_s)} for word in heard.words],
        }  # fmt: skip

    def error(self, context_id: str | None, error: HttpError) -> dict[str, Any]:
        return error_event(context_id, error)


def error_event(context_id: str | None, error: HttpError) -> dict[str, Any]:
    """An `error` event: the gRPC status name as `code`, the HTTP status, what to fix, the field at fault,
    and for a refusal with pushback when to ask again (`retry_after_ms`, as HTTP's `Retry-After`)."""
    event: dict[str, Any] = {"type": "error", "code": error.grpc_code.name, "status": error.status, "message": error.message}
    if error.param:
        event["param"] = error.param
    if error.retry_after_s is not None:
        event["retry_after_ms"] = max(1, round(error.retry_after_s * 1000))
    if context_id is not None:
        event["context_id"] = context_id
    return event


def context_options(base: SynthesisOptions, command: Text) -> SynthesisOptions:
    """A new context's options: the socket's, going on from its resume token if it has one."""
    return with_resume(base, command.resume_token) if command.resume_token else base


