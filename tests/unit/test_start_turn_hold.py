"""A stream's turn to start goes to the next once its listener holds enough audio to outlast that
stream's start: what a first audio takes on the workers now, then its own wait for its next piece."""

from __future__ import annotations

from libs.synthesis.pipeline import UtterancePipeline
from libs.upstream.playback import START_HOLD_COVER, PlaybackClock, StartSlots
from tests.support.pipelines import bare_pipeline

FIRST_AUDIO_S = 0.4
WAIT_S = 0.3
HOLD_S = START_HOLD_COVER * (FIRST_AUDIO_S + WAIT_S)


class _Pool:
    """Only what the turn reads: the turns, and the workers' first audio and piece wait now."""

    def __init__(self, first_audio_s: float, wait_s: float | None) -> None:
        self.starts = StartSlots(lambda: 4.0)  # one turn
        self._first_audio_s = first_audio_s
        self._wait_s = wait_s
        self.asked_ids: list[int] = []

    def first_audio_s(self, phoneme_ids: int) -> float:
        self.asked_ids.append(phoneme_ids)
        return self._first_audio_s

    def start_hold_wait_s(self) -> float | None:
        return self._wait_s


class _Clock:
    def __init__(self) -> None:
        self.now_s = 100.0

    def __call__(self) -> float:
        return self.now_s


async def _starting(
    first_audio_s: float = FIRST_AUDIO_S, wait_s: float | None = WAIT_S, start_last: int = 0
) -> tuple[UtterancePipeline, _Pool]:
    pool = _Pool(first_audio_s, wait_s)
    pipeline = bare_pipeline(pool)
    await pool.starts.take()
    pipeline._starting = True
    pipeline._start_last = start_last
    pipeline._sentence_ids[0] = 57
    return pipeline, pool


async def test_the_turn_passes_once_the_listener_holds_what_the_next_start_takes() -> None:
    pipeline, pool = await _starting()
    now = _Clock()
    clock = PlaybackClock(256 / 22050, now=now)
    clock.delivered(0.2)
    pipeline._pass_turn_when_held(0, clock)
    assert pool.starts.starting == 1  # 0.2 s would run out during the next start
    now.now_s += 0.1
    clock.delivered(HOLD_S)  # what is left of the first piece and all of this one
    pipeline._pass_turn_when_held(0, clock)
    assert clock.buffered_s() >= HOLD_S and pool.starts.starting == 0
    assert pool.asked_ids[-1] == 57  # the next start is taken to be as long as this one's first sentence
    pipeline._pass_turn_when_held(0, clock)
    assert pool.starts.starting == 0  # given back once


async def test_the_turn_is_held_while_the_listener_plays_down_what_it_holds() -> None:
    pipeline, pool = await _starting()
    now = _Clock()
    clock = PlaybackClock(256 / 22050, now=now)
    clock.delivered(HOLD_S + 0.05)
    now.now_s += 0.1  # it played 0.1 s before this piece came
    clock.delivered(0.0)
    pipeline._pass_turn_when_held(0, clock)
    assert clock.buffered_s() < HOLD_S and pool.starts.starting == 1


async def test_without_the_workers_costs_the_turn_waits_for_the_started_pieces() -> None:
    pipeline, pool = await _starting(first_audio_s=0.0)  # the workers have not said what a first audio takes
    clock = PlaybackClock(256 / 22050, now=_Clock())
    clock.delivered(60.0)
    pipeline._pass_turn_when_held(0, clock)
    assert pool.starts.starting == 1


async def test_until_a_start_beside_others_is_seen_the_turn_waits_for_the_started_pieces() -> None:
    pipeline, pool = await _starting(wait_s=None)  # only lone starts seen: what a start costs the others is not known
    clock = PlaybackClock(256 / 22050, now=_Clock())
    clock.delivered(60.0)
    pipeline._pass_turn_when_held(0, clock)
    assert pool.starts.starting == 1


async def test_an_openings_turn_waits_for_the_rest_of_its_sentence() -> None:
    pipeline, pool = await _starting(start_last=1)  # the first sentence is an opening: its rest's plan is the start's work too
    clock = PlaybackClock(256 / 22050, now=_Clock())
    clock.delivered(60.0)
    pipeline._pass_turn_when_held(0, clock)
    assert pool.starts.starting == 1
    pipeline._pass_turn_when_held(1, clock)
    assert pool.starts.starting == 0
