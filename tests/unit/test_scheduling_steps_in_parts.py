"""When a worker runs every stream's steps a part at a time (`Scheduler.steps_in_parts`): while more than
one stream is open and one of them is in its first seconds, and not otherwise."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from libs.scheduling.scheduler import Scheduler
from libs.telemetry.metrics import VocoderMetrics


def test_steps_run_in_parts_only_while_a_stream_starts_beside_another() -> None:
    with ThreadPoolExecutor(1) as executor:
        scheduler = Scheduler("vocoder", executor, VocoderMetrics())
        playing, new = object(), object()
        assert not scheduler.steps_in_parts()

        scheduler.stream_opened(playing, starting=False)
        assert not scheduler.steps_in_parts()  # one stream: its steps follow its own listener
        scheduler.stream_opened(new)
        assert scheduler.steps_in_parts()  # a new stream starts beside a playing one

        scheduler.stream_starting(new, False)  # past its first seconds
        assert not scheduler.steps_in_parts()
        scheduler.stream_starting(playing, True)
        assert scheduler.steps_in_parts()

        scheduler.stream_closed(new)
        assert not scheduler.steps_in_parts()  # alone again, even while starting
        scheduler.stream_closed(playing)
        scheduler.stream_closed(playing)  # closing twice is harmless
        assert not scheduler.steps_in_parts()
