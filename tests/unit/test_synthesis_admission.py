"""The gateway's real-time admission: a listener is taken only when every listener keeps playing, and
fairness bites only when the mesh is full."""

from __future__ import annotations

import pytest

from libs.synthesis.admission import (
    DEFAULT_ACTIVE_CLIENT_S,
    MAX_RETRY_AFTER_S,
    MIN_RETRY_AFTER_S,
    Listener,
    RealtimeAdmission,
    keeps_playing,
)
from libs.upstream.playback import PlaybackClock


def test_a_burst_of_new_listeners_fits_up_to_the_capacity() -> None:
    assert keeps_playing([(0.0, 10.0)] * 5, rate=5.0)
    assert not keeps_playing([(0.0, 10.0)] * 6, rate=5.0)


def test_listeners_holding_audio_let_a_new_one_in_above_the_capacity() -> None:
    # Five listeners hold 5 s each and need 5 s more; a sixth, new, needs 10 s. At 5 audio s per s
    # the buffers cover the new one's start: 30 s of audio by t = 10 s, 50 s made by then.
    assert keeps_playing([(5.0, 5.0)] * 5 + [(0.0, 10.0)], rate=5.0)
    # With nothing buffered it would not: six listeners need 6 audio s per s at once.
    assert not keeps_playing([(0.0, 5.0)] * 5 + [(0.0, 10.0)], rate=5.0)
    # Long streams wear the buffers down: ten listeners holding 1 s and needing 60 s each, at 5.
    assert not keeps_playing([(1.0, 60.0)] * 10, rate=5.0)


def test_the_test_is_exact_at_the_bend_where_a_buffer_runs_out() -> None:
    # Two listeners, each holding 1 s and needing 1 s more, at 1 audio s per s: by t = 2 s they need
    # 2 s of audio and 2 s are made: just enough.
    assert keeps_playing([(1.0, 1.0), (1.0, 1.0)], rate=1.0)
    assert not keeps_playing([(1.0, 1.0), (1.0, 1.0)], rate=0.99)
    assert keeps_playing([], rate=0.0) and not keeps_playing([(0.0, 1.0)], rate=0.0)


class _Now:
    def __init__(self) -> None:
        self.s = 100.0

    def __call__(self) -> float:
        return self.s


def _admission(capacity: float, others: int = 0, headroom: float = 1.0) -> RealtimeAdmission:
    return RealtimeAdmission(lambda: capacity, lambda: others, headroom)


def _playing(admission: RealtimeAdmission, client: str, buffered_s: float, remaining_s: float, now: _Now) -> Listener:
    clock = PlaybackClock(0.0116, now=now)
    clock.delivered(buffered_s)
    listener = Listener(client, buffered_s + remaining_s, clock)
    admission.add(listener)
    return listener


def test_a_new_listener_is_refused_only_when_the_others_would_run_dry() -> None:
    now = _Now()
    admission = _admission(capacity=4.0)
    for _ in range(4):
        _playing(admission, "a", buffered_s=0.0, remaining_s=10.0, now=now)
    refusal = admission.refusal("a", expected_audio_s=10.0)
    assert refusal is not None and "4.0 audio s per s" in refusal
    assert MIN_RETRY_AFTER_S <= admission.retry_after_s() <= MAX_RETRY_AFTER_S
    # The same four holding 5 s of audio each: the newcomer's start is paid by their buffers.
    buffered = _admission(capacity=4.0)
    for _ in range(4):
        _playing(buffered, "a", buffered_s=5.0, remaining_s=5.0, now=now)
    assert buffered.refusal("a", expected_audio_s=10.0) is None


def test_work_nobody_listens_to_and_an_unknown_capacity_are_never_refused() -> None:
    now = _Now()
    admission = _admission(capacity=1.0)
    _playing(admission, "a", 0.0, 10.0, now)
    assert admission.refusal("", expected_audio_s=100.0) is None  # a job
    assert _admission(capacity=0.0).refusal("a", 100.0) is None
    assert RealtimeAdmission(lambda: 1.0, lambda: 0, headroom=0.0).refusal("a", 100.0) is None  # switched off


def test_other_gateways_streams_are_taken_off_the_capacity() -> None:
    assert _admission(capacity=4.0, others=0).refusal("a", 10.0) is None
    refusal = _admission(capacity=4.0, others=4).refusal("a", 10.0)
    assert refusal is not None and "its 0 listeners and 4 streams of other callers need that" in refusal


def test_one_client_alone_may_fill_the_mesh() -> None:
    now = _Now()
    admission = _admission(capacity=6.0)
    for _ in range(5):
        assert admission.refusal("service", 10.0) is None
        _playing(admission, "service", 0.0, 10.0, now)
    assert admission.refusal("service", 10.0) is None  # the sixth: still within the capacity
    _playing(admission, "service", 0.0, 10.0, now)
    assert admission.refusal("service", 10.0) is not None  # the seventh is past it


def test_when_the_mesh_is_nearly_full_the_client_over_an_equal_share_is_refused_first() -> None:
    now = _Now()
    admission = _admission(capacity=6.0)
    for _ in range(4):
        _playing(admission, "hog", 0.0, 10.0, now)
    _playing(admission, "small", 0.0, 10.0, now)
    # One place left. The hog holds 4 of an equal share of 3: its fifth stream would take the
    # place the small client's equal share still has, so it is refused ...
    refusal = admission.refusal("hog", 10.0)
    assert refusal is not None and "equal share" in refusal
    # ... while the small client, within its share, is let in.
    assert admission.refusal("small", 10.0) is None


def test_a_client_between_two_short_streams_keeps_its_share_against_a_flood() -> None:
    now = _Now()
    admission = RealtimeAdmission(lambda: 6.0, lambda: 0, 1.0, now=now)
    # The small client asks for a short stream, which ends: it holds nothing now, but is active.
    assert admission.refusal("small", 1.0) is None
    short = _playing(admission, "small", 0.0, 1.0, now)
    short.characters = 14
    admission.remove(short, finished=True)
    now.s += 0.5
    admitted = 0
    while admission.refusal("flood", 10.0) is None:
        _playing(admission, "flood", 0.0, 10.0, now)
        admitted += 1
    assert admitted == 3  # an equal share of 6; the other share waits for the small client ...
    assert admission.refusal("small", 1.0) is None  # ... which is let in
    # A client that has not asked for a while is no longer set aside: the flood may fill the mesh.
    now.s += DEFAULT_ACTIVE_CLIENT_S + 0.1
    while admission.refusal("flood", 10.0) is None:
        _playing(admission, "flood", 0.0, 10.0, now)
        admitted += 1
    assert admitted == 6


def _starting(admission: RealtimeAdmission, client: str, refused: list[tuple[int, str]]) -> Listener:
    """A listener of `client` whose stream has sent no audio yet, so admission may refuse it late."""
    listener = Listener(client, 10.0)
    listener.refuse_late = lambda reason: refused.append((listener.id, reason))
    admission.add(listener)
    return listener


def test_a_client_within_its_share_takes_the_place_of_the_newest_silent_stream_of_one_over_it() -> None:
    now = _Now()
    admission = RealtimeAdmission(lambda: 6.0, lambda: 0, 1.0, now=now)
    refused: list[tuple[int, str]] = []
    playing = [_playing(admission, "hog", 2.0, 10.0, now) for _ in range(2)]
    admission.refusal("hog", 10.0)
    silent = [_starting(admission, "hog", refused) for _ in range(4)]
    # The hog filled the mesh alone; a small client comes. An equal share of 6 is 3 each, so the
    # small client may take the places of the hog's silent streams, the newest first, one at a time,
    # until each holds 3.
    for expected in (silent[3], silent[2], silent[1]):
        assert admission.refusal("small", 10.0) is not None
        taken = admission.preemption("small", 10.0)
        assert taken == [expected], "one place is enough, and the newest stream has cost the least"
        assert refused[-1:] != [(expected.id, "gave its place")], "the caller refuses them"
        admission.refuse(taken, "gave its place")
        assert refused[-1] == (expected.id, "gave its place") and expected not in admission.listening()
        assert admission.refusal("small", 10.0) is None
        admission.add(Listener("small", 10.0))
    assert admission.refusal("small", 10.0) is not None
    assert admission.preemption("small", 10.0) is None, "a fourth would put the small client over its share"
    assert all(listener in admission.listening() for listener in [*playing, silent[0]])


def test_playing_streams_never_give_their_place_and_a_giver_keeps_as_many_as_the_taker() -> None:
    now = _Now()
    refused: list[tuple[int, str]] = []
    playing = RealtimeAdmission(lambda: 4.0, lambda: 0, 1.0, now=now)
    for _ in range(4):
        _playing(playing, "hog", 0.5, 10.0, now)
    assert playing.refusal("small", 10.0) is not None
    assert playing.preemption("small", 10.0) is None, "every stream of the hog is playing"
    # Three clients on 4: an equal share is 4/3, and a and b hold 2 each, all silent. Both are over
    # it: the newest of their streams gives its place to c, which then holds as many as a place-giver.
    shared = RealtimeAdmission(lambda: 4.0, lambda: 0, 1.0, now=now)
    shared.refusal("a", 10.0)
    shared.refusal("b", 10.0)
    streams = [_starting(shared, client, refused) for client in ("a", "b", "a", "b")]
    assert shared.refusal("c", 10.0) is not None
    assert shared.preemption("c", 10.0) == [streams[3]]
    shared.refuse([streams[3]], "gave its place")
    shared.add(Listener("c", 10.0))
    # Now a holds 2, b and c 1 each: a second stream would put c over its share (and a, giving one
    # up, would be left fewer than c).
    assert shared.refusal("c", 10.0) is not None
    assert shared.preemption("c", 10.0) is None
    refused.clear()
    # Where taking every place it may would not make room, none is taken: the hog's silent stream
    # is in the fast tier (half a second of the capacity per audio second) and the newcomer is not.
    crowded = RealtimeAdmission(lambda: 2.5, lambda: 0, 1.0, now=now)
    crowded.refusal("hog", 10.0)
    for _ in range(2):
        _playing(crowded, "hog", 0.0, 10.0, now)
    fast = _starting(crowded, "hog", refused)
    fast.cost = 0.5
    assert crowded.refusal("small", 10.0) is not None
    assert crowded.preemption("small", 10.0) is None
    assert refused == []


def test_a_finished_stream_teaches_the_audio_a_character_makes() -> None:
    now = _Now()
    admission = _admission(capacity=6.0)
    listener = _playing(admission, "a", buffered_s=6.0, remaining_s=0.0, now=now)
    listener.voice, listener.characters = "en_US-test", 100
    before = admission.audio_s_per_char
    admission.remove(listener, finished=True)  # 6 s from 100 characters
    assert admission.audio_s_per_char == pytest.approx(before + 0.1 * (0.06 - before))
    # Its voice's own measure starts at what its first stream made; a voice not heard yet takes every voice's.
    assert admission.expected_audio_s(1000, "en_US-test") == pytest.approx(1000 * 0.06)
    assert admission.expected_audio_s(1000, "zh_CN-test") == pytest.approx(1000 * admission.audio_s_per_char)
    assert list(admission.listeners) == []
    # A listener of that voice admitted next takes its measure for the text it has not planned yet.
    admission.add(newcomer := Listener("b", 1.0, voice="en_US-test"))
    assert newcomer.audio_s_per_char == pytest.approx(0.06)


def test_the_clock_counts_only_the_gaps_the_mesh_makes() -> None:
    now, gaps = _Now(), []
    clock = PlaybackClock(0.0116, now=now, on_stall=gaps.append)
    clock.delivered(1.0)  # first audio at 100 s: plays until 101 s
    now.s = 100.5
    clock.delivered(1.0, ready_s=100.5)  # in time: plays until 102 s
    now.s = 102.3
    clock.delivered(1.0, ready_s=102.3)  # ready 0.3 s after the listener ran dry
    now.s = 104.0
    clock.delivered(1.0, ready_s=102.8)  # ready in time, but the client read it late: its own gap
    assert gaps == [pytest.approx(0.3)]


def _stall(listener: Listener, gap_s: float) -> None:
    listener.stalled(gap_s)


def test_gaps_heard_under_load_cut_the_trusted_capacity_once_per_overload_and_it_recovers() -> None:
    now, heard = _Now(), []
    admission = RealtimeAdmission(lambda: 10.0, lambda: 0, 0.9, now=now, on_stall=heard.append)
    listeners = [_playing(admission, "a", 1.0, 20.0, now) for _ in range(6)]
    assert admission.listener_capacity() == pytest.approx(9.0)
    _stall(listeners[0], 0.05)  # too short to count against the capacity
    assert admission.listener_capacity() == pytest.approx(9.0)
    _stall(listeners[0], 0.3)
    cut = admission.listener_capacity()
    assert cut == pytest.approx(9.0 * 0.9)
    _stall(listeners[1], 0.4)  # the same overload: the burst's listeners run dry together
    assert admission.listener_capacity() == pytest.approx(cut)
    assert heard == [0.05, 0.3, 0.4]  # every gap reaches the metrics
    now.s += 60.0  # a half-life with no gap: half the distrusted part comes back
    assert admission.listener_capacity() == pytest.approx(9.0 - (9.0 - cut) / 2)
    for _ in range(40):  # however many overloads, admission keeps at least half the capacity
        now.s += 3.0
        _stall(listeners[0], 1.0)
    assert admission.listener_capacity() >= 9.0 * 0.5 - 1e-9


@pytest.mark.parametrize("min_share", [0.8, 1.0])
def test_the_least_trusted_share_is_the_operators_to_set(min_share: float) -> None:
    now = _Now()
    admission = RealtimeAdmission(lambda: 10.0, lambda: 0, 1.0, now=now, min_share=min_share)
    listeners = [_playing(admission, "a", 1.0, 20.0, now) for _ in range(8)]
    for _ in range(10):
        now.s += 3.0
        _stall(listeners[0], 1.0)
    assert admission.listener_capacity() == pytest.approx(10.0 * min_share)  # 1: gaps cut nothing


def test_a_gap_on_a_quiet_mesh_or_of_work_nobody_listens_to_does_not_cut_the_capacity() -> None:
    now = _Now()
    admission = RealtimeAdmission(lambda: 10.0, lambda: 0, 1.0, now=now)
    lone = _playing(admission, "a", 1.0, 20.0, now)
    _stall(lone, 1.0)  # one listener of ten: a lost worker or a slow hop, not too many listeners
    job = Listener("", 30.0)
    admission.add(job)
    for _ in range(9):
        _playing(admission, "b", 1.0, 20.0, now)
    _stall(job, 1.0)
    assert admission.listener_capacity() == pytest.approx(10.0)
    _stall(lone, 1.0)  # ten listeners now: the mesh is loaded
    assert admission.listener_capacity() == pytest.approx(9.0)


def test_the_trusted_capacity_is_what_admission_takes() -> None:
    now = _Now()
    admission = RealtimeAdmission(lambda: 5.0, lambda: 0, 0.8, now=now)
    for _ in range(4):  # 4 of 5 x 0.8: full
        assert admission.refusal("a", 10.0) is None
        admission.add(Listener("a", 10.0))
    assert admission.refusal("a", 10.0) is not None
    off = RealtimeAdmission(lambda: 5.0, lambda: 0, 0.0, now=now)
    assert off.listener_capacity() == 5.0  # no admission: the mesh's own figure


def test_a_listener_alone_is_taken_even_where_the_mesh_is_slower_than_real_time() -> None:
    slow = RealtimeAdmission(lambda: 0.6, lambda: 0, 0.9)
    assert slow.refusal("a", 20.0) is None  # nobody else to keep playing: serve it as fast as the mesh can
    slow.add(Listener("a", 20.0))
    assert slow.refusal("b", 20.0) is not None  # a second would make the first run dry
    elsewhere = RealtimeAdmission(lambda: 0.6, lambda: 1, 0.9)  # another gateway's listener on the workers
    assert elsewhere.refusal("a", 20.0) is not None


def test_a_listener_is_alone_only_while_no_other_stream_is_on_the_workers() -> None:
    """What the start hold reads: alone, a listener's next part waits on no other stream's step."""
    others = [0]
    admission = RealtimeAdmission(lambda: 5.0, lambda: others[0], 0.9)
    first = Listener("a", 10.0)
    assert not first.alone()  # no admission holds it yet
    admission.add(first)
    assert first.alone()
    work = Listener("", 10.0)  # work no listener waits for still runs on the workers
    admission.add(work)
    assert not first.alone()
    admission.remove(work)
    assert first.alone()
    others[0] = 1  # another gateway's stream on the same workers
    assert not first.alone()
    others[0] = 0
    second = Listener("a", 10.0)
    admission.add(second)
    assert not first.alone() and not second.alone()
    admission.remove(second)
    assert first.alone()


def test_only_a_listener_alone_on_a_mesh_slower_than_real_time_holds_audio_before_it_plays() -> None:
    now = _Now()
    slow = RealtimeAdmission(lambda: 0.8, lambda: 0, 0.75, now=now)  # trusted: 0.8 x 0.75 = 0.6 audio s per s
    alone = Listener("a", 10.0)
    slow.add(alone)
    assert alone.start_buffer_s() == pytest.approx(4.0)  # it must hold what the mesh falls behind by: (1 - 0.6) x 10 s
    work = Listener("", 10.0)  # work no listener waits for neither holds nor counts
    slow.add(work)
    assert work.start_buffer_s() == 0.0 and alone.start_buffer_s() == pytest.approx(4.0)
    second = Listener("b", 10.0)
    slow.add(second)  # with others on the mesh admission keeps them all playing: nothing is held
    assert alone.start_buffer_s() == 0.0 and second.start_buffer_s() == 0.0
    busy_elsewhere = RealtimeAdmission(lambda: 0.6, lambda: 1, 0.9, now=now)
    third = Listener("a", 10.0)
    busy_elsewhere.add(third)
    assert third.start_buffer_s() == 0.0  # another gateway's stream is on the workers
    fast = RealtimeAdmission(lambda: 1.2, lambda: 0, 0.9, now=now)
    quick = Listener("a", 10.0)
    fast.add(quick)
    assert quick.start_buffer_s() == 0.0  # real time or faster (1.2 x 0.9): it plays as the audio comes
    for _ in range(3):  # until gaps heard cut the trusted rate below real time
        now.s += 3.0
        fast.feedback.stalled(1.0, loaded=True)
    assert fast.feedback.share() < 1 / 1.08
    assert quick.start_buffer_s() == pytest.approx((1 - 1.2 * 0.9 * fast.feedback.share()) * 10.0)
    off = RealtimeAdmission(lambda: 0.6, lambda: 0, 0.0, now=now)
    unheld = Listener("a", 10.0)
    off.add(unheld)
    assert unheld.start_buffer_s() == 0.0  # admission off: the gateway does not read the capacity


def test_a_whole_texts_estimate_is_its_planned_sentences_and_the_rest_by_characters() -> None:
    listener = Listener("c", expected_audio_s=100 * 0.07, characters=100, audio_s_per_char=0.07, text_complete=True)
    listener.sentence_planned(characters=40, audio_s=6.0)  # a sentence of numbers: 0.15 s a character
    assert listener.expected_audio_s == pytest.approx(6.0 + 60 * 0.07)
    listener.sentence_planned(characters=50, audio_s=1.0)  # a short one: the estimate may fall too
    assert listener.expected_audio_s == pytest.approx(7.0 + 10 * 0.07)
    listener.all_planned()  # the 10 characters left were spaces and markup
    assert listener.expected_audio_s == pytest.approx(7.0)


def test_a_streamed_texts_estimate_only_grows_until_its_last_sentence_is_planned() -> None:
    listener = Listener("c", expected_audio_s=10.0, audio_s_per_char=0.07)  # a placeholder until text comes
    listener.text_arrived(20)
    assert listener.expected_audio_s == 10.0
    listener.sentence_planned(characters=20, audio_s=1.2)
    assert listener.expected_audio_s == 10.0  # more text may still come: the placeholder stands
    listener.text_arrived(300)
    assert listener.expected_audio_s == pytest.approx(1.2 + 300 * 0.07)
    listener.sentence_planned(characters=300, audio_s=30.0)
    listener.all_planned()
    assert listener.expected_audio_s == pytest.approx(31.2)


@pytest.mark.parametrize("wait_s, admitted", [(0.0, True), (1.0, False)])
def test_audio_a_listener_holds_below_the_wait_for_its_next_piece_pays_for_no_one(wait_s: float, admitted: bool) -> None:
    now = _Now()
    admission = RealtimeAdmission(lambda: 2.0, lambda: 0, 1.0, playing_wait_s=lambda: wait_s)
    for client in ("a", "b"):
        _playing(admission, client, buffered_s=2.0, remaining_s=2.0, now=now)
    # Two seconds held each would carry a third listener through their last two seconds as a steady
    # flow; but audio comes a piece at a time, and a second of it goes on waiting for the next piece.
    assert (admission.refusal("c", 10.0) is None) is admitted
    assert admission.fits(1.0, 10.0) is admitted
