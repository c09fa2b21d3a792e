"""The real-time benchmark's sums: streams run one after another count their audio over the time they took together."""

from __future__ import annotations

import time

from bench.measure import OK, RequestResult
from bench.realtime import Outcome, one_after_another, waited_note

RUN_S = 0.05


def _one_stream() -> RequestResult:
    """A stream of 1 s of audio that takes RUN_S, timed from its own start as every run is."""
    time.sleep(RUN_S)
    return RequestResult(index=0, status=OK, ttfa_s=0.01, total_s=RUN_S, audio_s=1.0, audio_bytes=44100, text_chars=10)


def test_streams_one_after_another_are_timed_on_one_clock() -> None:
    results = one_after_another(_one_stream, 3)
    starts = [result.started_s for result in results]
    assert starts == sorted(starts) and starts[1] >= RUN_S and starts[2] >= 2 * RUN_S
    outcome = Outcome.of(results)
    # 3 audio seconds over at least 3 x RUN_S; each timed from zero it would read as over one RUN_S (60 per s).
    assert outcome.audio_s_per_s <= 3.0 / (3 * RUN_S) + 1e-9
    assert outcome.served == 3 and outcome.stalled == 0


def test_a_row_notes_the_waits_for_room_between_two_readings_and_nothing_when_none_waited() -> None:
    before = {"admitted": 3.0, "refused": 1.0}
    assert waited_note(before, {"admitted": 8.0, "refused": 3.0}) == "; 7 waited for room, 5 of them admitted"
    assert waited_note(before, dict(before)) == ""
