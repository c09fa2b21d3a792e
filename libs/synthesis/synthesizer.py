"""The mesh's synthesis API: text in, the client's audio out as soon as it exists.

Every front door calls this after parsing its request, and knows nothing of what happens next:
text -> sentences (libs.synthesis.text_side) -> cache or acoustic worker -> vocoder
(libs.synthesis.pipeline) -> resampled, encoded audio on the output timeline
(libs.synthesis.output). Nothing here knows gRPC's server side; errors are domain errors
(libs.wire.errors, libs.text.errors) that each door maps to its own status.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable
from dataclasses import replace
from typing import Any, Final, TypeVar

import grpc

from libs.cache.codec import CachedMel
from libs.cache.mel_cache import MelCache
from libs.cache.single_flight import SingleFlight
from libs.scheduling.capacity import SharedCapacity
from libs.synthesis.admission import Listener, RealtimeAdmission
from libs.synthesis.in_flight import SentencesInFlight
from libs.synthesis.options import SynthesisOptions
from libs.synthesis.output import AudioChunk, AudioOutput
from libs.synthesis.pipeline import UtterancePipeline
from libs.synthesis.resume import resumed_sentences
from libs.synthesis.room import NoRoom, RoomQueue
from libs.synthesis.text_side import TextSide
from libs.text.frontend import Sentence
from libs.text.ssml import looks_like_ssml
from libs.upstream.metrics import SHED_CLIENT_LIMIT, SHED_GATEWAY_FULL, SHED_PREEMPTED, SHED_REALTIME, SHED_WORKERS_SATURATED
from libs.upstream.pool import WorkerPool
from libs.voice.inputs import SynthesisParams
from libs.voice.tiers import AUTO, FAST, QUALITY
from libs.wire.errors import DownstreamError

STREAMED_TEXT_AUDIO_S: Final = 10.0
"""The audio a stream whose text is still arriving is expected to need, until its text says more."""


PREEMPTED: Final = (
    "the mesh is full and this client holds more than an equal share of it, so this stream gave its place, "
    "before any of its audio, to a stream of a client within its share; retry when one of this client's streams ends"
)
"""Why a stream refused late (admission's `preemption`) ends."""

_T = TypeVar("_T")


OTHERS_SHARE: Final = 8
"""One client may hold all but 1/OTHERS_SHARE of the streams the workers take at once (where they take
at least that many): the rest stays for other clients."""


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
        admission: RealtimeAdmission | None = None,
        capacity: SharedCapacity | None = None,
        opening_max_ids: int = 0,
        auto_quality_share: float = 1.0,
        room_wait_s: float = 0.0,
    ) -> None:
        """At most `max_streams` streams at once, and of one named client (a caller that names none,
        "", has no limit of its own) at most `max_streams_per_client` (0: no limit); a listener only
        when `admission` (None: no such test) says every listener keeps playing. `capacity` counts
        the audio this gateway passes on, for the CPU ledger it shares with co-located workers. A first
        sentence of more than `opening_max_ids` phoneme ids (0: any) starts with its opening as a
        sentence of its own (`opening_ids`). Streams asking for the tier auto speak quality while the
        listeners fit in `auto_quality_share` of what admission takes, the fast tier past it (`_take_slot`).
        A stream refused for room (a whole text, or one streamed in pieces) waits up to `room_wait_s`
        for it (libs.synthesis.room; 0: refused at once)."""
        self._pool = pool
        self._cache = cache
        self.text_side = text_side
        self._max_streams = max_streams
        self._max_streams_per_client = max_streams_per_client
        self.admission = admission
        self._capacity = capacity
        self._opening_max_ids = opening_max_ids
        self._auto_quality_share = auto_quality_share
        self._open_streams = 0
        self._client_streams: dict[str, int] = {}  # only clients with a stream open: bounded by the streams
        self._movable: dict[int, tuple[Listener, _TierChoice]] = {}  # open streams that asked auto and speak quality
        self._flights: SingleFlight[CachedMel] = SingleFlight()
        self._room: RoomQueue[_Slot] = RoomQueue(room_wait_s, max_streams, on_waited=pool.metrics.waited_for_room)

    async def synthesize(
        self, text: str, options: SynthesisOptions, timeout_s: float | None, client: str = ""
    ) -> SpokenAudio:
        """The audio of `text`. Raises at once for text that cannot be spoken, or when the gateway or
        `client` (who the caller is, for its stream limit) has no room; the returned iterator yields
        chunks as they are produced."""
        expected_s = self.admission.expected_audio_s(len(text), options.voice.name) if self.admission is not None else 0.0
        slot = await self._admitted(client, expected_s, options, len(text), timeout_s)  # before the text costs anything
        try:
            opening = self.opening_ids()
            if options.resume is None and opening is not None and options.eager_opening != self._starts_alone():
                options = replace(options, eager_opening=not options.eager_opening)
            eager = options.eager_opening
            if options.ssml or looks_like_ssml(text):
                sentences = await self.text_side.ssml_sentences(options.voice, text, options.lexicon, opening, eager)
            else:
                sentences = await self.text_side.sentences(options.voice, text, options.lexicon, opening, eager)
        except BaseException:
            slot.release()
            raise
        return self._spoken(sentences, options, timeout_s, slot)

    async def synthesize_incremental(
        self, pieces: AsyncIterator[str], options: SynthesisOptions, timeout_s: float | None, client: str = ""
    ) -> SpokenAudio:
        """The audio of text that arrives in `pieces` (joined as sent): each sentence is spoken as
        soon as it is complete, the rest when the pieces end. Waits for room as a whole text does (its
        pieces wait unread meanwhile), and raises when none comes."""
        slot = await self._admitted(client, STREAMED_TEXT_AUDIO_S, options, 0, timeout_s)
        in_flight = SentencesInFlight()
        sentences = self.text_side.incremental_sentences(options.voice, _counted(pieces, slot), options.lexicon, self.opening_ids(), in_flight)
        return self._spoken(sentences, options, timeout_s, slot, in_flight)

    def speak(
        self,
        sentences: AsyncIterator[Sentence],
        options: SynthesisOptions,
        timeout_s: float | None,
        client: str = "",
        in_flight: SentencesInFlight | None = None,
        listened: bool = True,
    ) -> SpokenAudio:
        """The audio of sentences already phonemised (by `text_side`, or a caller that cut a long text
        itself); `in_flight` is told of the sentences taken and made (for `incremental_sentences`);
        `listened` False for work nobody listens to as it is made (prewarming, a job), which starts only
        while no listener is starting (`StartSlots.take_unlistened`)."""
        slot = self._take_slot(client, 0.0, options)
        return self._spoken(sentences, options, timeout_s, slot, in_flight, listened)

    def _spoken(
        self,
        sentences: AsyncIterator[Sentence],
        options: SynthesisOptions,
        timeout_s: float | None,
        slot: _Slot,
        in_flight: SentencesInFlight | None = None,
        listened: bool = True,
    ) -> SpokenAudio:
        spoken = replace(options, tier=slot.choice.tier) if options is not None and options.tier != slot.choice.tier else options
        return SpokenAudio(self._speak(sentences, spoken, timeout_s, slot, in_flight, listened), spoken, slot.choice)

    async def _speak(
        self,
        sentences: AsyncIterator[Sentence],
        options: SynthesisOptions,
        timeout_s: float | None,
        slot: _Slot,
        in_flight: SentencesInFlight | None,
        listened: bool = True,
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
            listener=slot.listener,
            tier=slot.choice.next_sentence,
            in_flight=in_flight,
            listened=listened,
        )
        output = AudioOutput(options.encoding, options.sample_rate_hz, options.include_alignment, options.resume)
        pieces = pipeline.run(resumed_sentences(sentences, options.resume) if options.resume else sentences)
        last: AudioChunk | None = None
        try:
            while (piece := await slot.unless_refused(anext(pieces, None))) is not None:
                chunk = output.push(piece)
                if self._capacity is not None:
                    self._capacity.produced(len(piece.samples) / piece.sample_rate_hz)
                if chunk is not None:
                    last = chunk
                    slot.audible()
                    yield chunk
            tail = output.finish()
            if tail and last is not None:
                yield AudioChunk(tail, last.sentence_index, last.audio_offset_s + last.audio_duration_s, 0.0, False, None)
            slot.finished = True
        finally:
            # The client's place is free the moment its stream is over; then the pipeline is closed
            # here, not left to the garbage collector, and its end cancels the worker streams.
            slot.release()
            await pieces.aclose()  # type: ignore[attr-defined]

    def opening_ids(self) -> int | None:
        """How many phoneme ids a first sentence may have before its opening is spoken on its own (None:
        never cut). A fixed number, so a text is cut the same way whatever the load, but for a stream
        that starts alone (`_starts_alone`)."""
        return self._opening_max_ids or None

    def _starts_alone(self) -> bool:
        """Whether a stream that has just taken its slot is alone on the mesh: no other stream of this
        gateway (listened to or not), none of other gateways on its workers. Its first sentence then
        opens sooner (`SynthesisOptions.eager_opening`): the rest's plan, of the whole sentence, is due
        within the opening's audio, and only a stream alone is sure to find the cores free for it (in a
        burst, the rests' plans fell due among the later listeners' first audios and ran listeners
        dry: docs/performance.md, "History"). The choice goes into the stream's resume tokens, so a
        resumed stream is cut as it was. A streamed text (`synthesize_incremental`) opens at the default:
        its first sentence comes a piece at a time, and its listener waits on the text as much as on its plan."""
        if self._open_streams != 1:
            return False
        return self.admission is None or self.admission.other_streams() <= 0

    def client_limit(self) -> int | None:
        """Streams one client may hold at most (None: no limit): `max_streams_per_client`, and of the
        streams the workers take at once all but an eighth (`OTHERS_SHARE`, kept where they take 8 or
        more), so one greedy client cannot fill the workers and leave every other client refused by
        them, while a client alone still has nearly all of them."""
        limit = self._max_streams_per_client or None
        slots = self._pool.stream_slots()
        if slots and slots >= OTHERS_SHARE:
            share = slots - slots // OTHERS_SHARE
            limit = share if limit is None else min(limit, share)
        return limit

    def _shed(self, reason: str, message: str) -> DownstreamError:
        """A refusal for room (RESOURCE_EXHAUSTED), counted as shed for `reason`, with admission's
        hint of when to retry where admission is on."""
        self._pool.metrics.shed(reason)
        retry_after_s = self.admission.retry_after_s() if self.admission is not None else None
        return DownstreamError(grpc.StatusCode.RESOURCE_EXHAUSTED, message, retry_after_s=retry_after_s)

    async def _admitted(self, client: str, expected_audio_s: float, options: SynthesisOptions, characters: int, timeout_s: float | None) -> _Slot:
        """`_take_slot`, waiting for room where the mesh has none now (libs.synthesis.room)."""
        try:
            return await self._room.take(
                lambda: self._try_slot(client, expected_audio_s, options, characters), client, timeout_s, lambda slot: slot.release()
            )
        except NoRoom as refusal:
            raise self._shed(refusal.reason, str(refusal)) from None

    @property
    def waiting_for_room(self) -> int:
        """Streams waiting for room now."""
        return self._room.waiting

    def _take_slot(self, client: str, expected_audio_s: float, options: SynthesisOptions | None = None, characters: int = 0) -> _Slot:
        """`_try_slot`, its refusal for room shed at once."""
        try:
            return self._try_slot(client, expected_audio_s, options, characters)
        except NoRoom as refusal:
            raise self._shed(refusal.reason, str(refusal)) from None

    def _try_slot(self, client: str, expected_audio_s: float, options: SynthesisOptions | None = None, characters: int = 0) -> _Slot:
        """Count one stream of `client` until its slot is released (or dropped), or shed it with
        RESOURCE_EXHAUSTED when the gateway is full or the client holds its limit of streams; `NoRoom`
        (not yet counted as shed) when the workers' stream slots are all taken or the mesh cannot keep
        one more listener playing (`admission`), room that a stream ending may bring back. The slot's
        tier is the one the stream starts in: the one asked for, or for auto quality while the
        listeners with it fit in the auto share of what admission takes (alone: while it fits at all),
        else the fast tier.
        Where even that is refused, streams playing in auto move to the fast tier from their next
        sentence, as many as make room (`_make_room`); and once admitted, as many more as bring the
        listeners back within the auto share (`_degrade`): the mesh degrades before it is full, where
        listeners would run dry first."""
        if self._open_streams >= self._max_streams:
            raise self._shed(SHED_GATEWAY_FULL, f"the gateway is serving its limit of {self._max_streams} streams; retry with backoff")
        slots = self._pool.stream_slots()
        if slots is not None and self._open_streams + self._pool.other_gateways_streams() >= slots:
            # The workers would refuse its streams, perhaps after its first audio: refused here, whole.
            raise NoRoom(SHED_WORKERS_SATURATED, f"the workers take {slots} streams at once and all are taken; retry with backoff")
        limit = self.client_limit() if client else None
        held = self._client_streams.get(client, 0)
        if limit is not None and held >= limit:
            raise self._shed(
                SHED_CLIENT_LIMIT,
                f"this client already has {held} streams open here, its limit (at most {self._max_streams_per_client or 'any number'} "
                "per client, and of what the workers take at once all but an eighth, kept for other clients); "
                "finish or cancel one before starting another",
            )
        asked = options.tier if options is not None else ""
        can_move = asked == AUTO and options is not None and FAST in options.voice.tiers
        choice = _TierChoice(FAST if asked == FAST else QUALITY)
        listener = Listener(
            client, expected_audio_s, cost=self._pool.fast_tier_cost() if choice.tier == FAST else 1.0,
            voice=options.voice.name if options is not None else "", characters=characters, text_complete=characters > 0,
        )  # fmt: skip
        if self.admission is not None:
            cost = self._pool.fast_tier_cost()
            if can_move and cost < 1.0 and self._starts_fast(client, expected_audio_s):
                choice.tier, listener.cost = FAST, cost
            refusal = self.admission.refusal(client, expected_audio_s, listener.cost)
            if refusal is not None and self._movable:
                refusal = self._make_room(listener, refusal)
            if refusal is not None:
                refusal = self._take_place(client, listener, refusal)
            if refusal is not None:
                raise NoRoom(SHED_REALTIME, refusal)
            self.admission.add(listener)
        self._open_streams += 1
        self._client_streams[client] = held + 1
        if can_move and choice.tier == QUALITY:
            self._movable[listener.id] = (listener, choice)
        self._pool.metrics.spoken_in(choice.tier, asked)
        if self._movable and self._auto_quality_share < 1.0:
            self._degrade()
        slot = _Slot(self, client, listener, choice)
        if client and self.admission is not None and (options is None or options.resume is None):
            slot.may_refuse_late()  # a resumed stream continues audio its listener already hears
        return slot

    def _take_place(self, client: str, new: Listener, refusal: str) -> str | None:
        """Let `new`, of a client within its share of a full mesh, take the place of streams of clients
        over theirs that have sent no audio yet (admission's `preemption`): None once it has, else the
        `refusal` it had."""
        assert self.admission is not None
        refused = self.admission.preemption(client, new.expected_audio_s, new.cost)
        if refused is None:
            return refusal
        self.admission.refuse(refused, PREEMPTED)
        for _ in refused:
            self._pool.metrics.shed(SHED_PREEMPTED)
        return None

    def _starts_fast(self, client: str, expected_audio_s: float) -> bool:
        """Whether a new auto stream starts in the fast tier: past the auto share with the others, or
        alone where quality would not keep up. A listener alone is under no load to degrade for, though
        on a slow machine one listener may be more than the share."""
        assert self.admission is not None
        if self.admission.listening():
            return self.admission.refusal(client, expected_audio_s, 1.0, self._auto_quality_share) is not None
        return not self.admission.fits(1.0, expected_audio_s)

    def _degrade(self) -> None:
        """Move streams playing in auto to the fast tier from their next sentence, those with the most
        audio still to make first, until the listeners fit in the auto share of what admission takes
        (or none is left to move)."""
        assert self.admission is not None
        cost = self._pool.fast_tier_cost()
        if cost >= 1.0 or len(self.admission.listening()) < 2:  # a listener alone stays as it started
            return
        moved = 0
        for listener, choice in self._movable_by_audio_left():
            if self.admission.fits(self._auto_quality_share):
                break
            listener.cost, choice.tier = cost, FAST
            del self._movable[listener.id]
            moved += 1
        if moved:
            self._pool.metrics.moved_to_fast(moved)

    def _make_room(self, new: Listener, refusal: str) -> str | None:
        """Move streams playing in auto to the fast tier from their next sentence, those with the most
        audio still to make first, until `new` fits; None once it does. Where moving them all would
        not make room, none moves and the refusal stands. The sentence each is in when it moves stays
        in quality: the listeners' buffers and the stall feedback cover that overlap."""
        assert self.admission is not None
        cost = self._pool.fast_tier_cost()
        if cost >= 1.0:
            return refusal
        moved: list[tuple[Listener, _TierChoice]] = []
        result: str | None = refusal
        for listener, choice in self._movable_by_audio_left():
            listener.cost, choice.tier = cost, FAST
            moved.append((listener, choice))
            result = self.admission.refusal(new.client, new.expected_audio_s, new.cost)
            if result is None:
                break
        if result is not None:  # no room even so: nobody moves
            for listener, choice in moved:
                listener.cost, choice.tier = 1.0, QUALITY
            return result
        for listener, _ in moved:
            del self._movable[listener.id]
        self._pool.metrics.moved_to_fast(len(moved))
        return None

    def _movable_by_audio_left(self) -> list[tuple[Listener, _TierChoice]]:
        """The streams playing in auto in quality, those with the most audio still to make first (a
        move saves most there)."""
        return sorted(self._movable.values(), key=lambda item: item[0].remaining_s(), reverse=True)

    def _give_back(self, client: str, listener: Listener, state: dict[str, bool]) -> None:
        self._movable.pop(listener.id, None)
        self._open_streams -= 1
        left = self._client_streams.pop(client) - 1
        if left:
            self._client_streams[client] = left
        if self.admission is not None:
            self.admission.remove(listener, state["finished"])
        self._room.room_freed()


class SpokenAudio(AsyncGenerator[AudioChunk, None]):
    """An utterance's audio chunks as they are made, and the options they are spoken with: those of the
    request with the tier it was admitted in (a door makes the stream's resume tokens from these
    options and the tier of each chunk's sentence)."""

    def __init__(self, chunks: AsyncGenerator[AudioChunk, None], options: SynthesisOptions, choice: _TierChoice | None = None) -> None:
        self._chunks = chunks
        self.options = options
        self._choice = choice

    @property
    def tier(self) -> str:
        """The tier of the voice the audio starts in: exact once the first chunk is out (a door sends
        it with the first audio), the tier the stream was admitted in before."""
        if self._choice is not None:
            return self._choice.first or self._choice.tier
        return self.options.tier

    def __aiter__(self) -> SpokenAudio:
        return self

    async def __anext__(self) -> AudioChunk:
        return await self._chunks.__anext__()

    async def asend(self, value: None) -> AudioChunk:
        return await self._chunks.asend(value)

    async def athrow(self, *args: Any) -> AudioChunk:
        return await self._chunks.athrow(*args)

    async def aclose(self) -> None:
        await self._chunks.aclose()


class _TierChoice:
    """The tier a stream's next sentence starts in: the one it was admitted in until admission moves
    an auto stream to the fast tier (the sentence it is in then stays in its tier)."""

    def __init__(self, tier: str) -> None:
        self.tier = tier
        self.first = ""
        """The tier its first sentence was spoken in ("" until that sentence starts)."""

    def next_sentence(self) -> str:
        """The tier of the sentence that starts now."""
        self.first = self.first or self.tier
        return self.tier


class _Slot:
    """One stream's place in a synthesizer's counts, given back exactly once: by `release()` when
    the stream ends, or when the slot is dropped unused (a response the door never started to send
    still frees its place)."""

    def __init__(self, synthesizer: Synthesizer, client: str, listener: Listener, choice: _TierChoice) -> None:
        self.listener = listener
        self.choice = choice
        """The tier of the voice its sentences are spoken in."""
        self._state = {"finished": False}
        self.release = weakref.finalize(self, synthesizer._give_back, client, listener, self._state)
        self._retry_after_s = synthesizer.admission.retry_after_s if synthesizer.admission is not None else None
        self._refused: asyncio.Event | None = None
        self._refusal = ""

    def may_refuse_late(self) -> None:
        """Let admission refuse the stream until its first audio is out (`Listener.refuse_late`). The
        listener holds the slot weakly: a slot dropped unused still gives its place back."""
        self._refused = asyncio.Event()
        method = weakref.WeakMethod(self._refuse_late)

        def refuse_late(reason: str) -> None:
            if (bound := method()) is not None:
                bound(reason)

        self.listener.refuse_late = refuse_late

    def _refuse_late(self, reason: str) -> None:
        if self._refused is not None:
            self._refusal = reason
            self._refused.set()

    def audible(self) -> None:
        """Its first audio is going out: from now on it is never refused."""
        if self._refused is not None and not self._refused.is_set():
            self._refused = None
            self.listener.refuse_late = None

    async def unless_refused(self, step: Awaitable[_T]) -> _T:
        """What `step` gives, unless the stream is refused late first: then `step` is cancelled (and
        has ended) and the refusal is raised, RESOURCE_EXHAUSTED with pushback."""
        if self._refused is None:
            return await step
        if self._refusal:
            raise self._late_refusal()
        task = asyncio.ensure_future(step)
        refused = asyncio.ensure_future(self._refused.wait())
        try:
            await asyncio.wait((task, refused), return_when=asyncio.FIRST_COMPLETED)
        finally:
            refused.cancel()
            if not task.done() or self._refusal:
                task.cancel()
                await asyncio.wait((task,))  # ended before anything closes the pipeline it runs in
        if not self._refusal:
            return task.result()
        if not task.cancelled():
            task.exception()  # whatever the step came to, the refusal is what the stream ends with
        raise self._late_refusal()

    def _late_refusal(self) -> DownstreamError:
        retry_after_s = self._retry_after_s() if self._retry_after_s is not None else None
        return DownstreamError(grpc.StatusCode.RESOURCE_EXHAUSTED, self._refusal, retry_after_s=retry_after_s)

    @property
    def finished(self) -> bool:
        """Whether the stream's audio was all delivered (its text then teaches the audio per character)."""
        return self._state["finished"]

    @finished.setter
    def finished(self, value: bool) -> None:
        self._state["finished"] = value

    def text_arrived(self, characters: int) -> None:
        """More of a streamed text arrived: its listener needs at least that text's audio."""
        self.listener.text_arrived(characters)


async def _counted(pieces: AsyncIterator[str], slot: _Slot) -> AsyncIterator[str]:
    """`pieces` of a streamed text, each counted into its listener's expected audio."""
    async for piece in pieces:
        slot.text_arrived(len(piece))
        yield piece
