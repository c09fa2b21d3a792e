"""A listener's first pieces go together while the first alone would run out before the next can come."""

from __future__ import annotations

import asyncio
import itertools
from types import SimpleNamespace
from typing import Any

import numpy as np

from libs.synthesis.admission import Listener, RealtimeAdmission
from libs.synthesis.pipeline import _DONE, SentenceMeta, SentencePiece, UtterancePipeline
from libs.upstream.metrics import RoutingMetrics
from libs.upstream.playback import PieceGaps, StartGaps
from libs.upstream.vocoder_stream import Samples

RATE_HZ = 22050


class _Pool:
    """Only what the hold reads: the vocoder's step lead now, and the recent gaps after first pieces."""

    def __init__(self, step_lead_s: float, start_gaps: StartGaps | None = None) -> None:
        self.lead_s = step_lead_s
        self.start_gaps = start_gaps or StartGaps()
        self.piece_gaps = PieceGaps()
        self.metrics = RoutingMetrics()

    def piece_wait_s(self, alone: bool = False) -> float:
        return max(self.lead_s, self.start_gaps.high_s(alone))


def _held_s(pipeline: UtterancePipeline) -> tuple[float, float]:
    """(first pieces held, seconds held in all) by the pipeline's pool's start-delay histogram."""
    registry = pipeline._pool.metrics.registry
    count = registry.get_sample_value("tts_gateway_start_delay_seconds_count", {"part": "hold"})
    return count or 0.0, registry.get_sample_value("tts_gateway_start_delay_seconds_sum", {"part": "hold"}) or 0.0


def _pipeline(step_lead_s: float, start_gaps: StartGaps | None = None, listener: Listener | None = None) -> UtterancePipeline:
    return UtterancePipeline(
        pool=_Pool(step_lead_s, start_gaps),  # type: ignore[arg-type]
        cache=None,  # type: ignore[arg-type]
        flights=None,  # type: ignore[arg-type]
        voice="v",
        params=None,  # type: ignore[arg-type]
        utterance_id="u",
        timeout_s=None,
        listener=listener,
    )


def _piece(seconds: float, is_last: bool = False) -> SentencePiece:
    meta = SentenceMeta(text="t", phonemes="t", frame_count=1, phoneme_frames=(1,))
    return SentencePiece(0, np.zeros(round(seconds * RATE_HZ), np.float32), RATE_HZ, is_last, meta, 256 / RATE_HZ)


async def _received(pipeline: UtterancePipeline, output: asyncio.Queue[Any], into: list[Any]) -> None:
    async for item in pipeline._starting_together(output):
        into.append(item)
        if item is _DONE:
            return


async def _until_received(received: list[Any], count: int, within_s: float) -> None:
    """Wait until `count` items have been received, or `within_s` has passed."""
    for _ in range(round(within_s / 0.01)):
        if len(received) >= count:
            return
        await asyncio.sleep(0.01)


async def test_a_first_piece_that_outlasts_the_next_step_goes_at_once() -> None:
    output: asyncio.Queue[Any] = asyncio.Queue()
    received: list[Any] = []
    pipeline = _pipeline(0.05)
    reader = asyncio.create_task(_received(pipeline, output, received))
    first = _piece(0.128)
    output.put_nowait(first)
    await _until_received(received, 1, 1)  # no second piece is coming: the first is not held for one
    assert received == [first]
    output.put_nowait(_DONE)
    await reader
    count, held_s = _held_s(pipeline)
    assert count == 1 and held_s < 0.05  # the metric says it went at once


async def test_a_first_piece_shorter_than_the_next_step_waits_for_the_next() -> None:
    output: asyncio.Queue[Any] = asyncio.Queue()
    received: list[Any] = []
    reader = asyncio.create_task(_received(_pipeline(5.0), output, received))
    first, second = _piece(0.128), _piece(6.0)
    output.put_nowait(first)
    await asyncio.sleep(0.1)
    assert received == []  # held: alone it would run out long before a 5 s step came
    output.put_nowait(second)
    await _until_received(received, 2, 1)
    assert received == [first, second]  # together they outlast the next step: both go
    output.put_nowait(_DONE)
    await reader
    assert received[-1] is _DONE


async def test_a_held_piece_goes_when_the_next_step_should_have_come() -> None:
    output: asyncio.Queue[Any] = asyncio.Queue()
    received: list[Any] = []
    reader = asyncio.create_task(_received(_pipeline(0.2), output, received))
    first = _piece(0.128)
    output.put_nowait(first)
    await _until_received(received, 1, 5)  # the next piece never comes: the first goes once the step lead has passed
    assert received == [first]
    later = _piece(0.5, is_last=True)
    output.put_nowait(later)  # what comes after goes straight on, nothing lost to the wait's end
    output.put_nowait(_DONE)
    await reader
    assert received == [first, later, _DONE]


async def test_a_held_piece_waits_only_until_what_it_holds_lasts_to_the_next_step() -> None:
    output: asyncio.Queue[Any] = asyncio.Queue()
    received: list[Any] = []
    pipeline = _pipeline(4.0)
    reader = asyncio.create_task(_received(pipeline, output, received))
    first = _piece(3.5)  # lasts 3.5 s of the 4 s the next step takes: held for the half second missing
    output.put_nowait(first)
    await asyncio.sleep(0.1)
    assert received == []
    await _until_received(received, 1, 3)  # not the whole 4 s: the listener plays the first piece while the step runs
    assert received == [first]
    output.put_nowait(_DONE)
    await reader
    count, held_s = _held_s(pipeline)
    assert count == 1 and 0.45 <= held_s < 1.0  # the metric counts the half second it was held


async def test_second_pieces_that_came_late_lately_hold_a_first_piece_the_step_lead_would_not() -> None:
    gaps = StartGaps()
    for gap_s in (0.1, 0.2, 6.0, 6.0, 6.0):  # bursts queue second pieces behind other streams' steps
        gaps.observe(gap_s)
    assert gaps.high_s() == 6.0
    output: asyncio.Queue[Any] = asyncio.Queue()
    received: list[Any] = []
    reader = asyncio.create_task(_received(_pipeline(0.05, gaps), output, received))
    first, second = _piece(0.128), _piece(6.0)
    output.put_nowait(first)
    await asyncio.sleep(0.2)
    assert received == []  # the step lead alone (50 ms) would have let it go
    output.put_nowait(second)
    await _until_received(received, 2, 1)
    assert received == [first, second]
    output.put_nowait(_DONE)
    await reader


def test_start_gaps_keep_a_high_quantile_of_the_recent_ones() -> None:
    gaps = StartGaps(kept=10)
    assert gaps.high_s() == 0.0
    for gap_s in range(100):  # only the last ten count: 90 to 99
        gaps.observe(gap_s / 100)
    assert gaps.high_s() == 0.99
    gaps.observe(-1.0)  # a clock that went back says nothing
    assert gaps.high_s() == 0.99


def test_lone_starts_gaps_are_kept_apart_from_those_of_starts_beside_others() -> None:
    gaps = StartGaps()
    for gap_s in (6.0, 6.0, 6.0):  # a burst's second pieces queued behind other streams' steps
        gaps.observe(gap_s)
    assert gaps.high_s(alone=True) == 6.0  # no lone start seen yet: the only history there is
    gaps.observe(0.2, alone=True)
    assert gaps.high_s(alone=True) == 0.2
    assert gaps.high_s() == 6.0  # a listener beside others still goes by every start


def _lone_listener() -> Listener:
    admission = RealtimeAdmission(lambda: 4.0, lambda: 0, 1.0)  # faster than real time: no start buffer
    listener = Listener("a", 8.0)
    admission.add(listener)
    assert listener.alone() and listener.start_buffer_s() == 0.0
    return listener


async def test_a_lone_listener_is_not_held_by_the_gaps_of_a_burst_before_it() -> None:
    gaps = StartGaps()
    for gap_s in (6.0, 6.0, 6.0):
        gaps.observe(gap_s)
    gaps.observe(0.1, alone=True)  # alone, the next piece has come 0.1 s after the first
    output: asyncio.Queue[Any] = asyncio.Queue()
    received: list[Any] = []
    reader = asyncio.create_task(_received(_pipeline(0.05, gaps, _lone_listener()), output, received))
    first = _piece(0.128)  # outlasts the lone starts' wait, not the burst's
    output.put_nowait(first)
    await _until_received(received, 1, 1)
    assert received == [first]
    output.put_nowait(_DONE)
    await reader


async def test_a_start_is_timed_as_lone_when_its_listener_was_alone_at_its_first_piece() -> None:
    arrivals = [(0.0, 0.4, False), (0.0, 0.1, False), (0.4, 1.5, False), (0.5, 1.5, True)]
    joined = StartGaps()
    listener = _lone_listener()
    listener.is_alone = itertools.chain([True], itertools.repeat(False)).__next__  # another stream came after the first piece
    await _read_with_arrivals(_pipeline(0.0, joined, listener), arrivals)
    assert len(joined._alone_gaps) == 1 and joined.high_s(alone=True) >= 0.3  # a lone listener now may be joined too
    beside = StartGaps()
    listener = _lone_listener()
    listener.is_alone = itertools.chain([False], itertools.repeat(True)).__next__  # the other stream had left
    await _read_with_arrivals(_pipeline(0.0, beside, listener), arrivals)
    assert len(beside._gaps) == 1 and not beside._alone_gaps


async def test_an_error_or_the_end_is_never_held() -> None:
    output: asyncio.Queue[Any] = asyncio.Queue()
    received: list[Any] = []
    reader = asyncio.create_task(_received(_pipeline(10.0), output, received))
    first = _piece(0.128, is_last=True)
    output.put_nowait(first)
    await asyncio.sleep(0.05)
    output.put_nowait(_DONE)
    await asyncio.wait_for(reader, 5)
    assert received == [first, _DONE]


async def test_a_listener_alone_on_a_mesh_slower_than_real_time_holds_what_lets_it_play_to_the_end() -> None:
    admission = RealtimeAdmission(lambda: 0.75, lambda: 0, 1.0)  # 0.75 audio s per s: slower than real time
    listener = Listener("a", 8.0)
    admission.add(listener)
    assert listener.start_buffer_s() == 2.0  # (1 - 0.75) x 8 s: it then plays 8 s while the mesh makes the other 6
    output: asyncio.Queue[Any] = asyncio.Queue()
    received: list[Any] = []
    reader = asyncio.create_task(_received(_pipeline(0.05, listener=listener), output, received))
    pieces = [_piece(0.6) for _ in range(4)]
    for piece in pieces[:3]:
        output.put_nowait(piece)
    await asyncio.sleep(0.3)
    assert received == []  # 1.8 s held, past any step lead: still short of what it must hold
    output.put_nowait(pieces[3])
    await _until_received(received, 4, 1)
    assert received == pieces
    output.put_nowait(_DONE)
    await reader


async def test_a_short_utterance_is_never_held_past_its_end() -> None:
    admission = RealtimeAdmission(lambda: 0.5, lambda: 0, 0.9)
    listener = Listener("a", 30.0)  # the estimate was long; the text was short
    admission.add(listener)
    output: asyncio.Queue[Any] = asyncio.Queue()
    received: list[Any] = []
    reader = asyncio.create_task(_received(_pipeline(0.05, listener=listener), output, received))
    only = _piece(1.0, is_last=True)
    output.put_nowait(only)
    output.put_nowait(_DONE)
    await reader
    assert received == [only, _DONE]


async def _read_with_arrivals(pipeline: UtterancePipeline, arrivals: list[tuple[float, float, bool]] | list[tuple[float, float, bool, bool]]) -> None:
    """Run the pipeline's reader over vocoder pieces of sentence 0 that come at the given times after
    the first: (time, seconds of audio, last of the sentence[, more of the same step follows]).

    Times count from when the reader took the first piece (it has by the time it asks for the next),
    so a loop that wakes late on a busy machine only lengthens the waits, never shortens them."""

    async def pieces(_vocoder: Any) -> Any:
        loop = asyncio.get_running_loop()
        first_taken: float | None = None
        for at_s, seconds, is_last, *continues in arrivals:
            if first_taken is not None:
                await asyncio.sleep(max(0.0, first_taken + at_s - loop.time()))
            samples = np.zeros(round(seconds * RATE_HZ), np.float32)
            yield Samples(0, samples, RATE_HZ, is_last, "m", bool(continues and continues[0])), None
            if first_taken is None:
                first_taken = loop.time()

    pipeline._pieces = pieces  # type: ignore[method-assign]
    pipeline._meta[0] = SentenceMeta(text="t", phonemes="t", frame_count=1, phoneme_frames=(1,))
    await pipeline._read(None, SimpleNamespace(hop_length=256), asyncio.Queue())  # type: ignore[arg-type]


async def test_the_wait_a_first_piece_must_outlast_counts_the_third_piece_too() -> None:
    """The second piece comes at once, the third 0.4 s after the first with 0.1 s of audio between:
    the first piece had to last 0.3 s (0.4 less the second's 0.1), which the second's gap misses."""
    gaps = StartGaps()
    await _read_with_arrivals(_pipeline(0.0, gaps), [(0.0, 0.4, False), (0.0, 0.1, False), (0.4, 1.5, False), (0.5, 1.5, True)])
    assert len(gaps._gaps) == 1  # one start, timed up to its third piece
    assert gaps.high_s() >= 0.3


async def test_a_short_first_sentence_is_timed_to_its_end() -> None:
    gaps = StartGaps()
    await _read_with_arrivals(_pipeline(0.0, gaps), [(0.0, 0.4, False), (0.2, 0.3, True)])
    assert len(gaps._gaps) == 1 and gaps.high_s() >= 0.2


async def test_the_waits_between_a_sentences_pieces_are_kept_for_admission() -> None:
    pipeline = _pipeline(0.0)
    await _read_with_arrivals(pipeline, [(0.0, 0.4, False), (0.0, 0.1, False), (0.4, 1.5, False), (0.5, 1.5, True)])
    waits = sorted(pipeline._pool.piece_gaps._gaps)
    assert len(waits) == 3  # the three pieces after the first, each timed from the one before
    assert waits[0] < 0.05 and 0.08 <= waits[1] < 0.2 and 0.35 <= waits[2] < 0.5
    assert pipeline._pool.piece_gaps.high_s() == waits[2]


# A first piece of 0.14 s; the second step (0.76 s) in four parts as each was made; the third step
# whole at 1.5 s, late: 0.9 s of audio came before it; then the sentence's last piece.
PARTS = [(0.0, 0.14, False, False), (0.10, 0.19, False, True), (0.12, 0.19, False, True), (0.14, 0.19, False, True),
         (0.16, 0.19, False, False), (1.5, 1.49, False, False), (1.6, 1.0, True, False)]  # fmt: skip


async def test_the_parts_of_a_step_are_one_piece_of_a_start() -> None:
    """Timed to the third step, not the third part: the third step came 0.6 s after the first piece's
    audio and the second step's had run out."""
    gaps = StartGaps()
    await _read_with_arrivals(_pipeline(0.0, gaps), PARTS)
    assert len(gaps._gaps) == 1 and gaps.high_s() >= 0.55  # counted by parts, it was timed to 0.12 s: 0


async def test_the_waits_between_steps_not_between_parts_are_kept_for_admission() -> None:
    pipeline = _pipeline(0.0)
    await _read_with_arrivals(pipeline, PARTS)
    waits = sorted(pipeline._pool.piece_gaps._gaps)
    # From the first piece to the second step's first part, from its last part to the third step, to the last.
    assert len(waits) == 3
    assert 0.08 <= waits[0] <= waits[1] < 1.0 and waits[2] >= 1.25  # loose above: a slow machine's loop wakes late
