"""The public TextToSpeech servicer: parse, call the synthesis API (libs.synthesis), map to gRPC."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing
from typing import Any

import grpc

from libs.pb.tts.v1 import tts_pb2
from libs.serving.auth import CALLER_KEY, CALLER_TIER
from libs.serving.clients import FORWARDED_FOR, ClientIdentity, key_client
from libs.serving.memory import RELEASER
from libs.serving.status import abort_for, grpc_status_for
from libs.synthesis.options import SynthesisOptions, resolve_options, with_default_tier
from libs.synthesis.output import AudioChunk
from libs.synthesis.pacing import as_asked
from libs.synthesis.synthesizer import SpokenAudio, Synthesizer
from libs.telemetry import tracing
from libs.telemetry.metrics import GatewayMetrics
from libs.voice.registry import VoiceRegistry
from libs.voice.tiers import tier_enum, tier_of_enum
from libs.wire.errors import InvalidRequestError
from libs.wire.headers import TIER_METADATA_KEY
from libs.wire.request_decoding import UndecodableRequest, decoded, request_decoder

_log = logging.getLogger(__name__)

SERVICE_NAME = tts_pb2.DESCRIPTOR.services_by_name["TextToSpeech"].full_name


class TextToSpeechServicer:
    """Synthesize, StreamingSynthesize and ListVoices: each parses its request, calls the synthesis
    API, and maps what comes back (or goes wrong) to gRPC."""

    def __init__(
        self, *, registry: VoiceRegistry, synthesizer: Synthesizer, metrics: GatewayMetrics, clients: ClientIdentity | None = None
    ) -> None:
        self._registry = registry
        self._synthesizer = synthesizer
        self._metrics = metrics
        self._clients = clients or ClientIdentity()

    async def Synthesize(
        self, request: tts_pb2.SynthesizeRequest | UndecodableRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[tts_pb2.SynthesizeResponse]:
        async with self._call("Synthesize", context) as call:
            request = decoded(request)
            options = self._options(request)
            spoken = await self._synthesizer.synthesize(request.text, options, context.time_remaining(), client_of(context, self._clients))
            call.voice(options.voice.name)
            async for response in _responses(spoken, context, call):
                yield response

    async def StreamingSynthesize(
        self,
        request_iterator: AsyncIterator[tts_pb2.StreamingSynthesizeRequest | UndecodableRequest],
        context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[tts_pb2.SynthesizeResponse]:
        async with self._call("StreamingSynthesize", context) as call:
            first = await anext(aiter(request_iterator), None)
            if first is None:
                return
            first = decoded(first)
            if first.WhichOneof("request") != "config":
                raise InvalidRequestError("the first StreamingSynthesizeRequest must carry `config`")
            options = self._options(first.config)
            call.voice(options.voice.name)
            spoken = await self._synthesizer.synthesize_incremental(
                _text_pieces(request_iterator), options, context.time_remaining(), client_of(context, self._clients)
            )
            async for response in _responses(spoken, context, call):
                yield response

    async def ListVoices(
        self, request: tts_pb2.ListVoicesRequest | UndecodableRequest, context: grpc.aio.ServicerContext
    ) -> tts_pb2.ListVoicesResponse:
        async with self._call("ListVoices", context):
            request = decoded(request)
            prefix = request.language_code.lower()
            return tts_pb2.ListVoicesResponse(
                voices=[
                    tts_pb2.Voice(
                        name=voice.name,
                        language_code=voice.language_code,
                        natural_sample_rate_hz=voice.sample_rate_hz,
                        num_speakers=voice.num_speakers,
                        is_default=voice.name == self._registry.default_name,
                        quality=voice.quality,
                        speakers=voice.speakers(),
                        tiers=[tier_enum(tier) for tier in voice.tiers],
                    )
                    for voice in self._registry.voices()
                    if voice.language_code.lower().startswith(prefix)
                ]
            )

    def _options(self, message: tts_pb2.SynthesizeRequest | tts_pb2.StreamingSynthesizeConfig) -> SynthesisOptions:
        """Validated synthesis options from the fields a SynthesizeRequest and a streaming config share
        (with the caller's API key's tier when the request names none)."""
        options = resolve_options(
            self._registry,
            voice=message.voice,
            speed=message.speed,
            encoding=message.encoding,
            sample_rate_hz=message.sample_rate_hz,
            speaker_id=message.speaker_id,
            request_id=message.request_id,
            include_alignment=message.include_alignment,
            lexicon=dict(message.lexicon),
            ssml=isinstance(message, tts_pb2.SynthesizeRequest) and message.ssml,
            resume_token=message.resume_token,
            frame_ms=message.frame_ms,
            speaker=message.speaker,
            tier=tier_of_enum(message.tier),
        )
        return with_default_tier(options, CALLER_TIER.get())

    def _call(self, method: str, context: grpc.aio.ServicerContext) -> _CallScope:
        return _CallScope(self._metrics, method, context)


def closed_when_done(context: grpc.aio.ServicerContext, chunks: AsyncGenerator[Any, None]) -> aclosing[Any]:
    """`chunks` closed when the block ends and, at the latest, when the call does.

    A client that cancels while a response is being written leaves this handler's generator
    suspended where it yielded: gRPC drops it without closing it, and only the garbage collector
    would, much later. Until then the stream would hold its place in the client's and the
    gateway's limits, and its worker streams. The call's end closes it instead.
    """

    def close(_context: object) -> None:
        asyncio.get_running_loop().create_task(_close(chunks))

    context.add_done_callback(close)
    return aclosing(chunks)


async def _close(chunks: AsyncGenerator[Any, None]) -> None:
    with contextlib.suppress(RuntimeError):  # still running: the handler is unwinding and closes it itself
        await chunks.aclose()


def client_of(context: grpc.aio.ServicerContext, clients: ClientIdentity) -> str:
    """The caller's API key when keys are on; else its address without its port ("ipv4:10.0.0.7"), so
    all of one host's connections count as one client, and behind a trusted proxy the address it
    forwarded for (libs.serving.clients)."""
    key_id = CALLER_KEY.get()
    if key_id is not None:
        return key_client(key_id)
    forwarded = next((value for key, value in context.invocation_metadata() or () if key == FORWARDED_FOR), None)
    return clients.of_grpc_peer(context.peer() or "", forwarded)


async def _text_pieces(request_iterator: AsyncIterator[Any]) -> AsyncIterator[str]:
    """The text of each StreamingSynthesizeRequest after the first."""
    async for request in request_iterator:
        request = decoded(request)
        if request.WhichOneof("request") != "text":
            raise InvalidRequestError("only the first StreamingSynthesizeRequest may carry `config`")
        yield request.text


async def _responses(spoken: SpokenAudio, context: grpc.aio.ServicerContext, call: _CallScope) -> AsyncIterator[tts_pb2.SynthesizeResponse]:
    """`spoken` as responses (in real-time frames when asked for), the tier its audio starts in sent
    as the tts-tier header with the first."""
    options = spoken.options  # with the tier it was admitted in; each resume token names its sentence's
    chunks = as_asked(spoken, options)
    told = False
    async with closed_when_done(context, chunks):
        async for chunk in chunks:
            if not told:
                await context.send_initial_metadata(((TIER_METADATA_KEY, spoken.tier),))
                told = True
            response = _response(chunk, options)
            call.sent(response)
            yield response


def _response(chunk: AudioChunk, options: SynthesisOptions) -> tts_pb2.SynthesizeResponse:
    response = tts_pb2.SynthesizeResponse(
        audio=chunk.audio,
        sample_rate_hz=options.sample_rate_hz,
        encoding=options.encoding,
        request_id=options.request_id,
        sentence_index=chunk.sentence_index,
        audio_offset_s=chunk.audio_offset_s,
        audio_duration_s=chunk.audio_duration_s,
        sentence_end=chunk.sentence_end,
    )
    if chunk.resume is not None:
        point = chunk.resume
        response.resume_point.sentence_index = point.next_sentence
        response.resume_point.sentence_samples = point.next_sentence_samples
        response.resume_point.stream_samples = point.stream_samples
        response.resume_point.token = options.resume_token(point)
    sentence = chunk.sentence
    if sentence is not None:
        info = response.sentence
        info.index = sentence.index
        info.text = sentence.text
        info.phonemes = sentence.phonemes
        info.audio_offset_s = sentence.audio_offset_s
        info.audio_duration_s = sentence.audio_duration_s
        for word in sentence.words:
            info.words.add(text=word.text, start_s=word.start_s, end_s=word.end_s)
        for mark in sentence.marks:
            info.marks.add(name=mark.name, time_s=mark.time_s)
        info.pause_before_s = sentence.pause_before_s
        info.pause_after_s = sentence.pause_after_s
        info.tier = tier_enum(sentence.tier or options.tier)
        if options.include_alignment:
            info.phoneme_frames.extend(sentence.phoneme_frames)
            info.frame_duration_s = sentence.frame_duration_s
    return response


class _CallScope:
    """Measures a call (status, time to first audio, synthesis time, audio sent) and turns any error
    escaping it into a status through the one error table."""

    def __init__(self, metrics: GatewayMetrics, method: str, context: grpc.aio.ServicerContext) -> None:
        self._metrics = metrics
        self._method = method
        self._context = context
        self._started_s = time.monotonic()
        self._voice = ""
        self._last_audio_s: float | None = None

    async def __aenter__(self) -> _CallScope:
        self._metrics.inflight_streams.inc()
        return self

    def voice(self, name: str) -> None:
        """The request asked for voice `name` (counted once the request is valid enough to say)."""
        self._voice = name
        self._metrics.voice_requests_total.labels(voice=name).inc()
        tracing.request_span().set_attribute(tracing.ATTR_VOICE, name)

    def sent(self, response: tts_pb2.SynthesizeResponse) -> None:
        """A response is about to go to the client."""
        if not response.audio:
            return
        now_s = time.monotonic()
        if self._last_audio_s is None:
            first_audio_s = now_s - self._started_s
            self._metrics.time_to_first_audio_seconds.labels(method=self._method).observe(first_audio_s)
            tracing.record_time_to_first_audio(first_audio_s)
        self._last_audio_s = now_s
        self._metrics.audio_seconds_total.labels(voice=self._voice).inc(response.audio_duration_s)

    async def __aexit__(self, exc_type: Any, error: BaseException | None, traceback: Any) -> bool:
        self._metrics.inflight_streams.dec()
        RELEASER.stream_ended()  # what the call held (audio, mel, a slow client's backlog) goes back soon
        if error is None:
            self._metrics.requests_total.labels(method=self._method, code="OK").inc()
            if self._last_audio_s is not None:
                self._metrics.synthesis_seconds.labels(method=self._method).observe(self._last_audio_s - self._started_s)
            return False
        if isinstance(error, (asyncio.CancelledError, GeneratorExit, grpc.aio.AbortError)):
            # GeneratorExit: the client went away while a response was being sent, and the stream was closed.
            code = _name(self._context.code()) if isinstance(error, grpc.aio.AbortError) else "CANCELLED"
            self._metrics.requests_total.labels(method=self._method, code=code).inc()
            return False
        if not isinstance(error, Exception):
            return False
        code, _ = grpc_status_for(error)
        self._metrics.requests_total.labels(method=self._method, code=code.name).inc()
        await abort_for(self._context, error)
        return False


def _name(code: Any) -> str:
    return code.name if isinstance(code, grpc.StatusCode) else "UNKNOWN"


def add_to_server(servicer: TextToSpeechServicer, server: grpc.aio.Server) -> None:
    """Register the servicer with request decoders that turn malformed requests into INVALID_ARGUMENT."""
    handlers: dict[str, grpc.RpcMethodHandler] = {
        "Synthesize": grpc.unary_stream_rpc_method_handler(
            servicer.Synthesize,
            request_deserializer=request_decoder(tts_pb2.SynthesizeRequest),
            response_serializer=tts_pb2.SynthesizeResponse.SerializeToString,
        ),
        "StreamingSynthesize": grpc.stream_stream_rpc_method_handler(
            servicer.StreamingSynthesize,
            request_deserializer=request_decoder(tts_pb2.StreamingSynthesizeRequest),
            response_serializer=tts_pb2.SynthesizeResponse.SerializeToString,
        ),
        "ListVoices": grpc.unary_unary_rpc_method_handler(
            servicer.ListVoices,
            request_deserializer=request_decoder(tts_pb2.ListVoicesRequest),
            response_serializer=tts_pb2.ListVoicesResponse.SerializeToString,
        ),
    }
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE_NAME, handlers),))
