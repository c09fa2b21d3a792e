"""Deadline scheduling, the listener's clock, the player's stalls and worker admission, without a network."""

from __future__ import annotations

import asyncio
import functools
import os
import threading
import time
from pathlib import Path

import pytest

from bench.measure import playback_stalls
from libs.scheduling.costs import StepEstimate
from libs.scheduling.executor import BACKGROUND_NICE, FIRST_AUDIO_NICE, UPSTREAM_URGENT_NICE, DeadlineExecutor
from libs.scheduling.stream import DEFAULT_VOCODER_LAG_FRAMES, StreamPlayback, VocoderPacing
from libs.serving.admission import AdmissionSettings, refusal_reason
from libs.serving.worker import WorkerSettings, inference_executor
from libs.synthesis.lookahead import Lookahead
from libs.upstream.playback import PlaybackClock


def _run_order(
    by_deadline: bool,
    deadlines: list[float],
    first_audio: frozenset[int] = frozenset(),
    estimates: dict[int, StepEstimate] | None = None,
) -> list[int]:
    """Submit calls with `deadlines` (those whose index is in `first_audio` marked so, with the
    `estimates` given by index) while the only thread is busy; the order they ran in."""
    executor = DeadlineExecutor(1, by_deadline=by_deadline)
    gate = threading.Event()
    ran: list[int] = []
    estimates = estimates or {}
    try:
        blocker = executor.submit(gate.wait)
        futures = [
            executor.submit_by(
                deadline, ran.append, index, first_audio=index in first_audio, estimate=estimates.get(index, StepEstimate())
            )
            for index, deadline in enumerate(deadlines)
        ]
        gate.set()
        blocker.result(5)
        for future in futures:
            future.result(5)
    finally:
        executor.shutdown()
    return ran


def test_the_waiting_call_with_the_earliest_deadline_runs_first() -> None:
    now = time.monotonic()
    assert _run_order(True, [now + 3.0, now + 1.0, now + 2.0, now + 1.0]) == [1, 3, 2, 0]


def test_the_call_that_must_start_first_runs_first_not_the_one_due_first() -> None:
    now = time.monotonic()
    long_step = StepEstimate(cpu_s=0.5, wall_s=0.6, lead_s=1.5)  # due later, but must start 1.5 s before
    assert _run_order(True, [now + 1.0, now + 2.0], estimates={1: long_step}) == [1, 0]


def test_arrival_order_ignores_deadlines() -> None:
    now = time.monotonic()
    assert _run_order(False, [now + 3.0, now + 1.0, now + 2.0]) == [0, 1, 2]


def test_a_call_cancelled_while_waiting_never_runs_and_others_do() -> None:
    executor = DeadlineExecutor(1)
    gate = threading.Event()
    ran: list[str] = []
    try:
        blocker = executor.submit(gate.wait)
        dropped = executor.submit_by(0.0, ran.append, "dropped")
        kept = executor.submit_by(1.0, ran.append, "kept")
        assert dropped.cancel()
        gate.set()
        blocker.result(5)
        kept.result(5)
    finally:
        executor.shutdown()
    assert ran == ["kept"]


def test_an_error_reaches_its_caller_and_the_busy_time_is_reported() -> None:
    busy: list[tuple[bool, float, float]] = []
    executor = DeadlineExecutor(2, on_run=lambda *ran: busy.append(ran))
    try:
        with pytest.raises(ZeroDivisionError):
            executor.submit(lambda: 1 / 0).result(5)
        assert executor.submit(time.sleep, 0.05).result(5) is None
    finally:
        executor.shutdown()
    assert len(busy) == 2
    normal_priority, wall_s, cpu_s = busy[1]
    assert normal_priority and wall_s >= 0.05 and cpu_s < wall_s / 2  # asleep: on the clock, not on a core
    assert executor.completed == 2


def test_busy_time_is_counted_before_the_caller_sees_the_result() -> None:
    # Whatever a caller does when its call returns comes after the call is counted.
    busy: list[tuple[bool, float, float]] = []
    executor = DeadlineExecutor(1, on_run=lambda *ran: busy.append(ran))
    try:
        gate = threading.Event()
        executor.submit(gate.wait)
        seen_when_done: list[int] = []
        future = executor.submit(time.sleep, 0.01)
        future.add_done_callback(lambda _: seen_when_done.append(len(busy)))
        gate.set()
        future.result(5)
    finally:
        executor.shutdown()
    assert seen_when_done == [2]  # the gate's call and its own


def test_a_request_deadline_moves_on_by_the_audio_each_step_makes() -> None:
    deadline = StreamPlayback.opening(first_audio=False).deadline(100.0, 250.0)
    assert deadline.at_s == pytest.approx(100.25)
    deadline.advance(0.5)
    assert deadline.at_s == pytest.approx(100.75)
    assert StreamPlayback.opening(first_audio=False).deadline(100.0, -50.0).at_s == pytest.approx(99.95)  # overdue already


def test_first_audios_go_before_playing_listeners_unless_one_is_about_to_run_dry() -> None:
    # "About to run dry": its step must start before the waiting first audio's step could finish.
    now = time.monotonic()
    step = StepEstimate(cpu_s=0.04, wall_s=0.05, lead_s=0.12)
    first = StepEstimate(cpu_s=0.08, wall_s=0.1, lead_s=0.1)
    names = ["well buffered", "first audio, waited 0.5 s", "about to run dry", "first audio, waited 0.2 s"]
    order = _run_order(
        True, [now + 2.0, now - 0.5, now + 0.15, now - 0.2], first_audio=frozenset({1, 3}),
        estimates={0: step, 1: first, 2: step, 3: first},
    )  # fmt: skip
    assert [names[index] for index in order] == [
        "about to run dry", "first audio, waited 0.5 s", "first audio, waited 0.2 s", "well buffered"
    ]  # fmt: skip
    # A listener whose step can start after the first audio's has run lets it go first.
    cheap = StepEstimate(cpu_s=0.001, wall_s=0.001, lead_s=0.001)
    order = _run_order(True, [now + 2.0, now - 0.5], first_audio=frozenset({1}), estimates={0: cheap, 1: first})
    assert order == [1, 0]


def test_a_stream_is_due_by_the_audio_made_since_its_first_audio_not_since_it_asked() -> None:
    playback = StreamPlayback.opening(first_audio=True)
    first = playback.deadline(100.0, -50.0)  # asked 50 ms before its request arrived
    assert first.first_audio and first.at_s == pytest.approx(99.95)
    first.advance(0.128, done_s=101.0)  # the first audio came a second late: the listener starts then
    assert not first.first_audio
    assert first.at_s == pytest.approx(101.128)
    # The gateway measured this request's slack before the listener started: "overdue" by then.
    later = playback.deadline(101.05, -100.0)
    assert later.at_s == pytest.approx(101.128)
    later.advance(0.5)
    assert later.at_s == pytest.approx(101.628)
    # A slack longer than the audio made here (audio that reached the listener another way) counts.
    assert playback.deadline(101.05, 2000.0).at_s == pytest.approx(103.05)


def test_the_audio_made_here_is_due_earlier_by_what_follows_the_step() -> None:
    # An acoustic chunk is heard only after the vocoder's step and the hops: 150 ms, which the gateway
    # took off the slack. The worker's own view of the listener (the audio made since its first) must
    # take them off too, or a chunk is scheduled as if it were heard the moment it is made.
    playback = StreamPlayback.opening(first_audio=True)
    playback.deadline(100.0, 0.0).advance(0.87, done_s=100.0)
    later = playback.deadline(100.2, -300.0, downstream_ms=150.0)  # slack measured before the listener started
    assert later.at_s == pytest.approx(100.72)
    assert playback.deadline(100.2, -300.0).at_s == pytest.approx(100.87)  # nothing follows: as before


def test_a_resumed_stream_is_a_playing_listener_and_a_new_one_is_due_when_it_asked() -> None:
    resumed = StreamPlayback.opening(first_audio=False).deadline(100.0, 250.0)
    assert not resumed.first_audio and resumed.at_s == pytest.approx(100.25)
    new = StreamPlayback.opening(first_audio=True).deadline(100.0, 0.0)
    assert new.first_audio and new.at_s == 100.0


def _lane_of_call() -> tuple[str, int]:
    return threading.current_thread().name, os.getpriority(os.PRIO_PROCESS, threading.get_native_id())


def _policy_of_call() -> tuple[str, int, int]:
    """The calling thread's name, nice value and scheduling policy."""
    return *_lane_of_call(), os.sched_getscheduler(0)


@functools.cache
def _idle_or_nice() -> int:
    """The policy a background thread asking for the idle one gets here: the idle policy, or where the
    kernel refuses it (a sandbox may), the normal policy, at nice 19. Asked of the kernel once, by a
    thread of its own, when a test first needs it."""
    if not hasattr(os, "SCHED_IDLE"):
        return os.SCHED_OTHER
    allowed: list[bool] = []

    def move() -> None:
        try:
            os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
            allowed.append(os.sched_getscheduler(0) == os.SCHED_IDLE)
        except OSError:
            allowed.append(False)

    thread = threading.Thread(target=move)
    thread.start()
    thread.join()
    return os.SCHED_IDLE if allowed[0] else os.SCHED_OTHER


def test_with_lanes_what_can_wait_runs_at_a_lower_os_priority_and_urgent_work_never_waits_for_it() -> None:
    base_nice = os.getpriority(os.PRIO_PROCESS, 0)
    executor = DeadlineExecutor(1, urgent_threads=1)
    gate = threading.Event()
    try:
        now = time.monotonic()
        later = executor.submit_by(now + 5.0, _lane_of_call)
        first = executor.submit_by(now, _lane_of_call, first_audio=True)
        assert "urgent" not in later.result(5)[0] and later.result(5)[1] == min(19, base_nice + BACKGROUND_NICE)
        assert "urgent" in first.result(5)[0] and first.result(5)[1] == base_nice
        policies = executor.submit_by(now + 5.0, _policy_of_call), executor.submit_by(time.monotonic(), _policy_of_call, first_audio=True)
        assert [policy.result(5)[2] for policy in policies] == [os.SCHED_OTHER, os.SCHED_OTHER]  # nice 19 by default, not idle
        # The urgent thread is busy; a call that would be late at the background priority (0.1 s of
        # CPU, ten times that there, due in 0.4 s) waits for it rather than run on the background thread.
        busy = executor.submit_by(time.monotonic(), gate.wait, first_audio=True)
        due_soon = StepEstimate(cpu_s=0.1, wall_s=0.1, lead_s=0.1, background_wall_s=1.0)
        due_now = executor.submit_by(time.monotonic() + 0.4, _lane_of_call, estimate=due_soon)
        time.sleep(0.1)
        assert not due_now.done()
        gate.set()
        busy.result(5)
        assert "urgent" in due_now.result(5)[0]
    finally:
        gate.set()
        executor.shutdown()


@pytest.mark.parametrize("background_priority", ["idle", "nice"])
def test_the_background_lane_runs_at_the_idle_policy_or_at_nice_19_as_set_and_no_lanes_at_neither(background_priority: str) -> None:
    base_nice = os.getpriority(os.PRIO_PROCESS, 0)
    settings = WorkerSettings(urgent_threads=1, first_audio_threads=1, background_priority=background_priority)
    executor = inference_executor(settings)
    plain = inference_executor(WorkerSettings(urgent_threads=0, first_audio_threads=0, background_priority=background_priority))
    try:
        name, nice, policy = executor.submit_by(time.monotonic() + 60.0, _policy_of_call).result(5)
        assert "background" in name and nice == min(19, base_nice + BACKGROUND_NICE)
        assert policy == (_idle_or_nice() if background_priority == "idle" else os.SCHED_OTHER)
        # The other lanes stay at the normal policy.
        assert executor.submit_by(time.monotonic(), _policy_of_call, first_audio=True).result(5)[2] == os.SCHED_OTHER
        # Without lanes the one pool runs everything, listeners' due steps included: at the normal policy.
        assert plain.submit(_policy_of_call).result(5)[1:] == (base_nice, os.SCHED_OTHER)
    finally:
        executor.shutdown()
        plain.shutdown()


@pytest.mark.parametrize("urgent_threads", [0, 1])
def test_a_nan_deadline_runs_as_due_now_and_never_wedges_the_pool(urgent_threads: int) -> None:
    executor = DeadlineExecutor(1, urgent_threads=urgent_threads)
    try:
        assert executor.submit_by(float("nan"), lambda: "ran").result(5) == "ran"
        assert executor.submit_by(time.monotonic(), lambda: "after").result(5) == "after"
    finally:
        executor.shutdown()


def test_a_deadline_years_away_does_not_stop_the_urgent_threads() -> None:
    executor = DeadlineExecutor(1, urgent_threads=1)
    gate = threading.Event()
    try:
        running = threading.Event()
        executor.submit_by(time.monotonic() + 10.0, lambda: (running.set(), gate.wait()))  # the background thread
        assert running.wait(5)
        far = executor.submit_by(time.monotonic() + 1e30, lambda: "far")  # an urgent thread now sleeps until it nears
        time.sleep(0.1)
        assert executor.submit_by(time.monotonic(), lambda: "urgent").result(5) == "urgent"
        gate.set()
        assert far.result(5) == "far"
    finally:
        gate.set()
        executor.shutdown()


def test_a_request_with_a_slack_that_is_not_a_number_is_refused() -> None:
    from libs.wire.errors import InvalidRequestError

    for bad in (float("nan"), float("inf"), float("-inf")):
        with pytest.raises(InvalidRequestError, match="playback_slack_ms is"):
            StreamPlayback.opening(first_audio=True).deadline(100.0, bad)
    for bad in (float("nan"), float("inf"), -1.0):
        with pytest.raises(InvalidRequestError, match="downstream_ms is"):
            StreamPlayback.opening(first_audio=True).deadline(100.0, 0.0, bad)


def test_a_call_becomes_urgent_as_its_deadline_nears() -> None:
    # With the background thread busy, a call that the background priority would still serve in time
    # runs on the urgent thread once it would not (0.5 s - 0.31 s), without any other call waking the pool.
    executor = DeadlineExecutor(1, urgent_threads=1)
    gate = threading.Event()
    try:
        running = threading.Event()
        background = executor.submit_by(time.monotonic() + 10.0, lambda: (running.set(), gate.wait()))
        assert running.wait(5)
        started = time.monotonic()
        soon = executor.submit_by(
            started + 0.5, _lane_of_call, estimate=StepEstimate(cpu_s=0.03, wall_s=0.03, lead_s=0.03, background_wall_s=0.31)
        )
        name, _ = soon.result(5)
        assert "urgent" in name and time.monotonic() - started >= 0.15
    finally:
        gate.set()
        background.result(5)
        executor.shutdown()


class FakeTime:
    def __init__(self) -> None:
        self.now_s = 1000.0

    def __call__(self) -> float:
        return self.now_s


def test_the_listener_clock_counts_its_buffer_and_the_audio_queued_before_a_request() -> None:
    now = FakeTime()
    clock = PlaybackClock(frame_s=0.01, now=now)
    # Before the first audio every request is wanted now, except what plays after earlier audio.
    assert clock.slack_ms(0) == 0.0
    now.now_s += 0.1  # a first audio not there yet is overdue by the listener's wait
    assert clock.slack_ms(0) == pytest.approx(-100.0)
    now.now_s -= 0.1
    clock.note_sentence(0, 300)  # 3 s
    assert clock.slack_ms(1) == pytest.approx(3000.0)
    assert clock.slack_ms(0, 100) == pytest.approx(1000.0)
    # Mel slices carry the audio of frames 21 earlier (the vocoder's lag).
    assert clock.vocoder_slack_ms(0, 121) == pytest.approx(1000.0)
    assert clock.vocoder_slack_ms(0, 10) == 0.0
    clock.delivered(0.5)
    now.now_s += 0.2
    assert clock.buffered_s() == pytest.approx(0.3)
    # Sentence 1 starts after 2.5 s more of sentence 0, and the listener holds 0.3 s.
    assert clock.slack_ms(1) == pytest.approx(2800.0)
    now.now_s += 1.0  # ran dry 0.7 s ago: a stall, the buffer is empty and its next audio overdue
    assert clock.buffered_s() == 0.0
    assert clock.slack_ms(0, 50) == pytest.approx(-700.0)
    clock.delivered(0.4)
    assert clock.buffered_s() == pytest.approx(0.4)  # playback resumes from the new audio


def test_a_player_stalls_only_when_its_buffer_runs_dry_before_the_end() -> None:
    # 1 s of audio at t=0, then 1 s at t=0.5 (in time), then 1 s at t=2.3 (0.3 s late), end.
    assert playback_stalls([(0.0, 1.0), (0.5, 1.0), (2.3, 1.0)]) == pytest.approx((0.3, 0.3))
    # Two stalls of 0.2 and 0.4 s.
    assert playback_stalls([(10.0, 0.1), (10.3, 0.1), (10.8, 0.1)]) == pytest.approx((0.6, 0.4))
    assert playback_stalls([(5.0, 2.0)]) == (0.0, 0.0)
    assert playback_stalls([]) == (0.0, 0.0)


def _reason(
    open_streams: int, capacity: float, headroom: float = 0.9, behind_s: float = 0.0, step_s: float = 0.0, listening: bool = False,
    max_streams: int = 0,
) -> str | None:
    settings = AdmissionSettings(max_streams=max_streams, max_queue_depth=0, realtime_headroom=headroom)
    return refusal_reason(
        settings, open_streams=open_streams, queue_depth=0, rss_mb=0.0, free_gpu_mb=None, capacity_audio_s_per_s=capacity,
        behind_s=behind_s, step_s=step_s, listening=listening,
    )  # fmt: skip


def test_a_stream_whose_listener_already_hears_it_is_held_to_the_hard_limits_only() -> None:
    assert _reason(5, 10.0, behind_s=0.3, step_s=0.05) is not None  # late: a new stream is refused
    assert _reason(30, 10.0) is not None  # past the overcommit
    assert _reason(5, 10.0, behind_s=0.3, step_s=0.05, listening=True) is None
    assert _reason(30, 10.0, listening=True) is None
    refused = _reason(30, 10.0, listening=True, max_streams=30)
    assert refused is not None and "limit 30" in refused


def test_a_worker_refuses_past_its_overcommit_of_the_real_time_capacity_or_when_it_is_late() -> None:
    # 90% of 10 audio s per s, twice over: 18 streams; the gateway admits by buffers below that.
    assert _reason(17, 10.0) is None
    reason = _reason(18, 10.0)
    assert reason is not None and "19 streams" in reason and "9.0 audio s per s" in reason
    assert _reason(100, 0.0) is None  # capacity unknown yet: only the other limits apply
    assert _reason(100, 30.0, headroom=0.0) is None  # the limit switched off
    # Its most urgent step already later to start than a step takes: the listeners would run dry.
    late = _reason(3, 10.0, behind_s=0.2, step_s=0.05)
    assert late is not None and "200 ms late" in late
    assert _reason(3, 10.0, behind_s=0.02, step_s=0.05) is None
    # A worker with no stream open takes one whatever it says: there is nothing to protect.
    assert _reason(0, 0.1, behind_s=5.0, step_s=0.01) is None


async def test_the_gateway_runs_ahead_while_its_listener_has_little_audio_coming() -> None:
    now = FakeTime()
    clock = PlaybackClock(frame_s=0.01, now=now)
    lookahead = Lookahead(clock, max_sentences=3, audio_ahead_s=5.0, min_sentences=1)
    await asyncio.wait_for(lookahead.wait_turn(0), 1)
    clock.delivered(0.0)  # the first audio reached the listener (past it, the buffer decides)
    clock.note_sentence(0, 300)  # 3 s ahead of sentence 1: it may start while sentence 0 is vocoded
    await asyncio.wait_for(lookahead.wait_turn(1), 1)
    clock.note_sentence(1, 300)  # 6 s ahead of sentence 2: it waits
    waiting = asyncio.ensure_future(lookahead.wait_turn(2))
    await asyncio.sleep(0.05)
    assert not waiting.done()
    clock.delivered(2.0)  # 2 s delivered and 1 s played: 5 s ahead of sentence 2, still not under 5
    now.now_s += 1.0
    lookahead.sentence_vocoded()  # sentence 0 done: one in flight, but the buffer rules
    await asyncio.sleep(0.05)
    assert not waiting.done()
    now.now_s += 0.5  # 4.5 s ahead now: it starts without waiting for another sentence
    await asyncio.wait_for(waiting, 1)
    assert lookahead.vocoded == 1


async def test_the_sentence_after_the_one_being_vocoded_always_starts() -> None:
    clock = PlaybackClock(frame_s=0.01, now=FakeTime())
    lookahead = Lookahead(clock, audio_ahead_s=1.0)
    clock.note_sentence(0, 900)  # 9 s ahead of sentence 1, far past the 1 s: it starts anyway
    await asyncio.wait_for(lookahead.wait_turn(1), 1)
    waiting = asyncio.ensure_future(lookahead.wait_turn(2))
    await asyncio.sleep(0.05)
    assert not waiting.done()
    waiting.cancel()


async def test_the_gateway_never_has_more_sentences_in_flight_than_its_limit() -> None:
    clock = PlaybackClock(frame_s=0.01, now=FakeTime())
    lookahead = Lookahead(clock, max_sentences=2, audio_ahead_s=1000.0, min_sentences=1)
    clock.delivered(0.0)
    await asyncio.wait_for(lookahead.wait_turn(1), 1)
    waiting = asyncio.ensure_future(lookahead.wait_turn(2))
    await asyncio.sleep(0.05)
    assert not waiting.done()
    lookahead.sentence_vocoded()
    await asyncio.wait_for(waiting, 1)


async def test_before_the_first_audio_only_the_minimum_of_sentences_is_in_flight() -> None:
    clock = PlaybackClock(frame_s=0.01, now=FakeTime())
    lookahead = Lookahead(clock, max_sentences=4, audio_ahead_s=5.0, min_sentences=2)
    await asyncio.wait_for(lookahead.wait_turn(1), 1)  # the minimum starts at once
    waiting = asyncio.ensure_future(lookahead.wait_turn(2))
    await asyncio.sleep(0.1)
    assert not waiting.done()  # no audio yet: a third sentence would only compete with the first audio
    clock.delivered(0.1)
    await asyncio.wait_for(waiting, 1)  # the first audio is out: the buffer rules again


def test_the_acoustic_side_counts_the_audio_the_vocoder_can_make_from_its_mel() -> None:
    from libs.voice.chunking import ChunkSchedule

    lag = DEFAULT_VOCODER_LAG_FRAMES
    pacing = VocoderPacing(lag, ChunkSchedule(32, 2.0, 128))  # the vocoder steps through 32, 64, 128, 128, ... frames
    assert pacing.frames_out(31, 1000) == 0  # its first step has not got its mel
    assert pacing.frames_out(32, 1000) == 32 - lag
    # 128 frames in: the second step (to frame 96) ran, the third (to 224) waits for its whole mel.
    assert pacing.frames_out(128, 1000) == 96 - lag
    assert pacing.frames_out(224, 1000) == 224 - lag
    assert pacing.frames_out(300, 300) == 300  # the sentence's last step ends its audio
    # Another vocoder's pacing, as a request carries it: a lag of 10 and steps of 64.
    from libs.pb.tts.common.v1 import load_pb2

    other = VocoderPacing.from_message(load_pb2.VocoderPacing(lag_frames=10, first_step_frames=64, step_growth=1.0, max_step_frames=64))
    assert other.frames_out(128, 1000) == 128 - 10
    # The default vocoder's pacing, as its load report carries it: two steps of 32, then 64 and 128.
    served = VocoderPacing.from_message(
        load_pb2.VocoderPacing(lag_frames=lag, first_step_frames=32, step_growth=2.0, max_step_frames=128, first_steps=2)
    )
    assert served.schedule == VocoderPacing().schedule
    assert served.frames_out(64, 1000) == 64 - lag and served.frames_out(127, 1000) == 64 - lag and served.frames_out(128, 1000) == 128 - lag
    # A request without one (or with nonsense) is paced as the default voice's vocoder.
    assert VocoderPacing.from_message(None) == VocoderPacing.from_message(load_pb2.VocoderPacing(lag_frames=-3)) == VocoderPacing()


def test_a_vocoder_step_is_due_by_where_its_own_audio_starts() -> None:
    playback = StreamPlayback.opening(first_audio=False)
    deadline = playback.deadline(100.0, 500.0)  # the audio of the request's first slice is due at 100.5
    assert deadline.at_offset_s(-0.2) == pytest.approx(100.3)  # a step whose audio starts 0.2 s earlier
    assert deadline.at_offset_s(0.1) == pytest.approx(100.6)
    started = StreamPlayback.opening(first_audio=True)
    early = started.deadline(100.0, -300.0)  # measured before the listener started: overdue
    early.stream.made(0.4, done_s=101.0)
    assert early.at_offset_s(0.0) == pytest.approx(101.4)  # the audio made here lasts until then


def test_a_first_audio_lane_runs_first_audios_beside_the_urgent_work_at_a_priority_between() -> None:
    base_nice = os.getpriority(os.PRIO_PROCESS, 0)
    executor = DeadlineExecutor(1, urgent_threads=1, first_audio_threads=1)
    gate = threading.Event()
    try:
        now = time.monotonic()
        busy = executor.submit_by(now, gate.wait, estimate=StepEstimate(cpu_s=1.0, wall_s=1.0, lead_s=1.0, background_wall_s=10.0))
        first = executor.submit_by(now, _lane_of_call, first_audio=True)  # not behind the urgent thread's call
        name, nice = first.result(5)
        assert "first" in name and nice == min(19, base_nice + FIRST_AUDIO_NICE)
        assert not busy.done()
    finally:
        gate.set()
        executor.shutdown()


def test_an_upstream_workers_urgent_lane_yields_to_the_downstream_ones_and_only_with_lanes() -> None:
    base_nice = os.getpriority(os.PRIO_PROCESS, 0)
    settings = WorkerSettings(urgent_threads=1, first_audio_threads=1)
    upstream, downstream = inference_executor(settings, upstream=True), inference_executor(settings)
    plain = DeadlineExecutor(1, urgent_threads=0, urgent_nice=UPSTREAM_URGENT_NICE)  # no lanes: nothing to yield to
    try:
        for executor, nice in ((upstream, UPSTREAM_URGENT_NICE), (downstream, 0)):
            name, got = executor.submit_by(time.monotonic(), _lane_of_call).result(5)
            assert "urgent" in name and got == min(19, base_nice + nice)
            os_name = executor.submit_by(time.monotonic(), lambda: Path(f"/proc/self/task/{threading.get_native_id()}/comm").read_text())
            assert os_name.result(5).strip() == "urgent_0", "the OS (top -H) sees the lane too"
        assert plain.submit(_lane_of_call).result(5)[1] == base_nice
        with pytest.raises(ValueError, match="urgent_nice"):
            DeadlineExecutor(1, urgent_threads=1, urgent_nice=FIRST_AUDIO_NICE + 1)
    finally:
        for executor in (upstream, downstream, plain):
            executor.shutdown()


def test_the_background_lane_takes_work_that_can_wait_once_the_urgent_top_is_taken() -> None:
    # The urgent thread is busy and an urgent call sits on top of the queue, with one that can wait
    # behind it: when the urgent thread takes its call, the background thread runs the other at once.
    executor = DeadlineExecutor(1, urgent_threads=1)
    gate = threading.Event()
    try:
        busy = executor.submit_by(time.monotonic(), gate.wait, first_audio=True)
        now = time.monotonic()
        urgent = executor.submit_by(
            now + 0.3, lambda: time.sleep(0.5), estimate=StepEstimate(cpu_s=0.1, wall_s=0.1, lead_s=0.1, background_wall_s=1.0)
        )
        later = executor.submit_by(now + 10.0, _lane_of_call)
        time.sleep(0.1)
        assert not later.done()  # the background thread does not pass the urgent top
        gate.set()
        started = time.monotonic()
        assert "urgent" not in later.result(5)[0]
        assert time.monotonic() - started < 0.4  # not after the urgent call's 0.5 s
        busy.result(5)
        urgent.result(5)
    finally:
        gate.set()
        executor.shutdown()


def test_the_background_lane_waits_while_first_audios_wait() -> None:
    # The first-audio thread is busy and another first audio waits behind it: a step that could be made
    # ahead waits too, and the background thread takes it once no first audio is left waiting.
    executor = DeadlineExecutor(1, urgent_threads=1, first_audio_threads=1)
    gate = threading.Event()
    try:
        busy = executor.submit_by(time.monotonic(), gate.wait, first_audio=True)
        waiting = executor.submit_by(time.monotonic(), time.sleep, 0.01, first_audio=True)
        ahead = executor.submit_by(time.monotonic() + 10.0, _lane_of_call)
        time.sleep(0.2)
        assert not ahead.done()
        gate.set()
        assert "background" in ahead.result(5)[0]
        waiting.result(5)
        busy.result(5)
    finally:
        gate.set()
        executor.shutdown()
