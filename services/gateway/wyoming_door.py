"""The Wyoming door: Home Assistant (and any `wyoming` client) speaks to the mesh as to Piper.

- `describe` -> `info`: one text-to-speech program with every voice (languages, speakers) and
  `supports_synthesize_streaming`.
- `synthesize` -> `audio-start`, `audio-chunk`s as they are made, `audio-stop` (16-bit mono PCM at
  the voice's rate; each chunk's `timestamp` is its place in milliseconds).
- Streaming: `synthesize-start`, `synthesize-chunk`s (text as it is written), `synthesize-stop` ->
  each sentence's audio as soon as it is complete (`audio-start` .. `audio-stop` per sentence, as
  wyoming-piper does), then `synthesize-stopped`. A `synthesize` inside a stream repeats its text for
  older clients and is ignored.
- Errors are `error` events whose `code` is the gRPC status name.

Wyoming has no authentication, so the port is off unless configured and listens on 127.0.0.1 unless
told otherwise (libs.serving.wyoming). A connection counts as one of its client's requests, and each
synthesis as one of its streams, as at the other doors; events are read with bounds on their size,
and a connection silent for the streaming idle timeout is closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import AsyncIterator
from contextlib import aclosing
from dataclasses import replace
from typing import Any, Final

import grpc
from wyoming.audio import AudioChunk as WyomingChunk
from wyoming.audio import AudioStart, AudioStop
from wyoming.error import Error
from wyoming.event import Event, async_write_event
from wyoming.info import Attribution, Describe, Info, TtsProgram, TtsVoice, TtsVoiceSpeaker
from wyoming.ping import Ping, Pong
from wyoming.tts import Synthesize, SynthesizeChunk, SynthesizeStart, SynthesizeStop, SynthesizeStopped, SynthesizeVoice

from libs.pb.tts.v1 import tts_pb2
from libs.serving.clients import ClientIdentity
from libs.serving.http import listening_socket
from libs.serving.server import PortUnavailableError
from libs.serving.status import grpc_status_for
from libs.serving.wyoming import MAX_LINE_BYTES, WyomingProtocolError, WyomingSettings, linger_before_close, read_event
from libs.synthesis.options import SynthesisOptions, resolve_options
from libs.synthesis.output import AudioChunk
from libs.synthesis.synthesizer import Synthesizer
from libs.telemetry.metrics import GatewayMetrics
from libs.telemetry.request_meter import RequestMeter
from libs.voice.registry import UnknownVoiceError, VoiceRegistry, speaker_number
from libs.wire.errors import DownstreamError, InvalidRequestError, echo

_log = logging.getLogger(__name__)

METHOD: Final = "wyoming synthesize"
PROGRAM: Final = "tts-mesh"
SAMPLE_WIDTH_BYTES: Final = 2
CHANNELS: Final = 1
MAX_HELD_TEXT_CHARS: Final = 100_000
"""Streamed text a connection may have sent and the text side not yet taken (it takes text as fast as
sentences are spoken): an hour of speech, far past any answer a home assistant speaks."""


def info_event(registry: VoiceRegistry, version: str) -> Event:
    """The answer to `describe`: every voice, with its languages and speakers."""
    voices = []
    for voice in registry.voices():
        speakers = voice.speakers()
        entry = TtsVoice(
            name=voice.name, attribution=Attribution(name=PROGRAM, url=""), installed=True,
            description=f"{voice.name} ({voice.language_code}, {voice.quality}, {voice.sample_rate_hz} Hz)", version=version,
            languages=[voice.language_code.replace("-", "_"), voice.language_code],
            speakers=[TtsVoiceSpeaker(name=name) for name in speakers] or None,
        )  # fmt: skip
        voices.append(entry)
    program = TtsProgram(
        name=PROGRAM, attribution=Attribution(name=PROGRAM, url=""), installed=True,
        description="streaming text to speech: a gateway over acoustic and vocoder workers", version=version,
        voices=voices, supports_synthesize_streaming=True,
    )  # fmt: skip
    return Info(tts=[program]).event()


def options_for(registry: VoiceRegistry, voice: SynthesizeVoice | None) -> SynthesisOptions:
    """Synthesis options for a Wyoming voice request: by name, else by language, with a speaker by name or id."""
    name = ""
    speaker_id = 0
    if voice is not None and voice.name:
        name = voice.name
    elif voice is not None and voice.language:
        wanted = voice.language.replace("_", "-").lower()
        matches = [known for known in registry.voices() if known.language_code.lower().startswith(wanted)]
        if not matches:
            languages = ", ".join(sorted({known.language_code for known in registry.voices()}))
            raise UnknownVoiceError(f"no voice speaks {echo(voice.language)}; the languages are {languages}")
        name = matches[0].name
    chosen = registry.get(name)
    if voice is not None and voice.speaker:
        speakers = chosen.speakers()
        if voice.speaker in speakers:
            speaker_id = speakers[voice.speaker]
        elif (number := speaker_number(voice.speaker)) is not None:
            speaker_id = number
        else:
            raise InvalidRequestError(f"voice {chosen.name} has no speaker {echo(voice.speaker)}; its speakers: "
                                      f"{', '.join(speakers) or 'one, unnamed'}", field="speaker_id")  # fmt: skip
    return resolve_options(registry, voice=chosen.name, speed=1.0, encoding=tts_pb2.LINEAR_PCM, sample_rate_hz=0,
                           speaker_id=speaker_id, request_id="", include_alignment=False)  # fmt: skip


def check_synthesis_event(event: Event) -> None:
    """InvalidRequestError naming the field of a synthesis event whose data is not what Wyoming says
    (`text` a string; `voice` an object of strings; `text_format` a string): the wyoming package
    builds its events from the JSON as it comes. A `voice` of null is taken as none."""
    data = event.data
    if Synthesize.is_type(event.type) or SynthesizeChunk.is_type(event.type):
        if "text" not in data:
            raise InvalidRequestError("`text` is required: the text to speak", field="text")
        if not isinstance(data["text"], str):
            raise InvalidRequestError("`text` must be a string: the text to speak", field="text")
    if Synthesize.is_type(event.type) or SynthesizeStart.is_type(event.type):
        if data.get("voice") is None:
            data.pop("voice", None)
        elif not isinstance(data["voice"], dict):
            raise InvalidRequestError("`voice` must be an object of `name`, `language` and `speaker`", field="voice")
        else:
            for key in ("name", "language", "speaker"):
                if data["voice"].get(key) is not None and not isinstance(data["voice"][key], str):
                    raise InvalidRequestError(f"`voice.{key}` must be a string", field="voice")
        if data.get("text_format") is not None and not isinstance(data["text_format"], str):
            raise InvalidRequestError("`text_format` must be a string: text or ssml", field="text_format")


class WyomingDoor:
    """The Wyoming server of one gateway."""

    def __init__(
        self,
        settings: WyomingSettings,
        synthesizer: Synthesizer,
        registry: VoiceRegistry,
        metrics: GatewayMetrics,
        *,
        clients: ClientIdentity,
        max_connections_per_client: int,
        idle_timeout_s: float,
        version: str,
    ) -> None:
        self._settings = settings
        self._synthesizer = synthesizer
        self._registry = registry
        self._metrics = metrics
        self._clients = clients
        self._max_per_client = max_connections_per_client
        self._idle_timeout_s = idle_timeout_s
        self._info = info_event(registry, version)
        self._server: asyncio.Server | None = None
        self._open: dict[str, int] = {}
        self._zeroconf: Any = None
        self.port = settings.wyoming_port

    async def start(self) -> None:
        """Listen (and announce over mDNS when asked)."""
        try:
            listening = listening_socket(self._settings.wyoming_host, self.port)  # a bounded send buffer, as the HTTP door's
        except OSError as error:
            raise PortUnavailableError(
                f"cannot serve Wyoming on port {self.port}: {error.strerror}; stop that process or choose another --wyoming-port "
                "(TTS_WYOMING_PORT; 0 switches the Wyoming door off)"
            ) from None
        self._server = await asyncio.start_server(self._connection, sock=listening, limit=MAX_LINE_BYTES)
        self.port = self._server.sockets[0].getsockname()[1]
        _log.info("Wyoming door listening on %s:%d", self._settings.wyoming_host, self.port)
        if self._settings.wyoming_zeroconf:
            await self._announce()

    async def stop(self) -> None:
        if self._zeroconf is not None:
            with contextlib.suppress(Exception):
                await self._zeroconf._aiozc.async_close()
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(5):
                    await self._server.wait_closed()

    async def _announce(self) -> None:
        from wyoming.zeroconf import HomeAssistantZeroconf  # needs the zeroconf package; only when asked for

        host = self._settings.wyoming_host if self._settings.wyoming_host not in ("", "0.0.0.0", "::") else None
        try:
            self._zeroconf = HomeAssistantZeroconf(self.port, f"{PROGRAM}-{socket.gethostname()}", host)
            await self._zeroconf.register_server()
            _log.info("Wyoming door announced over mDNS as %s", self._zeroconf.name)
        except OSError as error:
            _log.warning("could not announce the Wyoming door over mDNS: %s", error)

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        client = self._clients.client(str(peer[0]) if peer else "", None)
        held = self._open.get(client, 0)
        try:
            if self._max_per_client and held >= self._max_per_client:
                message = f"this client already has {held} connections open here, its limit; close one first"
                await async_write_event(Error(text=message, code=grpc.StatusCode.RESOURCE_EXHAUSTED.name).event(), writer)
                await linger_before_close(reader, writer)
                return
            self._open[client] = held + 1
            try:
                await _Session(self, reader, writer, client).run()
            finally:
                left = self._open.pop(client) - 1
                if left:
                    self._open[client] = left
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()


class _ClientGone(ConnectionError):
    """The client closed its connection while an event was written to it: a stream cut short by its
    listener, not a fault of the service (not logged as one)."""


class _Session:
    """One connection's events."""

    def __init__(self, door: WyomingDoor, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, client: str) -> None:
        self._door = door
        self._reader = reader
        self._writer = writer
        self._client = client
        self._pieces: asyncio.Queue[str | None] | None = None
        self._streaming: asyncio.Task[None] | None = None
        self._held_chars = 0  # text received and not yet taken by the text side

    async def run(self) -> None:
        try:
            while True:
                try:
                    async with asyncio.timeout(self._door._idle_timeout_s):
                        event = await read_event(self._reader)
                except TimeoutError:
                    if self._streaming is not None and not self._streaming.done():
                        continue  # speaking: not idle
                    return
                if event is None:
                    return
                if not await self._handle(event):
                    return
        except WyomingProtocolError as error:
            await self._write(Error(text=str(error), code=grpc.StatusCode.INVALID_ARGUMENT.name).event())
            await linger_before_close(self._reader, self._writer)
        finally:
            if self._streaming is not None:
                self._streaming.cancel()
                await asyncio.gather(self._streaming, return_exceptions=True)

    async def _handle(self, event: Event) -> bool:
        try:
            check_synthesis_event(event)
        except InvalidRequestError as error:
            await self._error(error)
            return True
        if Describe.is_type(event.type):
            await self._write(self._door._info)
        elif Ping.is_type(event.type):
            await self._write(Pong(text=Ping.from_event(event).text).event())
        elif SynthesizeStart.is_type(event.type):
            if self._pieces is not None:
                await self._error(InvalidRequestError("a synthesize-start came inside a stream; send synthesize-stop first"))
                return True
            start = SynthesizeStart.from_event(event)
            self._pieces = asyncio.Queue()
            self._held_chars = 0
            self._streaming = asyncio.create_task(self._stream(start.voice, self._pieces))
        elif SynthesizeChunk.is_type(event.type):
            if self._pieces is None or self._streaming is None:
                await self._error(InvalidRequestError("a synthesize-chunk came outside a stream; send synthesize-start first"))
                return True
            if self._streaming.done():
                return True  # the stream ended in an error the client was told of; it may still send its text
            text = SynthesizeChunk.from_event(event).text
            self._held_chars += len(text)
            if self._held_chars > MAX_HELD_TEXT_CHARS:
                self._streaming.cancel()
                await self._error(InvalidRequestError(
                    f"the stream holds over {MAX_HELD_TEXT_CHARS} characters not yet spoken; send less text at once", field="text"))  # fmt: skip
                return True
            self._pieces.put_nowait(text)
        elif SynthesizeStop.is_type(event.type):
            if self._pieces is None or self._streaming is None:
                await self._write(SynthesizeStopped().event())
                return True
            self._pieces.put_nowait(None)
            await asyncio.gather(self._streaming, return_exceptions=True)
            self._pieces, self._streaming = None, None
            await self._write(SynthesizeStopped().event())
        elif Synthesize.is_type(event.type) and self._pieces is None:  # in a stream it repeats its text for older clients
            await self._whole(Synthesize.from_event(event))
        return True

    async def _whole(self, request: Synthesize) -> None:
        """A whole text: one audio-start, its chunks, one audio-stop. The audio-start goes with the first
        chunk, so a stream refused before any audio (a full mesh, admission's late refusal) is one
        `error` event, as at the other doors."""
        meter = RequestMeter(self._door._metrics, METHOD)
        code = "CANCELLED"
        try:
            options = options_for(self._door._registry, request.voice)
            meter.voice(options.voice.name)
            if request.text_format == "ssml":  # SynthesizeTextFormat is a str enum
                options = replace(options, ssml=True)
            chunks = await self._door._synthesizer.synthesize(request.text, options, None, self._client)
            started = False
            async with aclosing(chunks):
                async for chunk in chunks:
                    if not started:
                        await self._write(self._start(options))
                        started = True
                    await self._audio(chunk, options, meter)
            if not started:
                await self._write(self._start(options))
            await self._write(AudioStop().event())
            code = "OK"
        except _ClientGone:
            pass  # nobody to tell, and no fault of the service (CANCELLED)
        except Exception as error:
            code = await self._error(error)
        finally:
            meter.finished(code)

    async def _stream(self, voice: SynthesizeVoice | None, pieces: asyncio.Queue[str | None]) -> None:
        """A text that arrives in chunks: each sentence's audio as soon as it is complete."""
        meter = RequestMeter(self._door._metrics, METHOD)
        code = "CANCELLED"
        try:
            options = options_for(self._door._registry, voice)
            meter.voice(options.voice.name)
            chunks = await self._door._synthesizer.synthesize_incremental(self._queued(pieces), options, None, self._client)
            async with aclosing(chunks):
                async for chunk in chunks:
                    if chunk.sentence is not None:
                        await self._write(self._start(options))
                    await self._audio(chunk, options, meter)
                    if chunk.sentence_end:
                        await self._write(AudioStop().event())
            code = "OK"
        except asyncio.CancelledError:
            raise
        except _ClientGone:
            pass  # nobody to tell (CANCELLED)
        except Exception as error:
            code = await self._error(error)  # the stop still gets its synthesize-stopped
        finally:
            meter.finished(code)

    async def _queued(self, pieces: asyncio.Queue[str | None]) -> AsyncIterator[str]:
        while (piece := await pieces.get()) is not None:
            self._held_chars -= len(piece)
            yield piece

    def _start(self, options: SynthesisOptions) -> Event:
        return AudioStart(rate=options.sample_rate_hz, width=SAMPLE_WIDTH_BYTES, channels=CHANNELS).event()

    async def _audio(self, chunk: AudioChunk, options: SynthesisOptions, meter: RequestMeter) -> None:
        if not chunk.audio:
            return
        meter.sent(chunk.audio_duration_s)
        timestamp_ms = round(chunk.audio_offset_s * 1000)
        event = WyomingChunk(rate=options.sample_rate_hz, width=SAMPLE_WIDTH_BYTES, channels=CHANNELS, audio=chunk.audio, timestamp=timestamp_ms)
        await self._write(event.event())

    async def _error(self, error: BaseException) -> str:
        """Tell the client (an `error` event with the gRPC status name as its code); returns that name."""
        code, message = grpc_status_for(error) if not isinstance(error, DownstreamError) else (error.code, str(error))
        await self._write(Error(text=message, code=code.name).event())
        return code.name

    async def _write(self, event: Event) -> None:
        try:
            await async_write_event(event, self._writer)
        except ConnectionError as error:
            raise _ClientGone(str(error)) from error

