"""A WebSocket that speaks: text in as it is written, audio and timings out as they are made, several
utterances ("contexts") at once, each cancellable alone. Two dialects share it: this service's own
(services.gateway.socket_dialect) and ElevenLabs' input streaming (services.gateway.elevenlabs_socket);
a dialect only reads the client's messages into commands and writes events in its own shape.

Each context is one stream of the synthesis API (`Synthesizer.speak` over the text side's
incremental sentences): its text arrives in pieces, `flush` speaks what is held at once, `close`
ends its text, `cancel` stops it and answers with what the listener heard (libs.synthesis.transcript).

Everything is bounded as at the other doors: a message by the HTTP door's body limit (the server
closes the socket with 1009 past it), the contexts of a socket, the text of a context, a socket that
stays idle, the client's streams and share (each context is a stream of the synthesizer; the socket
itself counts as one of the client's requests and one of its key's streams). A client that does not
read gets backpressure: a few audio messages wait to be sent, then its contexts stop taking audio,
which stops their pipelines; nothing grows with what it leaves unread.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any, Final

import grpc
from starlette.websockets import WebSocket

from libs.serving.http import SocketSettings
from libs.serving.http_errors import HttpError
from libs.serving.http_limits import CLIENT_SCOPE_KEY
from libs.serving.memory import RELEASER
from libs.synthesis.options import SynthesisOptions
from libs.synthesis.output import AudioChunk
from libs.synthesis.pacing import as_asked
from libs.synthesis.synthesizer import Synthesizer
from libs.synthesis.text_side import TextFlush
from libs.synthesis.transcript import Heard, Transcript, ms
from libs.telemetry.metrics import GatewayMetrics
from libs.telemetry.request_meter import RequestMeter
from libs.text.ssml import looks_like_ssml
from libs.wire.errors import InvalidRequestError
from libs.wire.json_text import ClientJsonError, parse_client_json
from services.gateway.http_api import http_error_for
from services.gateway.socket_commands import Cancel, Close, Command, Dialect, Flush, Text
from services.gateway.socket_writer import SocketGone, SocketOverflow, SocketWriter

_log = logging.getLogger(__name__)

CANCEL_WAIT_S: Final = 1.0
"""Longest a cancelled context may take to stop before its answer goes anyway."""
POLICY_VIOLATION: Final = 1008
NORMAL: Final = 1000
MAX_FLUSHES_WAITING: Final = 64
"""Flushes of one context that may wait for their sentences; more is a client flushing in a loop."""


@dataclass
class SpeechContext:
    """One utterance of a socket."""

    context_id: str
    options: SynthesisOptions
    transcript: Transcript = field(default_factory=Transcript)
    task: asyncio.Task[None] | None = None
    sentences_done: int = 0
    sent_s: float = 0.0
    """Where the audio sent so far ends on the context's timeline."""
    text_closed: bool = False
    cancelled: bool = False
    flushes_waiting: int = 0
    _pieces: asyncio.Queue[str | None] = field(default_factory=asyncio.Queue)
    _flush_points: deque[int] = field(default_factory=deque)

    async def pieces(self) -> AsyncIterator[str]:
        """The text as it arrives, until `close`."""
        while (piece := await self._pieces.get()) is not None:
            yield piece

    def put(self, piece: str | None) -> None:
        self._pieces.put_nowait(piece)


class SpeechSocket:
    """One client's socket: reads its commands, runs its contexts, sends what they make."""

    def __init__(
        self,
        websocket: WebSocket,
        dialect: Dialect,
        options: SynthesisOptions,
        *,
        synthesizer: Synthesizer,
        settings: SocketSettings,
        metrics: GatewayMetrics,
        method: str,
        idle_timeout_s: float | None = None,
        options_for: Callable[[SynthesisOptions, Text], SynthesisOptions] | None = None,
    ) -> None:
        self._websocket = websocket
        self._dialect = dialect
        self._options = options
        self._synthesizer = synthesizer
        self._settings = settings
        self._metrics = metrics
        self._method = method
        self._idle_timeout_s = idle_timeout_s or settings.socket_idle_timeout_s
        self._options_for = options_for
        self._writer = SocketWriter(websocket)
        self._contexts: dict[str, SpeechContext] = {}
        self._closing = False
        self._done: asyncio.Event | None = None
        self._client = str(websocket.scope.get(CLIENT_SCOPE_KEY, ""))

    async def serve(self, first: Sequence[Command] = ()) -> None:
        """Run the socket until the client closes it, closes every context, or goes idle."""
        writer = asyncio.create_task(self._writer.run())
        try:
            self._writer.event(None, self._dialect.ready(self._options))
            for command in first:
                await self._handle(command)
            await self._read()
        except SocketOverflow:
            await self._close(POLICY_VIOLATION, "too many events left unread; read the socket")
        finally:
            for context in list(self._contexts.values()):
                if context.task is not None:
                    context.task.cancel()
            tasks = [context.task for context in self._contexts.values() if context.task is not None]
            await asyncio.gather(*tasks, return_exceptions=True)
            if not self._writer.closed:
                await self._writer.drain(2.0)
            writer.cancel()
            await asyncio.gather(writer, return_exceptions=True)
            RELEASER.stream_ended()

    async def _read(self) -> None:
        self._done = asyncio.Event()
        receiving: asyncio.Task[Any] | None = None
        try:
            while True:
                if self._closing and not self._contexts:
                    await self._writer.drain(5.0)
                    await self._close(NORMAL, "done")
                    return
                receiving = receiving or asyncio.create_task(self._websocket.receive())
                done_waiting = asyncio.create_task(self._done.wait())
                finished, _ = await asyncio.wait((receiving, done_waiting), timeout=self._idle_timeout_s,
                                                 return_when=asyncio.FIRST_COMPLETED)  # fmt: skip
                done_waiting.cancel()
                self._done.clear()
                if receiving not in finished:
                    if finished or self._contexts:
                        continue  # the last context ended (closing), or still speaking: not idle
                    await self._close(NORMAL, f"idle for {self._idle_timeout_s:g} s")
                    return
                message, receiving = receiving.result(), None
                if not await self._dispatch(message):
                    return
        finally:
            if receiving is not None:
                receiving.cancel()

    async def _dispatch(self, message: dict[str, Any]) -> bool:
        """Act on one message from the client; False when the client has gone."""
        if message["type"] == "websocket.disconnect":
            return False
        try:
            commands = self._dialect.commands(json_of(message))
        except (InvalidRequestError, HttpError) as error:
            self._writer.event(None, self._dialect.error(None, http_error_for(error)))
            return True
        for command in commands:
            await self._handle(command)
        return True

    async def _handle(self, command: Command) -> None:
        if isinstance(command, Text):
            if self._closing and command.context_id not in self._contexts:
                self._context_error(command.context_id, InvalidRequestError("this socket is closing: every context was closed"))
                return
            context = self._contexts.get(command.context_id) or self._open(command)
            if context is None:
                return
            if context.text_closed:
                self._context_error(context.context_id, InvalidRequestError(f"context {command.context_id!r} is closed; use a new context_id"))
                return
            if command.text:
                if context.transcript.sent_chars + len(command.text) > self._settings.socket_max_context_chars:
                    await self._fail(context, InvalidRequestError(
                        f"context {context.context_id!r} would hold over {self._settings.socket_max_context_chars} characters; "
                        "start a new context for more text", field="text"))  # fmt: skip
                    return
                context.transcript.add_text(command.text)
                context.put(command.text)
            if command.flush:
                self._flush(context)
        elif isinstance(command, Flush):
            context = self._contexts.get(command.context_id)
            if context is not None and not context.text_closed:
                self._flush(context)
            elif context is None:
                self._writer.event(command.context_id, self._dialect.flushed(command.context_id))
        elif isinstance(command, Close):
            if command.context_id is not None and command.context_id not in self._contexts:
                # Nothing of it is open (never, or it is done): it is done, as a flush or a cancel of it is answered.
                self._writer.event(command.context_id, self._dialect.done(command.context_id, 0.0))
                return
            targets = list(self._contexts.values()) if command.context_id is None else [self._contexts.get(command.context_id)]
            for context in targets:
                if context is not None and not context.text_closed:
                    context.text_closed = True
                    context.put(None)
            if command.context_id is None:
                self._closing = True
        elif isinstance(command, Cancel):
            await self._cancel(command)

    def _open(self, command: Text) -> SpeechContext | None:
        if len(self._contexts) >= self._settings.socket_max_contexts:
            self._context_error(command.context_id, HttpError(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"this socket already speaks {len(self._contexts)} contexts, its limit; close or cancel one first",
                code="context_limit"))  # fmt: skip
            return None
        try:
            options = self._options if self._options_for is None else self._options_for(self._options, command)
        except Exception as error:  # a bad resume token, speed
            self._context_error(command.context_id, error)
            return None
        context = SpeechContext(command.context_id, options)
        ssml = looks_like_ssml(command.text)
        context.text_closed = ssml  # an SSML document is whole: it is the context's text
        self._contexts[command.context_id] = context
        context.task = asyncio.create_task(self._speak(context, command.text if ssml else None))
        if ssml:
            context.transcript.add_text(command.text)
            return None  # its text is in; nothing more to feed
        return context

    def _flush(self, context: SpeechContext) -> None:
        if context.flushes_waiting >= MAX_FLUSHES_WAITING:
            self._context_error(context.context_id, InvalidRequestError(
                f"context {context.context_id!r} already has {MAX_FLUSHES_WAITING} flushes waiting; wait for `flushed`", field="flush"))  # fmt: skip
            return

        def reached(sentences: int) -> None:
            context.flushes_waiting -= 1
            context._flush_points.append(sentences)
            self._flushes_done(context)

        context.flushes_waiting += 1
        context.put(TextFlush(reached))

    def _flushes_done(self, context: SpeechContext) -> None:
        while context._flush_points and context._flush_points[0] <= context.sentences_done:
            context._flush_points.popleft()
            self._writer.event(context.context_id, self._dialect.flushed(context.context_id))

    async def _speak(self, context: SpeechContext, document: str | None) -> None:
        """Speak the context: its whole `document` (SSML), else its text as it arrives. Either waits for
        room where the mesh has none now (its text queues meanwhile), and a refusal is the context's error."""
        meter = RequestMeter(self._metrics, self._method)
        meter.voice(context.options.voice.name)
        code = "CANCELLED"
        try:
            if document is not None:
                chunks = await self._synthesizer.synthesize(document, context.options, None, self._client)
            else:
                chunks = await self._synthesizer.synthesize_incremental(context.pieces(), context.options, None, self._client)
            context.options = chunks.options  # with the tier it is spoken in: its resume tokens name it
            async with aclosing(as_asked(chunks, context.options)) as paced:  # type: ignore[type-var]
                async for chunk in paced:
                    await self._send_chunk(context, chunk)
                    meter.sent(chunk.audio_duration_s)
            code = "OK"
            self._writer.event(context.context_id, self._dialect.done(context.context_id, context.sent_s))
        except asyncio.CancelledError:
            raise
        except (SocketOverflow, SocketGone):
            pass  # the socket is closing: no one to tell
        except Exception as error:
            refused = http_error_for(error)
            code = refused.grpc_code.name
            with contextlib.suppress(SocketOverflow):
                self._writer.event(context.context_id, self._dialect.error(context.context_id, refused))
        finally:
            meter.finished(code)
            if not context.cancelled:
                self._contexts.pop(context.context_id, None)
            if self._closing and not self._contexts and self._done is not None:
                self._done.set()  # the last context of a closing socket: the read loop closes it now

    async def _send_chunk(self, context: SpeechContext, chunk: AudioChunk) -> None:
        chars = None
        if chunk.sentence is not None:
            context.transcript.add_words(chunk.sentence.words)
            chars = context.transcript.char_times(chunk.sentence.words)
            for event in self._dialect.sentence(context.context_id, chunk.sentence):
                self._writer.event(context.context_id, event)
        token = context.options.resume_token(chunk.resume) if chunk.resume is not None else ""
        message = self._dialect.audio(context.context_id, chunk, token, chars)
        if message is not None or chunk.audio:
            data = chunk.audio if self._dialect.audio_as_binary and chunk.audio else None
            await self._writer.audio(context.context_id, message, data)
        context.sent_s = chunk.audio_offset_s + chunk.audio_duration_s
        if chunk.sentence_end:
            context.sentences_done += 1
            self._flushes_done(context)

    async def _cancel(self, command: Cancel) -> None:
        context = self._contexts.get(command.context_id)
        if context is None:
            self._writer.event(command.context_id, self._dialect.cancelled(command.context_id, Heard(command.played_ms or 0.0, "", ())))
            return
        context.cancelled = True
        if context.task is not None:
            context.task.cancel()
            with contextlib.suppress(TimeoutError, asyncio.CancelledError, Exception):
                async with asyncio.timeout(CANCEL_WAIT_S):
                    await asyncio.gather(context.task, return_exceptions=True)
        self._writer.drop(context.context_id)
        self._contexts.pop(context.context_id, None)
        sent_ms = ms(context.sent_s)
        played_ms = sent_ms if command.played_ms is None else min(max(0.0, command.played_ms), sent_ms)
        self._writer.event(context.context_id, self._dialect.cancelled(context.context_id, context.transcript.heard(played_ms)))

    async def _fail(self, context: SpeechContext, error: Exception) -> None:
        context.cancelled = True
        if context.task is not None:
            context.task.cancel()
            await asyncio.gather(context.task, return_exceptions=True)
        self._writer.drop(context.context_id)
        self._contexts.pop(context.context_id, None)
        self._context_error(context.context_id, error)

    def _context_error(self, context_id: str, error: BaseException) -> None:
        self._writer.event(context_id, self._dialect.error(context_id, http_error_for(error)))

    async def _close(self, code: int, reason: str) -> None:
        with contextlib.suppress(Exception):
            await self._websocket.close(code, reason)


def json_of(message: dict[str, Any], which: str = "a message") -> Any:
    """A received WebSocket message's JSON; INVALID_ARGUMENT naming `which` when it is binary or not JSON."""
    text = message.get("text")
    if text is None:
        raise InvalidRequestError(f"{which} must be JSON text; binary messages are not taken")
    try:
        return parse_client_json(text)
    except ClientJsonError as error:
        raise InvalidRequestError(f"{which} {error}") from None
