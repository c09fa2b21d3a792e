"""One client utterance through the mesh: sentences -> (cache | acoustic) -> vocoder -> client audio.

Three concurrent parts share the work, so audio flows as soon as it exists:
- the producer takes sentences in order, serves each from the cache or streams it from the acoustic
  worker, and forwards every mel slice into the vocoder stream the moment it has it; a finished
  sentence's mel is written to the cache;
- the reader turns vocoder output into client responses (resampled, encoded, placed on the timeline);
- `run` hands those responses to the client and tears everything down when the client goes away.
The producer may run `lookahead_sentences` ahead of the vocoder, so sentence k+1's acoustic work
overlaps sentence k's vocoding, without synthesising the whole text before the first audio.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any, AsyncIterator, Final

import grpc
import numpy as np

from libs.audio.slicing import DEFAULT_SLICE_MS
from libs.mesh.errors import DownstreamError
from libs.mesh.mel_cache import MelCache
from libs.mesh.mel_codec import CachedMel, cache_key
from libs.mesh.mel_slices import cut_whole_mel, frames_of, to_message
from libs.mesh.pcm import SentenceResampler, encode_samples
from libs.mesh.single_flight import SingleFlight
from libs.mesh.validation import SynthesisOptions
from libs.pb.tts.acoustic.v1 import acoustic_pb2
from libs.pb.tts.common.v1 import mel_pb2
from libs.pb.tts.v1 import tts_pb2
from libs.pb.tts.vocoder.v1 import vocoder_pb2
from services.gateway.workers import WorkerPool

_log = logging.getLogger(__name__)

DEFAULT_LOOKAHEAD_SENTENCES: Final = 2
_DONE: Final = object()


@dataclass(frozen=True)
class SentenceMeta:
    """What the reader needs to describe a sentence to the client."""

    text: str
    """The sentence as spoken."""
    phonemes: str
    """Its IPA phonemes."""
    frame_count: int
    """Mel frames in the sentence."""
    phoneme_frames: tuple[int, ...]
    """Frames per phoneme id."""


class UtterancePipeline:
    """Synthesises one request's sentences and yields SynthesizeResponses in order."""

    def __init__(
        self,
        *,
        pool: WorkerPool,
        cache: MelCache,
        flights: SingleFlight[CachedMel],
        options: SynthesisOptions,
        utterance_id: str,
        timeout_s: float | None,
        slice_ms: float = DEFAULT_SLICE_MS,
        lookahead_sentences: int = DEFAULT_LOOKAHEAD_SENTENCES,
    ) -> None:
        self._pool = pool
        self._cache = cache
        self._flights = flights
        self._options = options
        self._utterance_id = utterance_id
        self._deadline = None if timeout_s is None else time.monotonic() + timeout_s
        self._slice_ms = slice_ms
        self._lookahead = asyncio.Semaphore(lookahead_sentences)
        self._meta: dict[int, SentenceMeta] = {}
        self._acoustic_call: Any = None
        self._acoustic_endpoint: Any = None
        self._background: set[asyncio.Task[Any]] = set()

    async def run(self, sentences: AsyncIterator[Any]) -> AsyncIterator[tts_pb2.SynthesizeResponse]:
        """Responses for `sentences` (objects with text, phonemes, phoneme_ids), as soon as each exists."""
        vocoder_endpoint = self._pool.choose("vocoder")
        vocoder_call = self._pool.vocoder_stub(vocoder_endpoint).Vocode(timeout=self._remaining_s())
        output: asyncio.Queue[Any] = asyncio.Queue()
        producer = asyncio.create_task(self._guard(self._produce(sentences, vocoder_call), output))
        reader = asyncio.create_task(self._guard(self._read(vocoder_call, output), output))
        try:
            while (item := await output.get()) is not _DONE:
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            # Client gone, failed, or finished: cancel downstream streams so workers stop at once.
            for task in (producer, reader):
                task.cancel()
            vocoder_call.cancel()
            if self._acoustic_call is not None:
                self._acoustic_call.cancel()
            await asyncio.gather(producer, reader, return_exceptions=True)

    async def _guard(self, work: Any, output: asyncio.Queue[Any]) -> None:
        try:
            await work
        except asyncio.CancelledError:
            raise
        except grpc.aio.AioRpcError as error:
            output.put_nowait(DownstreamError(error.code(), f"worker call failed: {error.details()}"))
        except BaseException as error:
            output.put_nowait(error)

    async def _produce(self, sentences: AsyncIterator[Any], vocoder_call: Any) -> None:
        index = 0
        async for sentence in sentences:
            await self._lookahead.acquire()  # released by the reader when the sentence is fully vocoded
            async for mel_slice in self._sentence_slices(index, sentence):
                await vocoder_call.write(vocoder_pb2.VocodeRequest(slice=mel_slice))
            index += 1
        await vocoder_call.done_writing()
        if self._acoustic_call is not None:
            await self._acoustic_call.done_writing()
        # Let pending cache writes finish; they are short and fail open.
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)

    async def _sentence_slices(self, index: int, sentence: Any) -> AsyncIterator[mel_pb2.MelSlice]:
        options = self._options
        if self._acoustic_endpoint is None:
            self._acoustic_endpoint = self._pool.choose("acoustic")
        info = self._pool.model_info(self._acoustic_endpoint)
        key = cache_key(
            model_version=info.model_version,
            voice=options.voice.name,
            speaker_id=options.speaker_id,
            speed=options.speed,
            noise_scale=options.voice.noise_scale,
            noise_w=options.voice.noise_w,
            phoneme_ids=sentence.phoneme_ids,
        )
        cached = await self._cache.get(key)
        if cached is None and self._flights.in_flight(key):
            cached = await self._flights.wait(key)  # another request is synthesising this sentence now
        if cached is not None:
            self._meta[index] = SentenceMeta(sentence.text, "".join(sentence.phonemes), cached.frame_count, cached.phoneme_frames)
            for cut in cut_whole_mel(cached.mel, info.hop_length, info.sample_rate_hz, self._slice_ms):
                yield to_message(
                    cut, utterance_id=self._utterance_id, sentence_index=index, sentence_frame_count=cached.frame_count
                )
            return
        async with self._flights.lead(key) as flight:
            frames: list[np.ndarray] = []
            alignment: tuple[int, ...] = ()
            async for mel_slice in self._acoustic_slices(index, sentence, info):
                if not frames:
                    alignment = tuple(mel_slice.alignment.phoneme_frames)
                    self._meta[index] = SentenceMeta(
                        sentence.text, "".join(sentence.phonemes), mel_slice.sentence_frame_count, alignment
                    )
                frames.append(frames_of(mel_slice))
                yield mel_slice
            mel = np.concatenate(frames, axis=1)
            flight.publish(CachedMel(mel=mel, phoneme_frames=alignment))
            self._spawn(self._cache.put(key, mel, alignment))

    async def _acoustic_slices(
        self, index: int, sentence: Any, info: acoustic_pb2.ModelInfo
    ) -> AsyncIterator[mel_pb2.MelSlice]:
        if self._acoustic_call is None:
            stub = self._pool.acoustic_stub(self._acoustic_endpoint)
            self._acoustic_call = stub.SynthesizeMel(timeout=self._remaining_s())
        options = self._options
        await self._acoustic_call.write(
            acoustic_pb2.SentenceRequest(
                utterance_id=self._utterance_id,
                sentence_index=index,
                phoneme_ids=list(sentence.phoneme_ids),
                voice=options.voice.name,
                speaker_id=options.speaker_id,
                speed=options.speed,
                noise_scale=options.voice.noise_scale,
                noise_w=options.voice.noise_w,
                expected_model_version=info.model_version,
                slice_ms=self._slice_ms,
            )
        )
        while True:
            mel_slice = await self._acoustic_call.read()
            if mel_slice is grpc.aio.EOF:
                raise DownstreamError(grpc.StatusCode.UNAVAILABLE, f"acoustic stream ended inside sentence {index}")
            yield mel_slice
            if mel_slice.is_last:
                return

    async def _read(self, vocoder_call: Any, output: asyncio.Queue[Any]) -> None:
        options = self._options
        output_samples = 0  # samples sent to the client so far, at the output rate
        resampler: SentenceResampler | None = None
        next_sample = 0  # next expected sample index within the current sentence (vocoder rate)
        described = -1
        async for reply in vocoder_call:
            meta = self._meta[reply.sentence_index]
            if resampler is None:
                resampler = SentenceResampler(reply.sample_rate_hz, options.sample_rate_hz)
                next_sample = 0
            samples = np.frombuffer(reply.samples, dtype="<f4")
            # Drop samples the client already has (a resumed stream may repeat some); a gap is a bug.
            if reply.first_sample > next_sample:
                raise DownstreamError(
                    grpc.StatusCode.INTERNAL,
                    f"vocoder skipped samples {next_sample}..{reply.first_sample} of sentence {reply.sentence_index}",
                )
            samples = samples[next_sample - reply.first_sample :]
            next_sample += len(samples)
            audio = resampler.push(samples, last=reply.is_last)
            if not len(audio) and not reply.is_last:
                continue
            response = tts_pb2.SynthesizeResponse(
                audio=encode_samples(audio, options.encoding),
                sample_rate_hz=options.sample_rate_hz,
                encoding=options.encoding,
                request_id=options.request_id,
                sentence_index=reply.sentence_index,
                audio_offset_s=output_samples / options.sample_rate_hz,
                audio_duration_s=len(audio) / options.sample_rate_hz,
                sentence_end=reply.is_last,
            )
            if described != reply.sentence_index:
                described = reply.sentence_index
                frame_s = self._pool.model_info(self._acoustic_endpoint).hop_length / reply.sample_rate_hz
                info = response.sentence
                info.index = reply.sentence_index
                info.text = meta.text
                info.phonemes = meta.phonemes
                info.audio_offset_s = output_samples / options.sample_rate_hz
                info.audio_duration_s = meta.frame_count * frame_s
                if options.include_alignment:
                    info.phoneme_frames.extend(meta.phoneme_frames)
                    info.frame_duration_s = frame_s
            output_samples += len(audio)
            output.put_nowait(response)
            if reply.is_last:
                resampler = None
                self._lookahead.release()
        output.put_nowait(_DONE)

    def _remaining_s(self) -> float | None:
        if self._deadline is None:
            return None
        return max(0.0, self._deadline - time.monotonic())

    def _spawn(self, coroutine: Any) -> None:
        task = asyncio.create_task(coroutine)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
