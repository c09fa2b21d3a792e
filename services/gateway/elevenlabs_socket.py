"""ElevenLabs' input streaming over WebSocket, so an agent built on an ElevenLabs client speaks through
the mesh by changing its base URL (docs/api.md, "ElevenLabs input streaming").

- `/v1/text-to-speech/{voice_id}/stream-input`: one utterance. The first message (`{"text": " ",
  "voice_settings": {...}}`) opens it; then `{"text": "...", "try_trigger_generation": ..., "flush":
  ...}`; `{"text": ""}` ends it. Out come `{"audio", "isFinal", "alignment", "normalizedAlignment"}`,
  then `{"isFinal": true}`, and the socket closes.
- `/v1/text-to-speech/{voice_id}/multi-stream-input`: several contexts, each message naming its
  `context_id`; `{"context_id", "close_context": true}` ends a context's text (it is spoken to its end,
  then `isFinal`), `{"close_socket": true}` ends them all. Out comes the same with `contextId`.
- Query: `output_format` (`pcm_8000` ... `pcm_48000`, `ulaw_8000`, `alaw_8000`, `mp3_<rate>_<kbps>`,
  `opus_48000_<kbps>`), `inactivity_timeout` (seconds); `model_id` and the rest are taken and ignored.
- `voice_id`: one of our voices, or any other id (an ElevenLabs one), which speaks with the default voice.
  `voice_settings.speed` is the speed (settings that are not an object, or a speed that is not a
  number, are refused); the other voice settings have no meaning here.
- Alignment: every character of the text sent, with its start and duration in milliseconds on the
  context's audio (from the words' own times, libs.synthesis.transcript), on the first audio of the
  sentence it belongs to; `normalizedAlignment` is the same (the words are matched as written).
- `POST /v1/text-to-speech/{voice_id}` and `.../stream` (a whole text, as an ElevenLabs client's
  non-streaming calls send it): `{"text", "voice_settings"?, ...}` (the other fields are taken and
  have no effect), `output_format` in the query; the audio streams back as it is made.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

import grpc

from libs.encoding.encoders import MP3_RATES_HZ
from libs.pb.tts.v1 import tts_pb2
from libs.serving.http_errors import HttpError
from libs.synthesis.options import SynthesisOptions, resolve_options, with_speed
from libs.synthesis.output import AudioChunk, SentenceInfo
from libs.synthesis.transcript import CharTimes, Heard
from libs.voice.registry import VoiceRegistry
from libs.wire.errors import echo
from services.gateway.socket_commands import Close, Command, Flush, KeepAlive, Text

SINGLE_PATH: Final = "/v1/text-to-speech/{voice_id}/stream-input"
MULTI_PATH: Final = "/v1/text-to-speech/{voice_id}/multi-stream-input"
DEFAULT_OUTPUT_FORMAT: Final = "mp3_44100_128"
MAX_INACTIVITY_TIMEOUT_S: Final = 180
"""ElevenLabs' own ceiling for `inactivity_timeout`."""
SINGLE_CONTEXT: Final = ""
_FORMAT: Final = re.compile(r"^(pcm|ulaw|alaw|mp3|opus)_(\d{1,6})(?:_(\d{1,7}))?$")


def output_format(name: str) -> tuple[int, int]:
    """(AudioEncoding, rate) of an ElevenLabs `output_format`, or HttpError naming it."""
    match = _FORMAT.match(name)
    if match:
        kind, rate = match.group(1), int(match.group(2))
        if kind == "pcm" and 8000 <= rate <= 48000:
            return tts_pb2.LINEAR_PCM, rate
        if kind in ("ulaw", "alaw") and rate == 8000:
            return (tts_pb2.MULAW if kind == "ulaw" else tts_pb2.ALAW), rate
        if kind == "mp3" and rate in MP3_RATES_HZ:
            return tts_pb2.MP3, rate
        if kind == "opus" and rate == 48000:
            return tts_pb2.OGG_OPUS, rate
    raise HttpError(
        grpc.StatusCode.INVALID_ARGUMENT,
        f"output_format {echo(name)} is not served; use pcm_<8000..48000>, ulaw_8000, alaw_8000, mp3_<rate>_<kbps> or opus_48000_<kbps>",
        param="output_format", code="invalid_value",
    )  # fmt: skip


def socket_options(registry: VoiceRegistry, voice_id: str, query: Mapping[str, str]) -> SynthesisOptions:
    """The options of a socket from its path and query."""
    encoding, rate = output_format(query.get("output_format", DEFAULT_OUTPUT_FORMAT))
    voice = voice_id if voice_id in {known.name for known in registry.voices()} else ""
    return resolve_options(registry, voice=voice, speed=1.0, encoding=encoding, sample_rate_hz=rate, speaker_id=0,
                           request_id="", include_alignment=False)  # fmt: skip


def inactivity_timeout_s(query: Mapping[str, str]) -> float | None:
    """The socket's idle timeout the client asked for (None: the gateway's)."""
    value = query.get("inactivity_timeout")
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        raise HttpError(grpc.StatusCode.INVALID_ARGUMENT, "inactivity_timeout must be a number of seconds",
                        param="inactivity_timeout", code="invalid_value") from None  # fmt: skip
    return min(max(1.0, seconds), MAX_INACTIVITY_TIMEOUT_S)


def context_options(base: SynthesisOptions, command: Text) -> SynthesisOptions:
    """A context's options: the socket's, at the speed its first message's voice settings ask for."""
    return base if command.speed is None else with_speed(base, command.speed)


class ElevenLabsDialect:
    """ElevenLabs' messages and events; `multi` for the multi-context route."""

    audio_as_binary = False

    def __init__(self, multi: bool) -> None:
        self._multi = multi
        self._opened: set[str] = set()

    def commands(self, message: Any) -> Sequence[Command]:
        if not isinstance(message, dict):
            raise HttpError(grpc.StatusCode.INVALID_ARGUMENT, "a message must be a JSON object", code="invalid_type")
        context_id = SINGLE_CONTEXT
        if self._multi:
            context_id = message.get("context_id", message.get("contextId", SINGLE_CONTEXT))
            if not isinstance(context_id, str) or len(context_id) > 128:
                raise HttpError(grpc.StatusCode.INVALID_ARGUMENT, "context_id must be a string of at most 128 characters",
                                param="context_id", code="invalid_type")  # fmt: skip
        commands: list[Command] = []
        if message.get("close_socket") is True:
            return [Close(None)]
        text = message.get("text")
        if text is not None and not isinstance(text, str):
            raise HttpError(grpc.StatusCode.INVALID_ARGUMENT, "text must be a string", param="text", code="invalid_type")
        if text is not None:
            if text == "" and not self._multi:  # end of stream: speak the rest, then close the socket
                return [Close(None)]
            speed = None
            if context_id not in self._opened:
                self._opened.add(context_id)
                speed = _speed_of(message.get("voice_settings"))
            commands.append(Text(context_id, text, flush=message.get("flush") is True, speed=speed))
        elif message.get("flush") is True:
            commands.append(Flush(context_id))
        if message.get("close_context") is True:
            commands.append(Close(context_id))
        return commands or [KeepAlive()]

    def ready(self, options: SynthesisOptions) -> dict[str, Any] | None:
        return None

    def sentence(self, context_id: str, sentence: SentenceInfo) -> list[dict[str, Any]]:
        return []

    def audio(self, context_id: str, chunk: AudioChunk, token: str, chars: CharTimes | None) -> dict[str, Any] | None:
        if not chunk.audio and chars is None:
            return None
        alignment = None
        if chars is not None and chars.chars:
            alignment = {
                "chars": list(chars.chars),
                "charStartTimesMs": [round(value) for value in chars.start_ms],
                "charDurationsMs": [round(value) for value in chars.duration_ms],
            }
        message: dict[str, Any] = {
            "audio": base64.b64encode(chunk.audio).decode("ascii") if chunk.audio else None,
            "isFinal": False,
            "normalizedAlignment": alignment,
            "alignment": alignment,
        }
        return self._with_context(message, context_id)

    def flushed(self, context_id: str) -> dict[str, Any] | None:
        return None

    def done(self, context_id: str, audio_s: float) -> dict[str, Any] | None:
        self._opened.discard(context_id)
        return self._with_context({"isFinal": True}, context_id)

    def cancelled(self, context_id: str, heard: Heard) -> dict[str, Any] | None:
        return None

    def error(self, context_id: str | None, error: HttpError) -> dict[str, Any]:
        message: dict[str, Any] = {"error": error.message, "message": error.message, "code": error.code}
        return self._with_context(message, context_id) if context_id is not None else message

    def _with_context(self, message: dict[str, Any], context_id: str | None) -> dict[str, Any]:
        if self._multi and context_id is not None:
            message["contextId"] = context_id
            message["context_id"] = context_id
        return message


def _speed_of(voice_settings: Any) -> float | None:
    """The speed `voice_settings` asks for (None: none asked); HttpError for settings that are not an
    object, or a speed that is not a number, as ElevenLabs refuses them (a speed sent as "1.2" would
    otherwise be spoken at the normal speed without a word)."""
    if voice_settings is None:
        return None
    if not isinstance(voice_settings, dict):
        raise HttpError(grpc.StatusCode.INVALID_ARGUMENT, "voice_settings must be an object, e.g. {\"speed\": 1.1}",
                        param="voice_settings", code="invalid_type")  # fmt: skip
    speed = voice_settings.get("speed")
    if speed is None:
        return None
    if isinstance(speed, bool) or not isinstance(speed, int | float):
        raise HttpError(grpc.StatusCode.INVALID_ARGUMENT, f"voice_settings.speed must be a number, not {echo(json.dumps(speed))}",
                        param="voice_settings.speed", code="invalid_type")  # fmt: skip
    return float(speed)


def speech_options(registry: VoiceRegistry, voice_id: str, query: Mapping[str, str], body: Any) -> tuple[str, SynthesisOptions]:
    """The text and options of a `POST /v1/text-to-speech/{voice_id}` body (HttpError naming the field at fault)."""
    if not isinstance(body, dict):
        raise HttpError(grpc.StatusCode.INVALID_ARGUMENT, "the request body must be a JSON object", code="invalid_type")
    text = body.get("text")
    if text is not None and not isinstance(text, str):
        raise HttpError(grpc.StatusCode.INVALID_ARGUMENT, "`text` must be a string: the text to speak", param="text", code="invalid_type")
    if not text:
        raise HttpError(grpc.StatusCode.INVALID_ARGUMENT, "`text` is required: the text to speak", param="text",
                        code="missing_required_parameter")  # fmt: skip
    options = socket_options(registry, voice_id, query)
    speed = _speed_of(body.get("voice_settings"))
    return text, options if speed is None else with_speed(options, speed)
