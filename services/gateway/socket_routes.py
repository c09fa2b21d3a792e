"""The WebSocket routes of the gateway's HTTP port: this service's dialect and ElevenLabs' input
streaming (services.gateway.speech_socket runs both), and ElevenLabs' whole-text calls. Each parses
its start, builds the options through the same checks as every door, and hands the socket over."""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any, Final

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from libs.encoding.encoders import encoding_of
from libs.serving.http import SocketSettings
from libs.serving.http_limits import CLIENT_SCOPE_KEY, TIER_SCOPE_KEY
from libs.synthesis.options import with_default_tier
from libs.synthesis.synthesizer import Synthesizer
from libs.telemetry.metrics import GatewayMetrics
from libs.telemetry.request_meter import RequestMeter
from libs.voice.registry import VoiceRegistry
from libs.wire.errors import InvalidRequestError
from services.gateway import elevenlabs_socket, socket_dialect
from services.gateway.elevenlabs_socket import ElevenLabsDialect
from services.gateway.http_api import audio_bytes, closing_stream, http_error_for
from services.gateway.socket_commands import Command, Text
from services.gateway.socket_dialect import DEFAULT_CONTEXT, OurDialect, error_event, parse_start
from services.gateway.speech_body import read_json
from services.gateway.speech_socket import POLICY_VIOLATION, SpeechSocket, json_of

METHOD: Final = "WS /v1/audio/speech/stream"
ELEVENLABS_METHOD: Final = "WS /v1/text-to-speech/stream-input"
ELEVENLABS_HTTP_METHOD: Final = "POST /v1/text-to-speech"


class SocketDoors:
    """The WebSocket doors over one synthesizer."""

    def __init__(
        self, synthesizer: Synthesizer, registry: VoiceRegistry, metrics: GatewayMetrics, settings: SocketSettings, max_body_bytes: int
    ) -> None:
        self._synthesizer = synthesizer
        self._registry = registry
        self._metrics = metrics
        self._settings = settings
        self._max_body_bytes = max_body_bytes

    def routes(self) -> list[BaseRoute]:
        return [
            WebSocketRoute(socket_dialect.PATH, self.ours),
            WebSocketRoute(elevenlabs_socket.SINGLE_PATH, self.elevenlabs_single),
            WebSocketRoute(elevenlabs_socket.MULTI_PATH, self.elevenlabs_multi),
            Route("/v1/text-to-speech/{voice_id}", self.elevenlabs_speech, methods=["POST"]),
            Route("/v1/text-to-speech/{voice_id}/stream", self.elevenlabs_speech, methods=["POST"]),
        ]

    async def elevenlabs_speech(self, request: Request) -> Response:
        """ElevenLabs' whole-text call: the audio, streamed as it is made; errors in ElevenLabs' shape."""
        meter = RequestMeter(self._metrics, ELEVENLABS_HTTP_METHOD)
        try:
            body = await read_json(request, self._max_body_bytes, "send a shorter text")
            text, options = elevenlabs_socket.speech_options(
                self._registry, request.path_params["voice_id"], dict(request.query_params), body
            )
            meter.voice(options.voice.name)
            chunks = await self._synthesizer.synthesize(text, options, None, str(request.scope.get(CLIENT_SCOPE_KEY, "")))
        except Exception as error:
            refused = http_error_for(error)
            meter.finished(refused.grpc_code.name)
            return JSONResponse({"detail": {"status": refused.code, "message": refused.message}}, status_code=refused.status)
        return closing_stream(audio_bytes(chunks, meter), media_type=encoding_of(options.encoding).mime_type)

    async def ours(self, websocket: WebSocket) -> None:
        await websocket.accept()
        try:
            first = await self._first_message(websocket)
            start = parse_start(first)
            options = with_default_tier(start.socket_options(self._registry), str(websocket.scope.get(TIER_SCOPE_KEY, "")))
        except WebSocketDisconnect:
            return
        except Exception as error:
            await _refuse(websocket, error)
            return
        commands: list[Command] = [Text(DEFAULT_CONTEXT, start.input)] if start.input else []
        socket = SpeechSocket(
            websocket, OurDialect(start), options, synthesizer=self._synthesizer, settings=self._settings,
            metrics=self._metrics, method=METHOD, options_for=socket_dialect.context_options,
        )  # fmt: skip
        await socket.serve(commands)

    async def elevenlabs_single(self, websocket: WebSocket) -> None:
        await self._elevenlabs(websocket, multi=False)

    async def elevenlabs_multi(self, websocket: WebSocket) -> None:
        await self._elevenlabs(websocket, multi=True)

    async def _elevenlabs(self, websocket: WebSocket, multi: bool) -> None:
        await websocket.accept()
        dialect = ElevenLabsDialect(multi)
        try:
            query = dict(websocket.query_params)
            options = elevenlabs_socket.socket_options(self._registry, websocket.path_params["voice_id"], query)
            idle_s = elevenlabs_socket.inactivity_timeout_s(query)
        except Exception as error:
            refused = http_error_for(error)
            with contextlib.suppress(WebSocketDisconnect, RuntimeError):
                await websocket.send_text(json.dumps(dialect.error(None, refused)))
                await websocket.close(POLICY_VIOLATION, refused.message[:120])
            return
        socket = SpeechSocket(
            websocket, dialect, options, synthesizer=self._synthesizer, settings=self._settings,
            metrics=self._metrics, method=ELEVENLABS_METHOD, idle_timeout_s=idle_s, options_for=elevenlabs_socket.context_options,
        )  # fmt: skip
        await socket.serve()

    async def _first_message(self, websocket: WebSocket) -> Any:
        """The client's first message as JSON, waited for no longer than an idle socket is kept."""
        try:
            async with asyncio.timeout(self._settings.socket_idle_timeout_s):
                message = await websocket.receive()
        except TimeoutError:
            raise InvalidRequestError(f"no start message within {self._settings.socket_idle_timeout_s:g} s") from None
        if message["type"] == "websocket.disconnect":
            raise WebSocketDisconnect(message.get("code", 1000))
        return json_of(message, "the first message")


async def _refuse(websocket: WebSocket, error: BaseException) -> None:
    """An error event for a start that cannot be taken, then the socket closes (policy violation)."""
    refused = http_error_for(error)
    with contextlib.suppress(WebSocketDisconnect, RuntimeError):
        await websocket.send_text(json.dumps(error_event(None, refused)))
        await websocket.close(POLICY_VIOLATION, refused.message[:120])
