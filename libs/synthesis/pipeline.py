"""One utterance through the mesh: sentences -> (cache | acoustic) -> vocoder -> the sentences' samples.

Two concurrent parts share the work, so audio flows as soon as it exists:
- the producer takes sentences in order, serves each from the cache or streams it from the acoustic
  worker, and forwards every chunk of mel slices into the vocoder stream the moment it has it; a
  finished sentence's mel is written to the cache;
- the reader takes the vocoder's samples in order. A sentence whose cached audio head this vocoder's
  model made starts with that head, before the vocoder has answered; a sentence without one gets its
  head written from the vocoder's first samples.
The producer runs ahead of the reader as far as the listener's buffer calls for (`Lookahead`: two
sentences always, up to `lookahead_sentences` while the audio ahead of the next is less than its way
to first audio takes, several times over, and never less than a floor),
so sentence k+1's acoustic work overlaps sentence k's vocoding, without synthesising the whole text
before the first audio.

Every buffer is bounded, so a client that stops reading stops the pipeline instead of filling the
gateway's memory: the reader hands at most `OUTPUT_PIECES` pieces ahead of the client; once they
wait, it stops reading the vocoder, whose gRPC flow control stops the vocoder, which stops reading
mel, which blocks the producer (and the lookahead holds it back anyway). The worker streams count
only the time the gateway spends waiting for a worker as that worker's silence.

Both worker streams are resumable (libs.upstream): a worker that dies, hangs or refuses is replaced
mid-utterance and the client hears no seam. A cache hit needs no acoustic worker at all: the model
version of the cache key comes from what the workers reported earlier.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from dataclasses import dataclass, replace
from typing import Any, Final

import grpc
import numpy as np

from libs.audio.slicing import DEFAULT_SLICE_MS
from libs.cache.codec import AudioHead, CachedMel
from libs.cache.head_collector import HeadCollector
from libs.cache.keys import cache_key
from libs.cache.mel_cache import MelCache
from libs.cache.single_flight import SingleFlight
from libs.pb.tts.acoustic.v1 import acoustic_pb2
from libs.pb.tts.common.v1 import mel_pb2
from libs.synthesis.admission import Listener
from libs.synthesis.cache_checks import head_problem, mel_problem
from libs.synthesis.in_flight import SentencesInFlight
from libs.synthesis.lookahead import AUDIO_AHEAD_S, LOOKAHEAD_COVER, MAX_SENTENCES_AHEAD, Lookahead
from libs.text.frontend import Sentence
from libs.text.words import WordSpan
from libs.upstream.acoustic_stream import ResumableAcousticStream, sentence_request
from libs.upstream.calls import Deadline
from libs.upstream.metrics import START_HOLD, START_TURN
from libs.upstream.playback import STARTED_PIECES, PlaybackClock
from libs.upstream.pool import WorkerPool
from libs.upstream.vocoder_stream import ResumableVocoderStream, Samples
from libs.voice.checks import rated_speed
from libs.voice.inputs import SynthesisInputs, SynthesisParams
from libs.wire.errors import DownstreamError, InvalidRequestError, NoWorkerError
from libs.wire.limits import MAX_PHONEME_IDS
from libs.wire.mel_slices import MelFormatError, cut_whole_mel, frames_of, to_message

_log = logging.getLogger(__name__)

DEFAULT_LOOKAHEAD_SENTENCES: Final = MAX_SENTENCES_AHEAD
OUTPUT_PIECES: Final = 4
"""Pieces the reader may have ready that the client has not taken yet (each is one vocoding step,
at most ~130 KiB, however many parts the worker sent it in); a client that reads keeps the queue
near empty."""
# The cache keeps float16 mel; asking the acoustic worker for float16 too means the vocoder gets the
# very same numbers on a miss and on a hit, so a cached sentence sounds bit-identical to a fresh one.
WIRE_MEL_DTYPE: Final = mel_pb2.MEL_DTYPE_FLOAT16
_DONE: Final = object()


@dataclass(frozen=True)
class SentenceMeta:
    """What a client is told about a sentence."""

    text: str
    """The sentence as spoken."""
    phonemes: str
    """Its IPA phonemes."""
    frame_count: int
    """Mel frames in the sentence."""
    phoneme_frames: tuple[int, ...]
    """Frames per phoneme id."""
    words: tuple[WordSpan, ...] = ()
    """Its written words with the phoneme ids that speak each."""
    pause_before_s: float = 0.0
    """Silence before its speech (SSML breaks), in seconds."""
    marks_before: tuple[tuple[str, float], ...] = ()
    """SSML marks in the silence before it: (name, seconds into that silence)."""
    pause_after_s: float = 0.0
    """Silence after its speech (SSML breaks), in seconds."""
    marks_after: tuple[tuple[str, float], ...] = ()
    """SSML marks after its speech: (name, seconds into the silence after it)."""
    tier: str = ""
    """The voice's tier it is spoken in ("": the stream's)."""


@dataclass(frozen=True)
class _Lookup:
    """What the producer found for a sentence before asking for its mel."""

    key: str
    """Its cache key."""
    head: AudioHead | None
    """The audio head the cache had for it in its tier (None: none)."""
    tier: str
    """The voice's tier it is spoken in."""


@dataclass(frozen=True)
class SentencePiece:
    """The next samples of the utterance: one sentence's, in order, at the voice's rate."""

    sentence_index: int
    """0-based sentence index."""
    samples: np.ndarray
    """float32 mono samples that follow the previous ones of the sentence."""
    sample_rate_hz: int
    """Rate of `samples`."""
    is_last: bool
    """Whether the sentence ends with these."""
    sentence: SentenceMeta
    """The sentence they belong to."""
    frame_duration_s: float
    """Seconds per mel frame."""
    made_s: float = 0.0
    """When the mesh had it ready for the client (`time.monotonic()`; 0: from the start)."""
    step_continues: bool = False
    """Whether the rest of its vocoder step follows at once (libs.upstream.vocoder_stream.Samples):
    such a part of a step takes no room of its own among `OUTPUT_PIECES`."""


class UtterancePipeline:
    """Synthesises one request's sentences and yields their samples in order."""

    def __init__(
        self,
        *,
        pool: WorkerPool,
        cache: MelCache,
        flights: SingleFlight[CachedMel],
        voice: str,
        params: SynthesisParams,
        utterance_id: str,
        timeout_s: float | None,
        slice_ms: float = DEFAULT_SLICE_MS,
        lookahead_sentences: int = DEFAULT_LOOKAHEAD_SENTENCES,
        listener: Listener | None = None,
        tier: str | Callable[[], str] = "",
        in_flight: SentencesInFlight | None = None,
        listened: bool = True,
    ) -> None:
        """`listener`, when given, is told the listener's clock once audio flows (for admission);
        `listened` False for work nobody listens to (prewarming, jobs), which starts only while no
        listener is starting (`StartSlots.take_unlistened`);
        `tier` ("": quality) is the voice's tier the vocoder speaks in (libs.voice.tiers), or what
        says it as each sentence starts (a stream may change tier between sentences, never inside one);
        `in_flight`, when given, counts the sentences taken and not yet made (for a streamed text's side)."""
        self._pool = pool
        self._cache = cache
        self._flights = flights
        self._voice = voice
        self._tier_now: Callable[[], str] = tier if callable(tier) else lambda: tier
        self._stream_tier = tier if isinstance(tier, str) else ""
        self._params = params
        self._utterance_id = utterance_id
        self._deadline = Deadline(timeout_s)
        self._slice_ms = slice_ms
        self._max_sentences_ahead = lookahead_sentences
        self._lookahead: Lookahead | None = None
        self._meta: dict[int, SentenceMeta] = {}
        # Per sentence, once the producer has looked it up: its cache key, the audio head the cache had
        # for it (None when it had none) and its tier. Resolved with None for sentences that never come.
        self._lookups: dict[int, asyncio.Future[_Lookup | None]] = {}
        self._sentence_count: int | None = None
        self._listener = listener
        self._in_flight = in_flight
        self._sentence_ids: dict[int, int] = {}
        self._background: set[asyncio.Task[Any]] = set()
        self._room = asyncio.Semaphore(OUTPUT_PIECES)
        """Pieces that may still be queued for the client; `run` gives one back when the client takes one."""
        self._starting = False
        """Whether this stream holds one of the gateway's turns to start (`StartSlots`)."""
        self._start_last = 0
        """The last sentence its start covers: 1 when the first is an opening whose rest is a part of
        the same sentence (the rest's plan is the start's work too)."""
        self._first_piece = asyncio.Event()
        """Set once the first piece of audio has come from the vocoder."""
        self._listened = listened

    async def run(self, sentences: AsyncIterator[Sentence]) -> AsyncIterator[SentencePiece]:
        """The samples of `sentences`, as soon as each piece exists."""
        self._pool.budget.record_request()
        info = await self._pool.voice_model_info(self._voice)
        if info is None:
            raise NoWorkerError(f"no acoustic worker serving voice {self._voice} has reported its model yet; retry shortly")
        # The listener's buffer, as the client is given audio: every worker request carries its slack.
        clock = PlaybackClock(
            info.hop_length / info.sample_rate_hz, on_stall=self._listener.stalled if self._listener else None, listened=self._listened
        )
        if self._listener is not None:
            self._listener.clock = clock
        self._lookahead = Lookahead(clock, self._max_sentences_ahead, audio_ahead_s=self._audio_ahead_s)
        acoustic = ResumableAcousticStream(self._pool, self._deadline, clock, voice=self._voice)
        vocoder = ResumableVocoderStream(
            self._pool, self._deadline, info.hop_length, clock, voice=self._voice, speaker_id=self._params.speaker_id,
            tier=self._stream_tier,
        )  # fmt: skip
        # Pieces are bounded by `_room`; an error or the end always gets in, however full it is.
        output: asyncio.Queue[Any] = asyncio.Queue()
        producer = asyncio.create_task(self._guard(self._produce(sentences, info, acoustic, vocoder), output))
        reader = asyncio.create_task(self._guard(self._read(vocoder, info, output), output))
        try:
            async for item in self._starting_together(output):
                if item is _DONE:
                    break
                if isinstance(item, BaseException):
                    raise item
                clock.delivered(_audio_s(item), ready_s=item.made_s)
                yield item
                if not item.step_continues:
                    self._room.release()  # the client has taken the piece
        finally:
            # Client gone, failed, or finished: cancel downstream streams so workers stop at once.
            acoustic.cancel()
            vocoder.cancel()
            await _finished(self._wind_down(producer, reader, sentences))

    async def _wind_down(self, producer: asyncio.Task[None], reader: asyncio.Task[None], sentences: AsyncIterator[Sentence]) -> None:
        """The utterance's tasks ended, its turn to start given back, and a text still arriving (a
        client's stream of pieces) read no further."""
        await _cancelled(producer, reader)
        self._started()
        close = getattr(sentences, "aclose", None)
        if close is not None:
            await close()

    async def _starting_together(self, output: asyncio.Queue[Any]) -> AsyncIterator[Any]:
        """What `output` carries, in order, with the listener's first pieces held back while the audio
        they hold would run out before the next piece could add to it: a player starts at its first
        audio, and a first piece shorter than the wait for the next is a gap heard a moment later. The
        wait is the longer of the vocoder's step lead now (hops included; for a listener alone on
        the workers, the lead of the part of a step it waits on) and how long second pieces have come
        after first ones lately (`StartGaps`: queueing behind other streams included). The
        pieces are held only for the difference, so that the audio they hold lasts until the next
        piece is due, or until it comes. Where steps are quick (an idle or fast machine) the first
        piece goes at once; where they are slow or queued (a small CPU quota, a burst) the listener
        starts that much later and plays on without a gap. A listener alone on a mesh slower than real
        time first holds the share of its audio the mesh cannot keep up with (its start buffer)."""
        loop = asyncio.get_running_loop()
        held = [await output.get()]
        came_s = loop.time()
        held_s = _audio_s(held[0])
        # A listener alone on a mesh slower than real time first holds what lets it play to the end.
        start_buffer_s = self._listener.start_buffer_s() if self._listener is not None else 0.0
        while held_s < start_buffer_s and isinstance(held[-1], SentencePiece):
            held.append(await output.get())
            held_s += _audio_s(held[-1])
        first_s = loop.time()
        cushion_s = self._pool.piece_wait_s(alone=self._alone())
        getter: asyncio.Task[Any] | None = None
        while (
            held_s < cushion_s
            and isinstance(held[-1], SentencePiece)
            and (wait_s := first_s + cushion_s - held_s - loop.time()) > 0
        ):
            getter = getter or asyncio.ensure_future(output.get())
            done, _ = await asyncio.wait({getter}, timeout=wait_s)
            if not done:
                break
            held.append(getter.result())
            getter = None
            held_s += _audio_s(held[-1])
        if getter is not None:
            if getter.cancel():  # still waiting: the piece it would have taken stays in the queue
                await asyncio.gather(getter, return_exceptions=True)
            if not getter.cancelled():
                held.append(getter.result())
        self._pool.metrics.start_delay_seconds.labels(part=START_HOLD).observe(loop.time() - came_s)
        for item in held:
            yield item
        while True:
            yield await output.get()

    def _alone(self) -> bool:
        """Whether the listener is alone on the workers now (no other stream of any gateway's)."""
        return self._listener is not None and self._listener.alone()

    def _audio_ahead_s(self, sentence_index: int) -> float:
        """How much audio the listener should hold before sentence `sentence_index` starts: the floor,
        or enough to cover that sentence's way to its first audio LOOKAHEAD_COVER times over, as the
        mesh runs now."""
        ids = self._sentence_ids.get(sentence_index, 0)
        first_audio_s = self._pool.first_audio_s(ids) if ids else 0.0
        return max(AUDIO_AHEAD_S, LOOKAHEAD_COVER * first_audio_s)

    async def _guard(self, work: Coroutine[Any, Any, None], output: asyncio.Queue[Any]) -> None:
        try:
            await work
        except asyncio.CancelledError:
            raise
        except BaseException as error:
            output.put_nowait(error)

    async def _produce(
        self,
        sentences: AsyncIterator[Sentence],
        info: acoustic_pb2.ModelInfo,
        acoustic: ResumableAcousticStream,
        vocoder: ResumableVocoderStream,
    ) -> None:
        index = 0
        async for sentence in sentences:
            assert self._lookahead is not None
            if self._in_flight is not None:
                self._in_flight.taken()
            self._sentence_ids[index] = len(sentence.phoneme_ids)
            if index == 0 and sentence.spoken_ids is not None and sentence.spoken_ids[0] == 0:
                self._start_last = 1  # an opening: the rest of its sentence comes next
            elif index == self._start_last == 1:
                # The rest's plan is of the whole sentence: asked for after the first audio, not beside it.
                await self._first_piece.wait()
            await self._lookahead.wait_turn(index)  # moved on by the reader as sentences are fully vocoded
            tier = self._tier_now()  # a sentence keeps the tier it starts in
            async for slices in self._sentence_slices(index, sentence, info, acoustic, tier):
                await vocoder.send(slices, tier)
            index += 1
        self._sentence_count = index
        if self._listener is not None:
            self._listener.all_planned()
        for later, lookup in self._lookups.items():
            if later >= index and not lookup.done():
                lookup.set_result(None)  # the reader may be waiting for a sentence that never comes
        await vocoder.finish()
        await acoustic.close()
        # Let pending cache writes finish; they are short and fail open.
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)

    async def _sentence_slices(
        self, index: int, sentence: Sentence, info: acoustic_pb2.ModelInfo, acoustic: ResumableAcousticStream, tier: str
    ) -> AsyncIterator[list[mel_pb2.MelSlice]]:
        """The sentence's mel slices, a chunk at a time (a cached sentence is one chunk); its audio
        head is looked up in `tier`, the one it is spoken in."""
        if len(sentence.phoneme_ids) > MAX_PHONEME_IDS:
            raise InvalidRequestError(
                f"sentence {index + 1} has {len(sentence.phoneme_ids)} phoneme ids; one sentence may have at most "
                f"{MAX_PHONEME_IDS}: put sentence breaks into the text"
            )
        params = self._params if sentence.rate == 1.0 else replace(self._params, speed=rated_speed(self._params.speed, sentence.rate))
        inputs = SynthesisInputs(info.model_version, self._voice, sentence.phoneme_ids, params, sentence.spoken_ids)
        key = cache_key(inputs)
        phonemes = "".join(sentence.phonemes)
        cached = await self._cache.get(key, tier)
        if cached is None and self._flights.in_flight(key):
            cached = await self._flights.wait(key)  # another request is synthesising this sentence now
        if cached is not None:
            cached = await self._usable(key, cached, sentence.spoken_id_count, info, tier)
        if cached is not None:
            self._meta[index] = SentenceMeta(
                sentence.text, phonemes, cached.frame_count, cached.phoneme_frames, sentence.words,
                sentence.pause_before_s, sentence.marks_before, sentence.pause_after_s, sentence.marks_after, tier,
            )  # fmt: skip
            self._planned(sentence, cached.frame_count, info)
            self._lookup(index).set_result(_Lookup(key, cached.head, tier))
            yield [
                to_message(
                    cut,
                    utterance_id=self._utterance_id,
                    sentence_index=index,
                    sentence_frame_count=cached.frame_count,
                    dtype=WIRE_MEL_DTYPE,
                )
                for cut in cut_whole_mel(cached.mel, info.hop_length, info.sample_rate_hz, self._slice_ms)
            ]
            return
        self._lookup(index).set_result(_Lookup(key, None, tier))
        if index == 0:  # the workers make the listener's first seconds: in its turn (StartSlots)
            asked_s = time.monotonic()
            if self._listened:
                await self._pool.starts.take()
                self._starting = True
                self._pool.metrics.start_delay_seconds.labels(part=START_TURN).observe(time.monotonic() - asked_s)
            else:  # no listener waited: nothing for the start delay's histogram
                await self._pool.starts.take_unlistened()
        async with self._flights.lead(key) as flight:
            frames: list[np.ndarray] = []
            alignment: tuple[int, ...] = ()
            request = sentence_request(
                inputs, utterance_id=self._utterance_id, sentence_index=index, slice_ms=self._slice_ms, dtype=WIRE_MEL_DTYPE
            )
            async for slices in acoustic.sentence(request):
                if not frames:
                    first = slices[0]
                    alignment = tuple(first.alignment.phoneme_frames)
                    self._meta[index] = SentenceMeta(
                        sentence.text, phonemes, first.sentence_frame_count, alignment, sentence.words,
                        sentence.pause_before_s, sentence.marks_before, sentence.pause_after_s, sentence.marks_after, tier,
                    )  # fmt: skip
                    self._planned(sentence, first.sentence_frame_count, info)
                try:
                    frames.extend(frames_of(mel_slice) for mel_slice in slices)
                except MelFormatError as error:  # the worker's fault, not the client's
                    raise DownstreamError(grpc.StatusCode.INTERNAL, f"acoustic worker sent a malformed slice: {error}") from None
                yield slices
            mel = np.concatenate(frames, axis=1)
            flight.publish(CachedMel(mel=mel, phoneme_frames=alignment))
            flight.hold_until(self._spawn(self._cache.put(key, mel, alignment)))

    def _planned(self, sentence: Sentence, frame_count: int, info: acoustic_pb2.ModelInfo) -> None:
        """`sentence` will make `frame_count` frames: its listener's admission sees that audio, not a guess."""
        if self._listener is not None:
            self._listener.sentence_planned(len(sentence.text), frame_count * info.hop_length / info.sample_rate_hz)

    async def _usable(self, key: str, cached: CachedMel, phoneme_count: int, info: acoustic_pb2.ModelInfo, tier: str) -> CachedMel | None:
        """`cached` if this voice's models can use it (its head, of `tier`, dropped when only that is unusable);
        None, with the entry deleted, when its mel is not this sentence's for this model."""
        problem = mel_problem(cached, n_mels=info.n_mels, phoneme_count=phoneme_count)
        if problem is not None:
            _log.warning("deleting cache entry %s and synthesising it again: %s", key, problem)
            await self._cache.delete(key)
            return None
        head = cached.head
        if head is None:
            return cached
        problem = head_problem(
            head, sample_rate_hz=info.sample_rate_hz, head_ms=self._cache.head_ms, frame_count=cached.frame_count,
            hop_length=info.hop_length,
        )  # fmt: skip
        if problem is None:
            return cached
        _log.warning("deleting the audio head of cache entry %s: %s", key, problem)
        await self._cache.delete(key, head_only=True, tier=tier)
        return replace(cached, head=None)

    def _lookup(self, index: int) -> asyncio.Future[_Lookup | None]:
        lookup = self._lookups.get(index)
        if lookup is None:
            lookup = self._lookups[index] = asyncio.get_running_loop().create_future()
            if self._sentence_count is not None and index >= self._sentence_count:
                lookup.set_result(None)
        return lookup

    async def _pieces(self, vocoder: ResumableVocoderStream) -> AsyncIterator[tuple[Samples, _Lookup | None]]:
        """The vocoder's samples in order, each sentence led by its cached audio head when there is one
        that this vocoder model made; with each piece, the sentence's lookup when its head should be
        written (None when the head came from the cache, or heads are off)."""
        await vocoder.ready()  # open the call while the first sentence is looked up
        pieces = aiter(vocoder.samples())
        sentence = 0
        while True:
            # The vocoder cannot answer for this sentence before it has been looked up.
            lookup = await self._lookup(sentence)
            if lookup is None:  # no more sentences: read on to the call's end (a stray answer fails there)
                async for piece in pieces:
                    yield piece, None
                return
            head = lookup.head
            served = head is not None and head.model_version == vocoder.model_version_of(lookup.tier) and len(head.samples) > 0
            if served:
                assert head is not None
                vocoder.delivered_elsewhere(sentence, len(head.samples))
                yield Samples(sentence, head.samples, head.sample_rate_hz, False, head.model_version), None
            # A sentence without a head of this vocoder's model gets one from what the vocoder makes now.
            to_write = lookup if not served and self._cache.head_ms > 0 else None
            while True:
                piece = await anext(pieces, None)
                if piece is None:
                    return
                yield piece, to_write
                if piece.is_last:
                    break
            sentence += 1

    async def _read(self, vocoder: ResumableVocoderStream, info: acoustic_pb2.ModelInfo, output: asyncio.Queue[Any]) -> None:
        collector: HeadCollector | None = None
        sentence = -1
        first_piece_s: float | None = None  # when the utterance's first piece came, while its start is timed
        after_first_s = 0.0  # the audio of the pieces since the first
        latest_s = 0.0  # how long after the first piece a later one came, at most, less the audio between
        alone = False  # whether the listener was alone on the workers at its first piece
        loop = asyncio.get_running_loop()
        pieces = 0  # vocoder steps: the parts of a step the worker sent one by one are one piece
        reading_s: float | None = None  # when the reader went on after a piece of the sentence it reads
        async for piece, to_write in self._pieces(vocoder):
            pieces += 0 if piece.step_continues else 1
            self._first_piece.set()
            if reading_s is not None and piece.sentence_index == sentence:  # a playing listener's wait for its next piece
                self._pool.piece_gaps.observe(loop.time() - reading_s)
            # Started: STARTED_PIECES pieces in, or the start's sentences all made; an opening's start lasts to its rest's first piece.
            if (pieces >= STARTED_PIECES and piece.sentence_index >= self._start_last) or (piece.is_last and piece.sentence_index == self._start_last):
                self._started()
            if first_piece_s is not None:  # read as it came, whatever the client does
                latest_s = max(latest_s, loop.time() - first_piece_s - after_first_s)
                after_first_s += len(piece.samples) / piece.sample_rate_hz
                if pieces == STARTED_PIECES or piece.is_last:
                    self._pool.start_gaps.observe(latest_s, alone)
                    first_piece_s = None
            elif sentence == -1 and not piece.is_last:
                first_piece_s = loop.time()
                alone = self._alone()
            if piece.sentence_index != sentence:  # a sentence's first piece
                sentence = piece.sentence_index
                collector = None
                if to_write is not None:
                    head_samples = round(self._cache.head_ms / 1000.0 * piece.sample_rate_hz)
                    collector = HeadCollector(head_samples, piece.sample_rate_hz, piece.model_version)
            if collector is not None and to_write is not None:
                head = collector.add(piece.samples, piece.sample_rate_hz, piece.model_version, piece.is_last)
                if head is not None:
                    self._spawn(self._cache.put_head(to_write.key, head, to_write.tier))
            if piece.is_last and self._lookahead is not None:
                self._lookahead.sentence_vocoded()
            if piece.is_last and self._in_flight is not None:
                self._in_flight.made()
            made_s = time.monotonic()
            if not piece.step_continues:
                await self._room.acquire()  # a client that does not read stops the reading here
            reading_s = None if piece.is_last or piece.step_continues else loop.time()
            output.put_nowait(
                SentencePiece(
                    piece.sentence_index,
                    piece.samples,
                    piece.sample_rate_hz,
                    piece.is_last,
                    self._meta[piece.sentence_index],
                    info.hop_length / piece.sample_rate_hz,
                    made_s,
                    piece.step_continues,
                )
            )
        # Every piece is made: a client that does not read holds no turn to start for it.
        self._started()
        output.put_nowait(_DONE)

    def _started(self) -> None:
        """The stream has started (or ended): its turn to start goes to the next."""
        if self._starting:
            self._starting = False
            self._pool.starts.give_back()

    def _spawn(self, coroutine: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        task = asyncio.create_task(coroutine)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task


CANCEL_AGAIN_S: Final = 0.05
"""How long a cancelled task may take to end before it is cancelled again."""


def _audio_s(item: Any) -> float:
    """The audio a queued item carries (0 for the end or an error)."""
    return len(item.samples) / item.sample_rate_hz if isinstance(item, SentencePiece) else 0.0


async def _cancelled(*tasks: asyncio.Task[Any]) -> None:
    """Cancel `tasks` and wait until they have ended, cancelling again any that go on.

    A cancellation can be lost on its way through code that waits (one that lands as the awaited
    thing completes is dropped by some waits, in asyncio on Python 3.11 and in libraries); a task
    that lost it would wait on forever, and with it the client's stream, its place in the limits
    and its worker streams. So a task still running after a moment is cancelled again.
    """
    pending = set(tasks)
    while pending := {task for task in pending if not task.done()}:
        for task in pending:
            task.cancel()
        await asyncio.wait(pending, timeout=CANCEL_AGAIN_S)


async def _finished(awaitable: Awaitable[Any]) -> None:
    """`awaitable` run to its end in a task of its own even while this task is cancelled, then the
    cancellation passed on.

    A door that cancels by scope (Starlette's streamed responses, through anyio) cancels the waiting
    task again on every turn of the loop until it is out. Cleanup that waits in that task is cut short
    every time, and a wait is cancelled before it can see what it waits for end (its wake-up comes
    behind the next cancellation), so whether the task has ended is read from the task itself."""
    task = asyncio.ensure_future(awaitable)
    interrupted = False
    while not task.done():
        try:
            await asyncio.wait({task})
        except asyncio.CancelledError:
            interrupted = True
    if interrupted:
        raise asyncio.CancelledError()
    task.result()
