"""The mesh's synthesis API: text in, the client's audio out as soon as it exists.

Every front door calls this after parsing its request, and knows nothing of what happens next:
text -> sentences (libs.synthesis.text_side) -> cache or acoustic worker -> vocoder
(libs.synthesis.pipeline) -> resampled, encoded audio on the output timeline
(libs.synthesis.output). Nothing here knows gRPC's server side; errors are domain errors
(libs.wire.errors, libs.text.errors) that each door maps to its own status.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import AsyncGenerator, AsyncIterator

import grpc

from libs.cache.codec import CachedMel
from libs.cache.mel_cache import MelCache
from libs.cache.single_flight import SingleFlight
from libs.synthesis.options import SynthesisOptions
from libs.synthesis.output import AudioChunk, AudioOutput
from libs.synthesis.pipeline import UtterancePipeline
from libs.synthesis.resume import resumed_sentences
from libs.synthesis.text_side import TextSide
from libs.text.frontend import Sentence
from libs.text.ssml import looks_like_ssml
from libs.upstream.metrics import SHED_CLIENT_LIMIT, SHED_GATEWAY_FULL
from libs.upstream.pool import WorkerPool
from libs.voice.inputs import SynthesisParams
from libs.wire.errors import DownstreamError


class Synthesizer:
    """Speaks texts with the workers of `pool`, through the mel cache."""

    def __init__(
        self,
        *,
        pool: WorkerPool,
        cache: MelCache,
        text_side: TextSide,
        max_streams: int,
        max_streams_per_client: int = 0,
        max_client_share: float = 0.0,
    ) -> None:
        """At most `max_streams` streams at once, and of one named client (a caller that names none,
        "", has no limit of its own) at most `max_streams_per_client` (0: no limit) and at most
        `max_client_share` (0: no limit) of the streams the workers take at once."""
        self._pool = pool
        self._cache = cache
        self.text_side = text_side
        self._max_streams = max_streams
        self._max_streams_per_client = max_streams_per_client
        self._max_client_share = max_client_share
        self._open_streams = 0
        self._client_streams: dict[str, int] = {}  # only clients with a stream open: bounded by the streams
        self._flights: SingleFlight[CachedMel] = SingleFlight()

    async def synthesize(
        self, text: str, options: SynthesisOptions, timeout_s: float | None, client: str = ""
    ) -> AsyncGenerator[AudioChunk, None]:
        """The audio of `text`. Raises at once for text that cannot be spoken, or when the gateway or
        `client` (who the caller is, for its stream limit) has no room; the returned iterator yields
        chunks as they are produced."""
        slot = self._take_slot(client)  # before the text costs anything
        try:
            if options.ssml or looks_like_ssml(text):
                sentences = await self.text_side.ssml_sentences(options.voice, text, options.lexicon)
            else:
                sentences = await self.text_side.sentences(options.voice, text, options.lexicon)
        except BaseException:
            slot.release()
            raise
        return self._speak(sentences, options, timeout_s, slot)

    def synthesize_incremental(
        self, pieces: AsyncIterator[str], options: SynthesisOptions, timeout_s: float | None, client: str = ""
    ) -> AsyncGenerator[AudioChunk, None]:
        """The audio of text that arrives in `pieces` (joined as sent): each sentence is spoken as
        soon as it is complete, the rest when the pieces end. Raises at once when there is no room."""
        slot = self._take_slot(client)
        sentences = self.text_side.incremental_sentences(options.voice, pieces, options.lexicon)
        return self._speak(sentences, options, timeout_s, slot)

    def speak(
        self, sentences: AsyncIterator[Sentence], options: SynthesisOptions, timeout_s: float | None, client: str = ""
    ) -> AsyncGenerator[AudioChunk, None]:
        """The audio of sentences already phonemised (by `text_side`, or a caller that cut a long text itself)."""
        return self._speak(sentences, options, timeout_s, self._take_slot(client))

    async def _speak(
        self, sentences: AsyncIterator[Sentence], options: SynthesisOptions, timeout_s: float | None, slot: _Slot
    ) -> AsyncGenerator[AudioChunk, None]:
        voice = options.voice
        pipeline = UtterancePipeline(
            pool=self._pool,
            cache=self._cache,
            flights=self._flights,
            voice=voice.name,
            params=SynthesisParams(options.speaker_id, options.speed, voice.noise_scale, voice.noise_w),
            utterance_id=options.request_id,
            timeout_s=timeout_s,  # the client's deadline bounds every downstream call
        )
        output = AudioOutput(options.encoding, options.sample_rate_hz, options.include_alignment, options.resume)
        pieces = pipeline.run(resumed_sentences(sentences, options.resume) if options.resume else sentences)
        last: AudioChunk | None = None
        try:
            async for piece in pieces:
                chunk = output.push(piece)
                if chunk is not None:
                    last = chunk
                    yield chunk
            tail = output.finish()
            if tail and last is not None:
                yield AudioChunk(tail, last.sentence_index, last.audio_offset_s + last.audio_duration_s, 0.0, False, None)
        finally:
            # The client's place is free the moment its stream is over; then the pipeline is closed
            # here, not left to the garbage collector, and its end cancels the worker streams.
            slot.release()
            await pieces.aclose()  # type: ignore[attr-defined]

    def client_limit(self) -> int | None:
        """Streams one client may hold now: the per-client limit, or its share of what the workers
        take at once if that is fewer (at least one). None: no limit."""
        limits = [self._max_streams_per_client] if self._max_streams_per_client else []
        capacity = self._pool.stream_capacity() if self._max_client_share else None
        if capacity is not None:
            limits.append(max(1, math.floor(capacity * self._max_client_share)))
        return min(limits, default=None)

    def _take_slot(self, client: str) -> _Slot:
        """Count one stream of `client` until its slot is released (or dropped), or shed it with
        RESOURCE_EXHAUSTED when the gateway is full or the client holds its limit of streams."""
        if self._open_streams >= self._max_streams:
            self._pool.metrics.shed(SHED_GATEWAY_FULL)
            raise DownstreamError(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"the gateway is serving its limit of {self._max_streams} streams; retry with backoff",
            )
        limit = self.client_limit() if client else None
        held = self._client_streams.get(client, 0)
        if limit is not None and held >= limit:
            self._pool.metrics.shed(SHED_CLIENT_LIMIT)
            raise DownstreamError(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"this client already has {held} streams open here, its limit; finish or cancel one before starting another",
            )
        self._open_streams += 1
        self._client_streams[client] = held + 1
        return _Slot(self, client)

    def _give_back(self, client: str) -> None:
        self._open_streams -= 1
        left = self._client_streams.pop(client) - 1
        if left:
            self._client_streams[client] = left


class _Slot:
    """One stream's place in a synthesizer's counts, given back exactly once: by `release()` when
    the stream ends, or when the slot is dropped unused (a response the door never started to send
    still frees its place)."""

    def __init__(self, synthesizer: Synthesizer, client: str) -> None:
        self.release = weakref.finalize(self, synthesizer._give_back, client)
