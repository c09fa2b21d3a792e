"""When a worker runs every stream's steps a part at a time (`Scheduler.steps_in_parts`): while more than
one stream is open and one of them is in its first seconds, and not otherwise; and which streams are in
their first seconds (`StreamPlayback.within_first`)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from libs.scheduling.scheduler import Scheduler
from libs.scheduling.stream import StreamPlayback
from libs.telemetry.metrics import VocoderMetrics


def test_steps_run_in_parts_only_while_a_stream_starts_beside_another() -> None:
    with ThreadPoolExecutor(1) as executor:
        scheduler = Scheduler("vocoder", executor, VocoderMetrics())
        playing, new = object(), object()
        assert not scheduler.steps_in_parts(open_streams=0)

        assert not scheduler.steps_in_parts(open_streams=1)  # the playing stream alone
        scheduler.stream_starting(new, True)
        assert not scheduler.steps_in_parts(open_streams=1)  # one stream: its steps follow its own listener
        assert scheduler.steps_in_parts(open_streams=2)  # a new stream starts beside a playing one

        scheduler.stream_starting(new, False)  # past its first seconds (or ended)
        assert not scheduler.steps_in_parts(open_streams=2)
        scheduler.stream_starting(playing, True)
        scheduler.stream_starting(playing, True)  # marking twice counts once
        assert scheduler.steps_in_parts(open_streams=2)
        scheduler.stream_starting(playing, False)
        scheduler.stream_starting(playing, False)  # ending twice is harmless
        assert not scheduler.steps_in_parts(open_streams=3)


def test_a_stream_is_in_its_first_seconds_until_it_has_made_them_and_a_resumed_one_never() -> None:
    new = StreamPlayback.opening(first_audio=True, startup_audio_s=0.14)
    assert new.within_first(2.4)
    new.made(2.0)
    assert new.within_first(2.4)
    new.made(0.4)
    assert not new.within_first(2.4)
    resumed = StreamPlayback.opening(first_audio=False)
    assert resumed.never_starts and not resumed.within_first(2.4)


def test_a_lone_listeners_piece_lead_is_its_next_steps_time_less_the_audio_before_it_not_the_longest_step() -> None:
    with ThreadPoolExecutor(1) as executor:
        scheduler = Scheduler("vocoder", executor, VocoderMetrics())
        assert scheduler.piece_lead_s() == 0.0  # not known: the gateway takes the step lead
        for frames in (16, 32, 64, 128, 128, 32, 64):
            scheduler.costs.observe("chunk", frames, 0.002 * frames)  # 2 ms of CPU a frame, exactly
        scheduler.start_waits = [(32, 0.0), (64, 0.37), (128, 1.11)]
        wall = {frames: scheduler.costs.wall_s("chunk", frames) for frames in (32, 64, 128)}
        assert wall[32] < wall[64] < wall[128]
        lead = scheduler.piece_lead_s()
        assert lead == max(wall[32], wall[64] - 0.37, wall[128] - 1.11)
        assert lead < wall[128]  # the longest step comes with more than a second of audio given before it
        scheduler.start_waits = [(32, 0.0), (64, 0.0), (128, 0.0)]  # had the steps between given nothing
        assert scheduler.piece_lead_s() == wall[128]
