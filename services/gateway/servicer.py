"""The public TextToSpeech servicer: validate, phonemise, run the utterance pipeline, map errors."""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time
from concurrent.futures import Executor
from typing import Any, AsyncIterator

import grpc

from libs.mesh.errors import InvalidRequestError, abort_for, grpc_status_for
from libs.mesh.mel_cache import MelCache
from libs.mesh.mel_codec import CachedMel
from libs.mesh.request_decoding import UndecodableRequest, request_decoder
from libs.mesh.single_flight import SingleFlight
from libs.mesh.validation import SynthesisOptions, check_text, resolve_options
from libs.pb.tts.v1 import tts_pb2
from libs.text.errors import EmptyTextError
from libs.telemetry import tracing
from libs.telemetry.metrics import GatewayMetrics
from libs.text.frontend import NO_WORDS, TextFrontend
from libs.text.sentences import IncrementalSentenceSplitter
from libs.voice.registry import Voice, VoiceRegistry
from services.gateway.pipeline import UtterancePipeline
from services.gateway.workers import WorkerPool

_log = logging.getLogger(__name__)

SERVICE_NAME = tts_pb2.DESCRIPTOR.services_by_name["TextToSpeech"].full_name


class TextToSpeechServicer:
    """Synthesize, StreamingSynthesize and ListVoices over the worker pool and the mel cache."""

    def __init__(
        self,
        *,
        registry: VoiceRegistry,
        pool: WorkerPool,
        cache: MelCache,
        metrics: GatewayMetrics,
        text_executor: Executor,
        max_text_chars: int,
    ) -> None:
        self._registry = registry
        self._pool = pool
        self._cache = cache
        self._metrics = metrics
        self._text_executor = text_executor
        self._max_text_chars = max_text_chars
        self._flights: SingleFlight[CachedMel] = SingleFlight()
        self._frontends: dict[str, Any] = {}

    def frontend(self, voice: Voice) -> Any:
        """The text frontend of `voice` (built once; call from the text executor: espeak-ng is not thread-safe)."""
        frontend = self._frontends.get(voice.name)
        if frontend is None:
            frontend = TextFrontend(
                voice.phoneme_id_map(), espeak_voice=voice.espeak_voice, max_text_chars=self._max_text_chars
            )
            self._frontends[voice.name] = frontend
        return frontend

    def _options(self, message: tts_pb2.SynthesizeRequest | tts_pb2.StreamingSynthesizeConfig) -> SynthesisOptions:
        """Validated synthesis options from the fields a SynthesizeRequest and a streaming config share."""
        return resolve_options(
            self._registry,
            voice=message.voice,
            speed=message.speed,
            encoding=message.encoding,
            sample_rate_hz=message.sample_rate_hz,
            speaker_id=message.speaker_id,
            request_id=message.request_id,
            include_alignment=message.include_alignment,
        )

    async def Synthesize(
        self, request: tts_pb2.SynthesizeRequest | UndecodableRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[tts_pb2.SynthesizeResponse]:
        async with self._call("Synthesize", context) as call:
            if isinstance(request, UndecodableRequest):
                raise InvalidRequestError(request.reason)
            options = self._options(request)
            text = check_text(request.text, self._max_text_chars)
            call.voice(options.voice.name)
            # Bad text fails here, at once; the first chunk is phonemised in the same trip to the text thread.
            first, later = await self._in_text_thread(self._first_sentences_and_later_chunks, options.voice, text)
            async for response in self._pipeline(options, context).run(self._chunk_sentences(options.voice, first, later)):
                call.sent(response)
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
            first = _checked(first)
            if first.WhichOneof("request") != "config":
                raise InvalidRequestError("the first StreamingSynthesizeRequest must carry `config`")
            config = first.config
            options = self._options(config)
            call.voice(options.voice.name)
            sentences = self._incremental_sentences(request_iterator, options.voice)
            async for response in self._pipeline(options, context).run(sentences):
                call.sent(response)
                yield response

    async def ListVoices(
        self, request: tts_pb2.ListVoicesRequest | UndecodableRequest, context: grpc.aio.ServicerContext
    ) -> tts_pb2.ListVoicesResponse:
        async with self._call("ListVoices", context):
            request = _checked(request)
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
                    )
                    for voice in self._registry.voices()
                    if voice.language_code.lower().startswith(prefix)
                ]
            )

    def _pipeline(self, options: SynthesisOptions, context: grpc.aio.ServicerContext) -> UtterancePipeline:
        return UtterancePipeline(
            pool=self._pool,
            cache=self._cache,
            flights=self._flights,
            options=options,
            utterance_id=options.request_id,
            timeout_s=context.time_remaining(),  # the client's deadline bounds every downstream call
        )

    def _chunks(self, voice: Voice, text: str) -> list[str]:
        """`text` normalised, checked and cut into sentence chunks (call on the text executor)."""
        with tracing.step_span(tracing.SPAN_NORMALISE, {"tts.text_chars": len(text)}):
            return self.frontend(voice).chunks(text)

    def _first_sentences_and_later_chunks(self, voice: Voice, text: str) -> tuple[list[Any], list[str]]:
        """`_chunks`, the first one already phonemised: (its sentences, the other chunks) (call on
        the text executor)."""
        first, *later = self._chunks(voice, text)
        return self._phonemise(voice, first), later

    def _phonemise(self, voice: Voice, chunk: str) -> list[Any]:
        """The sentences of one chunk (call on the text executor)."""
        with tracing.step_span(tracing.SPAN_PHONEMISE, {tracing.ATTR_VOICE: voice.name}) as span:
            sentences = self.frontend(voice).chunk_sentences(chunk)
            span.set_attribute("tts.sentences", len(sentences))
        return sentences

    async def _in_text_thread(self, function: Any, *args: Any) -> Any:
        # Run in a copy of this request's context, so the spans join its trace.
        context = contextvars.copy_context()
        return await asyncio.get_running_loop().run_in_executor(self._text_executor, context.run, function, *args)

    async def _chunk_sentences(self, voice: Voice, first: list[Any], later: list[str]) -> AsyncIterator[Any]:
        """The first chunk's sentences, then those of each `later` chunk, phonemised when the
        pipeline asks for them: first audio does not wait for espeak-ng to get through a long text."""
        spoken = 0
        for sentence in first:
            spoken += 1
            yield sentence
        for chunk in later:
            for sentence in await self._in_text_thread(self._phonemise, voice, chunk):
                spoken += 1
                yield sentence
        if not spoken:
            raise EmptyTextError(NO_WORDS)

    async def _incremental_sentences(
        self, request_iterator: AsyncIterator[Any], voice: Voice
    ) -> AsyncIterator[Any]:
        """Sentences of streamed text, each as soon as it is complete; the rest at half-close."""
        splitter = IncrementalSentenceSplitter()
        async for request in request_iterator:
            request = _checked(request)
            if request.WhichOneof("request") != "text":
                raise InvalidRequestError("only the first StreamingSynthesizeRequest may carry `config`")
            if len(request.text) > self._max_text_chars:
                raise InvalidRequestError(
                    f"a text piece is {len(request.text)} characters long; the limit is {self._max_text_chars} per piece"
                )
            for chunk in splitter.feed(request.text):
                for sentence in await self._phonemise_chunk(voice, chunk):
                    yield sentence
        for chunk in splitter.flush():
            for sentence in await self._phonemise_chunk(voice, chunk):
                yield sentence

    async def _phonemise_chunk(self, voice: Voice, chunk: str) -> list[Any]:
        """A streamed chunk's sentences; a chunk with nothing to say (spaces, punctuation) has none."""
        try:
            chunks = await self._in_text_thread(self._chunks, voice, chunk)
        except EmptyTextError:
            return []
        return [sentence for part in chunks for sentence in await self._in_text_thread(self._phonemise, voice, part)]

    def _call(self, method: str, context: grpc.aio.ServicerContext) -> "_CallScope":
        return _CallScope(self._metrics, method, context)


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

    async def __aenter__(self) -> "_CallScope":
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
        if error is None:
            self._metrics.requests_total.labels(method=self._method, code="OK").inc()
            if self._last_audio_s is not None:
                self._metrics.synthesis_seconds.labels(method=self._method).observe(self._last_audio_s - self._started_s)
            return False
        if isinstance(error, (asyncio.CancelledError, grpc.aio.AbortError)):
            code = "CANCELLED" if isinstance(error, asyncio.CancelledError) else _name(self._context.code())
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


def _checked(request: Any) -> Any:
    if isinstance(request, UndecodableRequest):
        raise InvalidRequestError(request.reason)
    return request


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
