"""What a WebSocket door's client asks for, whatever its dialect (services.gateway.socket_dialect,
services.gateway.elevenlabs_socket), and what a dialect must answer: the commands a dialect reads
from a message, and the events it writes (services.gateway.speech_socket runs them)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from libs.serving.http_errors import HttpError
from libs.synthesis.options import SynthesisOptions
from libs.synthesis.output import AudioChunk, SentenceInfo
from libs.synthesis.transcript import CharTimes, Heard


@dataclass(frozen=True)
class Text:
    """Text for a context (created by its first text), optionally flushed at once."""

    context_id: str
    text: str
    flush: bool = False
    resume_token: str = ""
    speed: float | None = None
    """A speed for a new context (ElevenLabs' voice_settings); None: the socket's."""


@dataclass(frozen=True)
class Flush:
    """Speak what the context holds now."""

    context_id: str


@dataclass(frozen=True)
class Close:
    """The context's text is complete: speak the rest, then `done`. None: every context, then the socket."""

    context_id: str | None


@dataclass(frozen=True)
class Cancel:
    """Stop the context now and answer with what the listener heard."""

    context_id: str
    played_ms: float | None = None


@dataclass(frozen=True)
class KeepAlive:
    """Nothing to do; the socket is not idle."""


Command = Text | Flush | Close | Cancel | KeepAlive


class Dialect(Protocol):
    """How one protocol's messages read and its events look."""

    audio_as_binary: bool
    """Whether audio follows its JSON message as a binary frame (else it is inside the JSON)."""

    def commands(self, message: Any) -> Sequence[Command]:
        """The commands in one JSON message (InvalidRequestError or HttpError for a bad one)."""
        ...

    def ready(self, options: SynthesisOptions) -> dict[str, Any] | None:
        """The first event, once the socket is set up."""
        ...

    def sentence(self, context_id: str, sentence: SentenceInfo) -> list[dict[str, Any]]:
        """Events for a sentence whose audio starts now (its words and marks)."""
        ...

    def audio(self, context_id: str, chunk: AudioChunk, token: str, chars: CharTimes | None) -> dict[str, Any] | None:
        """The message of a chunk of audio (None: nothing to send); `chars` on a sentence's first chunk."""
        ...

    def flushed(self, context_id: str) -> dict[str, Any] | None: ...

    def done(self, context_id: str, audio_s: float) -> dict[str, Any] | None: ...

    def cancelled(self, context_id: str, heard: Heard) -> dict[str, Any] | None: ...

    def error(self, context_id: str | None, error: HttpError) -> dict[str, Any]: ...
