"""The synthesizer's stream counts: a slot is given back exactly once, whether its stream ran,
failed, or was never started by the door that asked for it."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import AsyncIterator
from dataclasses import replace
from types import SimpleNamespace
from typing import Any, ClassVar

import grpc
import numpy as np
import pytest

from libs.pb.tts.v1 import tts_pb2
from libs.synthesis import synthesizer as synthesizer_module
from libs.synthesis.admission import RealtimeAdmission
from libs.synthesis.options import SynthesisOptions, resolve_options
from libs.synthesis.pipeline import SentenceMeta, SentencePiece
from libs.synthesis.synthesizer import SpokenAudio, Synthesizer
from libs.upstream.metrics import SHED_PREEMPTED, SHED_REALTIME
from libs.voice.registry import VoiceRegistry, default_registry
from libs.voice.tiers import AUTO, FAST, QUALITY
from libs.wire.errors import DownstreamError


class _Pool:
    """What the counts read of a worker pool: the shed and tier counters, the streams the workers take,
    and what the fast tier costs."""

    def __init__(self, slots: int | None = None, fast_tier_cost: float = 1.0) -> None:
        self.spoken: list[tuple[str, str]] = []
        self.moved: list[int] = []
        self.shed: list[str] = []
        self.waited: list[bool] = []
        self.metrics = SimpleNamespace(
            shed=self.shed.append, spoken_in=lambda tier, asked: self.spoken.append((tier, asked)), moved_to_fast=self.moved.append,
            waited_for_room=lambda admitted, seconds: self.waited.append(admitted),
        )  # fmt: skip
        self.slots = slots
        self._fast_tier_cost = fast_tier_cost

    def stream_slots(self) -> int | None:
        return self.slots

    def other_gateways_streams(self) -> int:
        return self.others

    others = 0
    """Streams other gateways hold on the workers."""

    def fast_tier_cost(self) -> float:
        return self._fast_tier_cost


def _synthesizer(
    per_client: int = 0, admission: RealtimeAdmission | None = None, slots: int | None = None, pool: _Pool | None = None,
    auto_quality_share: float = 1.0,
) -> Synthesizer:
    return Synthesizer(
        pool=pool or _Pool(slots), cache=None, text_side=None, max_streams=8, max_streams_per_client=per_client,  # type: ignore[arg-type]
        admission=admission, auto_quality_share=auto_quality_share,
    )  # fmt: skip


def _asking(tier: str, tiers: tuple[str, ...] = (QUALITY, FAST)) -> SynthesisOptions:
    return SimpleNamespace(tier=tier, voice=SimpleNamespace(name="v", tiers=tiers), resume=None, lexicon=None)  # type: ignore[return-value]


def test_auto_moves_a_new_stream_to_the_fast_tier_only_when_quality_would_be_refused() -> None:
    pool = _Pool(fast_tier_cost=0.4)
    synthesizer = _synthesizer(admission=RealtimeAdmission(lambda: 2.5, lambda: 0, headroom=1.0), pool=pool)
    held = [synthesizer._take_slot(client, 10.0, _asking(tier)) for client, tier in (("a", QUALITY), ("b", QUALITY), ("c", AUTO))]
    assert [slot.choice.tier for slot in held] == [QUALITY, QUALITY, FAST], "two quality listeners fill 2.5; a third fits at 0.4"
    assert held[2].listener.cost == 0.4
    with pytest.raises(DownstreamError) as full:  # 2 + 0.4 + 0.4 > 2.5: even the fast tier would not keep up
        synthesizer._take_slot("d", 10.0, _asking(AUTO))
    assert full.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    with pytest.raises(DownstreamError):  # asked for quality: refused, never moved
        synthesizer._take_slot("e", 1.0, _asking(QUALITY))
    assert pool.spoken == [(QUALITY, QUALITY), (QUALITY, QUALITY), (FAST, AUTO)] and pool.moved == []


def test_playing_auto_streams_move_to_the_fast_tier_from_their_next_sentence_to_make_room() -> None:
    pool = _Pool(fast_tier_cost=0.4)
    synthesizer = _synthesizer(admission=RealtimeAdmission(lambda: 2.5, lambda: 0, headroom=1.0), pool=pool)
    short, long = synthesizer._take_slot("a", 5.0, _asking(AUTO)), synthesizer._take_slot("b", 20.0, _asking(AUTO))
    assert short.choice.next_sentence() == QUALITY and long.choice.next_sentence() == QUALITY  # both playing their first sentence
    fast = synthesizer._take_slot("c", 10.0, _asking(AUTO))  # 2 + 0.4 fits
    assert fast.choice.tier == FAST and pool.moved == []
    # 2 + 0.4 + 0.4 > 2.5: the listener with the most audio still to make moves, and that is enough.
    newest = synthesizer._take_slot("d", 10.0, _asking(AUTO))
    assert newest.choice.tier == FAST and pool.moved == [1]
    assert (long.choice.tier, long.listener.cost, short.choice.tier, short.listener.cost) == (FAST, 0.4, QUALITY, 1.0)
    assert long.choice.next_sentence() == FAST and long.choice.first == QUALITY, "the sentence it was in stays quality"
    assert SpokenAudio(_nothing(), _asking(QUALITY), long.choice).tier == QUALITY, "its audio started in quality"
    # A stream asking for quality makes room the same way, but 4 x 0.4 + 1 > 2.5 even with every auto
    # stream moved: it is refused and nobody moves.
    with pytest.raises(DownstreamError):
        synthesizer._take_slot("e", 10.0, _asking(QUALITY))
    assert (short.choice.tier, short.listener.cost, pool.moved) == (QUALITY, 1.0, [1])
    short.release()
    assert synthesizer._movable == {}, "a stream that ended is no longer there to move"
    for slot in (long, fast, newest):
        slot.release()


def test_past_the_auto_share_new_auto_streams_start_fast_and_playing_ones_move_until_the_listeners_fit_it() -> None:
    pool = _Pool(fast_tier_cost=0.25)
    admission = RealtimeAdmission(lambda: 4.0, lambda: 0, headroom=1.0)
    synthesizer = _synthesizer(admission=admission, pool=pool, auto_quality_share=0.5)  # quality while they fit in 2.0
    first, second = synthesizer._take_slot("a", 20.0, _asking(AUTO)), synthesizer._take_slot("b", 10.0, _asking(AUTO))
    assert (first.choice.tier, second.choice.tier, pool.moved) == (QUALITY, QUALITY, [])
    pinned = synthesizer._take_slot("c", 10.0, _asking(QUALITY))  # 3.0: within 4, past 2
    # Asked for quality, it is spoken in quality; auto listeners make up the difference, the one with
    # the most audio to make first: with one moved, 0.25 + 1 + 1 = 2.25 is still past 2.0, so both move.
    assert pinned.choice.tier == QUALITY and pool.moved == [2]
    assert (first.choice.tier, first.listener.cost, second.choice.tier) == (FAST, 0.25, FAST)
    third = synthesizer._take_slot("d", 10.0, _asking(AUTO))
    assert third.choice.tier == FAST and pool.moved == [2], "past the share a new auto stream starts in the fast tier"
    assert pool.spoken == [(QUALITY, AUTO), (QUALITY, AUTO), (QUALITY, QUALITY), (FAST, AUTO)]
    for slot in (first, second, pinned, third):
        slot.release()
    alone = synthesizer._take_slot("e", 10.0, _asking(AUTO))
    assert alone.choice.tier == QUALITY, "a listener alone is never past the share"


def test_an_auto_listener_alone_starts_in_quality_where_it_fits_at_all_and_moves_only_once_another_comes() -> None:
    # A slow machine: one quality listener is 0.8 of what admission takes, past the 0.3 auto share.
    pool = _Pool(fast_tier_cost=0.4)
    synthesizer = _synthesizer(admission=RealtimeAdmission(lambda: 1.25, lambda: 0, headroom=1.0), pool=pool, auto_quality_share=0.3)
    alone = synthesizer._take_slot("a", 10.0, _asking(AUTO))
    assert (alone.choice.tier, pool.moved) == (QUALITY, []), "nobody else listens: nothing to degrade for"
    # A second listener: past the share together, so the first moves at its next sentence and the newcomer starts fast.
    newcomer = synthesizer._take_slot("b", 10.0, _asking(AUTO))
    assert (newcomer.choice.tier, alone.choice.tier, pool.moved) == (FAST, FAST, [1])
    for slot in (alone, newcomer):
        slot.release()
    # Where even one quality listener would not keep up, a listener alone starts in the fast tier.
    tiny = _synthesizer(admission=RealtimeAdmission(lambda: 0.6, lambda: 0, headroom=1.0), pool=pool, auto_quality_share=0.3)
    assert tiny._take_slot("c", 10.0, _asking(AUTO)).choice.tier == FAST


async def _nothing() -> AsyncIterator[Any]:
    for item in ():
        yield item


def test_auto_refuses_as_quality_does_for_a_voice_without_a_fast_tier_or_while_its_cost_is_unknown() -> None:
    for pool, tiers in ((_Pool(fast_tier_cost=0.4), (QUALITY,)), (_Pool(fast_tier_cost=1.0), (QUALITY, FAST))):
        synthesizer = _synthesizer(admission=RealtimeAdmission(lambda: 1.5, lambda: 0, headroom=1.0), pool=pool)
        first = synthesizer._take_slot("a", 10.0, _asking(AUTO, tiers))  # held: a dropped slot is given back
        assert first.choice.tier == QUALITY
        with pytest.raises(DownstreamError):
            synthesizer._take_slot("b", 10.0, _asking(AUTO, tiers))


def test_a_fast_stream_asked_for_is_weighed_at_its_cost() -> None:
    pool = _Pool(fast_tier_cost=0.25)
    synthesizer = _synthesizer(admission=RealtimeAdmission(lambda: 1.0, lambda: 0, headroom=1.0), pool=pool)
    slots = [synthesizer._take_slot(client, 10.0, _asking(FAST)) for client in "abcd"]  # four at 0.25 fill 1.0
    assert {slot.choice.tier for slot in slots} == {FAST}
    with pytest.raises(DownstreamError):
        synthesizer._take_slot("e", 10.0, _asking(FAST))


def test_a_client_limit_is_the_fixed_per_client_limit() -> None:
    assert _synthesizer().client_limit() is None
    assert _synthesizer(per_client=10).client_limit() == 10


def test_a_client_leaves_an_eighth_of_what_the_workers_take_to_the_others() -> None:
    assert _synthesizer(slots=32).client_limit() == 28
    assert _synthesizer(per_client=64, slots=32).client_limit() == 28
    assert _synthesizer(per_client=10, slots=64).client_limit() == 10
    assert _synthesizer(per_client=4, slots=4).client_limit() == 4, "workers that take few streams: nothing to keep back"
    synthesizer = _synthesizer(per_client=64, slots=8)
    greedy = [synthesizer._take_slot("greedy", 1.0) for _ in range(7)]
    with pytest.raises(DownstreamError, match="all but an eighth"):
        synthesizer._take_slot("greedy", 1.0)
    other = synthesizer._take_slot("other", 1.0)  # the eighth kept back is there for everyone else
    for slot in (*greedy, other):
        slot.release()


def test_no_more_streams_are_admitted_than_the_workers_take_with_other_gateways_streams() -> None:
    """Past what the workers take, a stream would be refused by them after the gateway admitted it,
    perhaps after its first audio (a cached first sentence): it is refused here, whole, instead."""
    pool = _Pool(slots=4)
    pool.others = 1
    synthesizer = _synthesizer(pool=pool)
    held = [synthesizer._take_slot(f"client-{n}", 1.0) for n in range(3)]
    with pytest.raises(DownstreamError, match="the workers take 4 streams at once") as refused:
        synthesizer._take_slot("client-x", 1.0)
    assert refused.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    held.pop().release()
    synthesizer._take_slot("client-x", 1.0).release()
    for slot in held:
        slot.release()


def test_a_dropped_slot_is_given_back_and_a_released_one_only_once() -> None:
    synthesizer = _synthesizer(per_client=2)
    first, second = synthesizer._take_slot("a", 1.0), synthesizer._take_slot("a", 1.0)
    with pytest.raises(DownstreamError) as caught:
        synthesizer._take_slot("a", 1.0)
    assert caught.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    synthesizer._take_slot("b", 1.0).release()
    first.release()
    first.release()
    del second
    gc.collect()
    assert synthesizer._open_streams == 0 and synthesizer._client_streams == {}


def test_a_slot_is_a_listener_of_the_admission_until_it_is_given_back() -> None:
    admission = RealtimeAdmission(lambda: 2.0, lambda: 0, headroom=1.0)
    synthesizer = _synthesizer(admission=admission)
    first, second = synthesizer._take_slot("a", 10.0), synthesizer._take_slot("b", 10.0)
    assert len(list(admission.listeners)) == 2
    with pytest.raises(DownstreamError) as caught:  # a third listener holding nothing: more than 2 audio s per s
        synthesizer._take_slot("c", 10.0)
    assert caught.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED and caught.value.retry_after_s is not None
    first.release()
    del second
    gc.collect()
    assert list(admission.listeners) == []
    assert synthesizer._take_slot("", 1000.0) is not None  # work nobody listens to is never refused here


def test_a_response_never_iterated_frees_its_slot() -> None:
    synthesizer = _synthesizer(per_client=1)

    async def never_read() -> None:
        async def no_sentences():  # type: ignore[no-untyped-def]
            return
            yield

        chunks = synthesizer.speak(no_sentences(), options=None, timeout_s=None, client="a")  # type: ignore[arg-type]
        with pytest.raises(DownstreamError):
            synthesizer.speak(no_sentences(), options=None, timeout_s=None, client="a")  # type: ignore[arg-type]
        del chunks  # the door dropped the response before sending it

    asyncio.run(never_read())
    gc.collect()
    assert synthesizer._open_streams == 0


def test_a_stream_moved_to_the_fast_tier_is_spoken_with_options_that_name_it() -> None:
    # Its doors make its resume tokens from these options: a token must name the tier that spoke.
    registry = default_registry()
    voice = replace(registry.default, tiers=(QUALITY, FAST))
    asked = resolve_options(VoiceRegistry([voice], voice.name), voice="", speed=1.0, encoding=tts_pb2.LINEAR_PCM, sample_rate_hz=0,
                            speaker_id=0, request_id="", include_alignment=False, tier=AUTO)  # fmt: skip
    pool = _Pool(fast_tier_cost=0.4)
    synthesizer = _synthesizer(admission=RealtimeAdmission(lambda: 1.5, lambda: 0, headroom=1.0), pool=pool)

    async def no_sentences():  # type: ignore[no-untyped-def]
        return
        yield

    async def speak_two() -> tuple[SpokenAudio, SpokenAudio]:  # each expects 10 s of audio, as a text of that length would
        return tuple(synthesizer._spoken(no_sentences(), asked, None, synthesizer._take_slot(client, 10.0, asked)) for client in "ab")  # type: ignore[return-value]

    first, second = asyncio.run(speak_two())
    assert (first.tier, second.tier) == (QUALITY, FAST)
    assert second.options.digest == replace(asked, tier=FAST).digest != asked.digest
    assert first.options.digest == asked.digest


class _HeldPipeline:
    """Stands in for the utterance pipeline: each stream's audio waits until the test lets it out, one
    piece of a sentence per `release()`; it notes whether it was closed before its end."""

    made: ClassVar[list[_HeldPipeline]] = []

    def __init__(self, **_: Any) -> None:
        self.ready: asyncio.Queue[bool] = asyncio.Queue()
        self.closed = False
        _HeldPipeline.made.append(self)

    def release(self, last: bool = False) -> None:
        self.ready.put_nowait(last)

    async def run(self, sentences: AsyncIterator[Any]) -> AsyncIterator[SentencePiece]:
        meta = SentenceMeta(text="Held.", phonemes="h", frame_count=8, phoneme_frames=(8,))
        try:
            while True:
                last = await self.ready.get()
                yield SentencePiece(0, np.zeros(2048, np.float32), 22050, last, meta, 256 / 22050)
                if last:
                    return
        finally:
            self.closed = True


def test_a_silent_stream_of_a_client_over_its_share_gives_its_place_and_ends_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(synthesizer_module, "UtterancePipeline", _HeldPipeline)
    _HeldPipeline.made.clear()
    registry = default_registry()
    options = resolve_options(registry, voice="", speed=1.0, encoding=tts_pb2.LINEAR_PCM, sample_rate_hz=0, speaker_id=0,
                              request_id="", include_alignment=False)  # fmt: skip
    admission = RealtimeAdmission(lambda: 3.0, lambda: 0, headroom=1.0)
    pool = _Pool()
    shed: list[str] = []
    pool.metrics.shed = shed.append
    synthesizer = _synthesizer(admission=admission, pool=pool)

    async def sentences() -> AsyncIterator[Any]:
        yield None

    async def scenario() -> None:
        hog = [synthesizer._spoken(sentences(), options, None, synthesizer._take_slot("hog", 10.0, options)) for _ in range(3)]
        first = [asyncio.ensure_future(anext(audio)) for audio in hog]
        await asyncio.sleep(0)
        _HeldPipeline.made[0].release()  # the hog's first stream plays; the other two are silent
        assert (await first[0]).audio
        # The mesh is full. A small client comes: the hog's newest silent stream gives its place.
        small = synthesizer._spoken(sentences(), options, None, synthesizer._take_slot("small", 10.0, options))
        with pytest.raises(DownstreamError) as refused:
            await first[2]
        assert refused.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED and "gave its place" in str(refused.value)
        assert refused.value.retry_after_s is not None and refused.value.retry_after_s > 0
        assert _HeldPipeline.made[2].closed, "its pipeline was stopped: the workers' calls end with it"
        assert shed == [SHED_PREEMPTED] and synthesizer._client_streams == {"hog": 2, "small": 1}
        # The hog's other streams go on, the playing one and the silent one, which plays when its audio comes.
        _HeldPipeline.made[1].release(last=True)
        assert (await first[1]).audio
        _HeldPipeline.made[0].release(last=True)
        assert (await anext(hog[0])).audio
        # A second small stream would put the small client over its share of 1.5: refused, nothing taken.
        with pytest.raises(DownstreamError):
            synthesizer._take_slot("small", 10.0, options)
        assert shed == [SHED_PREEMPTED, SHED_REALTIME]
        heard = asyncio.ensure_future(anext(small))
        await asyncio.sleep(0)
        _HeldPipeline.made[3].release(last=True)
        assert (await heard).audio
        for audio in (*hog[:2], small):
            await audio.aclose()

    asyncio.run(scenario())
    gc.collect()
    assert synthesizer._open_streams == 0 and list(admission.listeners) == []


def test_a_resumed_stream_never_gives_its_place() -> None:
    # Its listener already hears the stream it goes on with.
    admission = RealtimeAdmission(lambda: 2.0, lambda: 0, headroom=1.0)
    synthesizer = _synthesizer(admission=admission)
    resumed = SimpleNamespace(tier=QUALITY, voice=SimpleNamespace(name="v", tiers=(QUALITY,)), resume=object())
    held = [synthesizer._take_slot("hog", 10.0, resumed) for _ in range(2)]  # type: ignore[arg-type]
    assert all(slot.listener.refuse_late is None for slot in held)
    with pytest.raises(DownstreamError):
        synthesizer._take_slot("small", 10.0, _asking(QUALITY))


def _waiting_synthesizer(room_wait_s: float, per_client: int = 0, slots: int | None = None) -> tuple[Synthesizer, _Pool]:
    """A synthesizer whose mesh keeps two listeners playing, where a stream waits `room_wait_s` for room."""
    pool = _Pool(slots)
    synthesizer = Synthesizer(
        pool=pool, cache=None, text_side=None, max_streams=8, max_streams_per_client=per_client,  # type: ignore[arg-type]
        # A client counts for its share only while it holds a stream: the one that ends leaves its room to the waiting.
        admission=RealtimeAdmission(lambda: 2.0, lambda: 0, headroom=1.0, active_client_s=0), room_wait_s=room_wait_s,
    )  # fmt: skip
    return synthesizer, pool


async def _until_waiting(synthesizer: Synthesizer, streams: int) -> None:
    for _ in range(5000):
        if synthesizer.waiting_for_room == streams:
            return
        await asyncio.sleep(0.001)
    raise AssertionError(f"{streams} streams never waited for room")


async def test_a_whole_text_that_finds_the_mesh_full_waits_for_a_stream_to_end_and_is_admitted() -> None:
    synthesizer, pool = _waiting_synthesizer(room_wait_s=60)
    held = [synthesizer._take_slot(client, 10.0, _asking(QUALITY)) for client in "ab"]  # two listeners holding nothing fill 2.0
    waiting = asyncio.create_task(synthesizer._admitted("c", 10.0, _asking(QUALITY), 100, None))
    await _until_waiting(synthesizer, 1)
    held[0].release()
    slot = await waiting
    assert slot.listener.client == "c" and synthesizer.waiting_for_room == 0
    assert pool.waited == [True] and pool.shed == []
    for each in (held[1], slot):
        each.release()


async def test_a_whole_text_still_without_room_when_its_wait_ends_is_refused_once_with_pushback() -> None:
    synthesizer, pool = _waiting_synthesizer(room_wait_s=0.05)
    held = [synthesizer._take_slot(client, 10.0, _asking(QUALITY)) for client in "ab"]
    with pytest.raises(DownstreamError, match="keep playing") as refused:
        await synthesizer._admitted("c", 10.0, _asking(QUALITY), 100, None)
    assert refused.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED and refused.value.retry_after_s
    assert pool.waited == [False] and pool.shed == [SHED_REALTIME]
    assert synthesizer._open_streams == 2
    for slot in held:
        slot.release()


async def test_the_workers_stream_slots_are_waited_for_and_a_client_limit_is_not() -> None:
    synthesizer, pool = _waiting_synthesizer(room_wait_s=60, per_client=1, slots=2)
    first = synthesizer._take_slot("a", 1.0, _asking(QUALITY))
    with pytest.raises(DownstreamError, match="already has 1 streams open"):  # a stream of another client ending would not lift it
        await synthesizer._admitted("a", 1.0, _asking(QUALITY), 10, None)
    second = synthesizer._take_slot("b", 1.0, _asking(QUALITY))
    waiting = asyncio.create_task(synthesizer._admitted("c", 1.0, _asking(QUALITY), 10, None))
    await _until_waiting(synthesizer, 1)
    second.release()
    third = await waiting
    assert pool.waited == [True]
    for slot in (first, third):
        slot.release()


class _PiecesTextSide:
    """Stands in for the text side of a streamed text: the test looks only at when its slot is taken."""

    def incremental_sentences(self, voice: Any, pieces: Any, lexicon: Any, opening: Any, in_flight: Any) -> AsyncIterator[Any]:
        async def none() -> AsyncIterator[Any]:
            async for _ in pieces:
                pass
            return
            yield

        return none()


async def test_a_text_streamed_in_pieces_waits_for_room_as_a_whole_text_does() -> None:
    synthesizer, pool = _waiting_synthesizer(room_wait_s=60)
    synthesizer.text_side = _PiecesTextSide()  # type: ignore[assignment]
    held = [synthesizer._take_slot(client, 10.0, _asking(QUALITY)) for client in "ab"]

    async def pieces() -> AsyncIterator[str]:
        yield "Hello there."

    waiting = asyncio.create_task(synthesizer.synthesize_incremental(pieces(), _asking(QUALITY), None, "c"))
    await _until_waiting(synthesizer, 1)
    held[0].release()
    spoken = await waiting
    assert synthesizer.waiting_for_room == 0 and pool.waited == [True] and pool.shed == []
    assert synthesizer._open_streams == 2
    await spoken.aclose()
    held[1].release()
    # Without room until its wait ends it is refused, once, with pushback.
    synthesizer, pool = _waiting_synthesizer(room_wait_s=0.05)
    held = [synthesizer._take_slot(client, 10.0, _asking(QUALITY)) for client in "ab"]
    with pytest.raises(DownstreamError, match="keep playing") as refused:
        await synthesizer.synthesize_incremental(pieces(), _asking(QUALITY), None, "c")
    assert refused.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED and refused.value.retry_after_s
    assert pool.waited == [False] and pool.shed == [SHED_REALTIME]
    for slot in held:
        slot.release()
