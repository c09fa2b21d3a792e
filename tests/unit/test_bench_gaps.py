"""The listener replay of `bench.gaps`: a player that starts with the first vocoder step's audio and
waits whenever the next step is not done yet names the step it waited for."""

from __future__ import annotations

import pytest

from bench.gaps import SERVER, SYNTHESIZE, Step, listener_gaps, replay, step_audio_frames, steps_by_trace
from bench.measure import RequestResult
from libs.telemetry import tracing
from tests.support.otlp import ExportedSpan

FRAME_S = 0.01
LAG = 20


def _step(sentence: int, units: float, start_s: float, end_s: float) -> Step:
    return Step(tracing.SPAN_VOCODER_STEP, b"t", start_s, end_s, sentence, units, "urgent", 0.0, 0.0, 0.01, False)


def test_a_steps_audio_is_its_frames_less_the_lag_at_a_sentences_start_and_plus_it_at_its_end() -> None:
    steps = [_step(0, 32, 0, 1), _step(0, 64, 1, 2), _step(1, 32, 2, 3), _step(1, 32, 3, 4)]
    assert step_audio_frames(steps, LAG) == [12, 84, 12, 52]
    assert step_audio_frames([_step(0, 50, 0, 1)], LAG) == [50]  # a sentence of one step gives all of it


def test_steps_done_before_the_audio_runs_out_leave_no_gap() -> None:
    # First audio at 0.1 s gives 0.12 s; the next (0.64 s) comes at 0.2 s, then 0.64 s more at 0.8 s.
    steps = [_step(0, 32, 0.0, 0.1), _step(0, 64, 0.1, 0.2), _step(0, 64, 0.3, 0.8)]
    assert listener_gaps(steps, FRAME_S, LAG) == []


def test_the_gap_names_the_step_that_came_late_and_how_long_the_listener_waited() -> None:
    late = _step(0, 64, 0.5, 1.3)
    steps = [_step(0, 32, 0.0, 0.1), _step(0, 32, 0.1, 0.15), late, _step(0, 64, 1.3, 1.4)]
    # 0.12 s from 0.1 s, then 0.32 s: dry at 0.54 s until the third step is done at 1.3 s.
    (gap,) = listener_gaps(steps, FRAME_S, LAG)
    assert gap.step == late and gap.index == 2
    assert gap.dry_s == pytest.approx(0.54) and gap.length_s == pytest.approx(0.76)
    # Steps given out of order are replayed in the order they started; a short wait is no gap.
    assert listener_gaps(list(reversed(steps)), FRAME_S, LAG) == [gap]
    assert listener_gaps(steps, FRAME_S, LAG, bar_s=1.0) == []


def test_a_span_that_is_not_a_model_step_is_none() -> None:
    assert Step.of(_exported(tracing.SPAN_CACHE_LOOKUP)) is None
    step = Step.of(_exported(tracing.SPAN_VOCODER_STEP))
    assert step is not None and step.units == 64 and step.lane == "urgent" and step.slack_s == -0.25


def _exported(name: str, trace: bytes = b"t", start_s: float = 10.0, kind: int = 1) -> ExportedSpan:
    attributes = {
        tracing.ATTR_SENTENCE_INDEX: 1,
        tracing.ATTR_STEP_UNITS: 64.0,
        tracing.ATTR_STEP_LANE: "urgent",
        tracing.ATTR_STEP_QUEUED_S: 0.01,
        tracing.ATTR_STEP_SLACK_S: -0.25,
        tracing.ATTR_STEP_CPU_S: 0.02,
        tracing.ATTR_STEP_STARTING: False,
    }
    return ExportedSpan("vocoder", "z", name, kind, trace, b"s", b"p", attributes, start_s, start_s + 0.1)


def test_only_client_requests_after_the_burst_began_are_replayed() -> None:
    early = _exported(tracing.SPAN_VOCODER_STEP)
    late = _exported(tracing.SPAN_VOCODER_STEP, trace=b"u", start_s=20.0)
    unheard = _exported(tracing.SPAN_VOCODER_STEP, trace=b"w", start_s=20.0)  # prewarming: no Synthesize call
    calls = [_exported(SYNTHESIZE, trace=trace, kind=SERVER) for trace in (b"t", b"u")]
    spans = [early, late, unheard, *calls]
    assert set(steps_by_trace(spans, since_s=15.0)) == {b"u"}
    assert set(steps_by_trace(spans)) == {b"t", b"u"}


def test_a_bursts_replay_takes_the_frame_length_from_the_clients_audio_and_names_each_late_step() -> None:
    def step(trace: bytes, units: float, start_s: float, end_s: float) -> ExportedSpan:
        attributes = {tracing.ATTR_SENTENCE_INDEX: 0, tracing.ATTR_STEP_UNITS: units, tracing.ATTR_STEP_LANE: "background"}
        return ExportedSpan("vocoder", "z", tracing.SPAN_VOCODER_STEP, 1, trace, b"s", b"p", attributes, start_s, end_s)

    spans = [
        _exported(SYNTHESIZE, trace=b"a", kind=SERVER),
        _exported(SYNTHESIZE, trace=b"b", kind=SERVER),
        # a: 100 frames, then 100 more before the first run out; b: its second step comes 2 s late.
        step(b"a", 100, 10.0, 10.1), step(b"a", 100, 10.1, 10.2),
        step(b"b", 100, 10.0, 10.1), step(b"b", 100, 10.1, 10.1 + 2.0 + 0.8),
    ]
    # 400 frames made, 4 s heard by the clients: a frame is 0.01 s, so b's first step (less the lag of
    # 21 frames) lasts 0.79 s, and b waits 2.01 s for its second.
    results = [RequestResult(index, "OK", 0.1, 3.0, 2.0, 0, 10) for index in range(2)]
    found = replay(spans, results, since_s=9.0, label="burst 1")
    assert (found.listeners, found.gapped) == (2, 1)
    assert found.longest_s == pytest.approx(2.01)
    assert found.details[0].startswith("burst 1, listener 62") and "background lane" in found.details[1]
    # Had the gateway sent b's first audio 1 s after b asked (at 11.0 s, its first piece held), b would
    # play from there: 0.79 s of audio lasts to 11.79 s, and it waits 1.11 s for the step done at 12.9 s.
    held = ExportedSpan("gateway", "z", SYNTHESIZE, SERVER, b"b", b"s", b"", {tracing.ATTR_TIME_TO_FIRST_AUDIO_S: 1.0}, 10.0, 13.0)
    found = replay([span for span in spans if span.trace_id != b"b" or span.name != SYNTHESIZE] + [held], results, 9.0, "burst 1")
    assert found.gapped == 1 and found.longest_s == pytest.approx(1.11)


def test_a_listener_whose_first_piece_was_held_starts_later_and_holds_more() -> None:
    # As above, but the gateway sent the first audio at 0.5 s (it held the first piece to outlast the
    # wait for the next): the first two steps' 0.44 s of audio run out at 0.94 s, so the listener waits
    # 0.36 s for the third (done at 1.3 s) instead of 0.76 s.
    late = _step(0, 64, 0.5, 1.3)
    steps = [_step(0, 32, 0.0, 0.1), _step(0, 32, 0.1, 0.15), late, _step(0, 64, 1.3, 1.4)]
    (gap,) = listener_gaps(steps, FRAME_S, LAG, plays_from_s=0.5)
    assert gap.step == late and gap.length_s == pytest.approx(0.36)
    assert listener_gaps(steps, FRAME_S, LAG, plays_from_s=1.0) == []  # held long enough: no gap at all
