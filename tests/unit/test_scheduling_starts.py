"""The start board: processes sharing one CPU budget say when first audios are under way in them, and a
worker's background lane holds while those take all the cores."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from libs.scheduling.executor import DeadlineExecutor
from libs.scheduling.ledger import CpuLedger
from libs.scheduling.starts import FRESH_FOR_S, LINGER_S, StartBoard


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _boards(tmp_path: Path, clock: _Clock, alive: set[int] | None = None) -> tuple[StartBoard, StartBoard]:
    living = alive if alive is not None else {1, 2}
    return (
        StartBoard(tmp_path, "acoustic", pid=1, alive=living.__contains__, clock=clock),
        StartBoard(tmp_path, "vocoder", pid=2, alive=living.__contains__, clock=clock),
    )


def test_each_process_sees_the_first_audios_under_way_in_all_of_them(tmp_path: Path) -> None:
    clock = _Clock()
    acoustic, vocoder = _boards(tmp_path, clock)
    try:
        assert acoustic.under_way_all() == vocoder.under_way_all() == 0
        acoustic.under_way(2)
        assert vocoder.under_way_all() == 2 and acoustic.under_way_all() == 2
        vocoder.under_way(1)
        assert acoustic.under_way_all() == vocoder.under_way_all() == 3
    finally:
        acoustic.close()
        vocoder.close()
    assert not list(tmp_path.iterdir())  # each took its file with it


def test_a_first_audio_that_leaves_one_worker_lingers_for_the_hop_to_the_next(tmp_path: Path) -> None:
    clock = _Clock()
    acoustic, vocoder = _boards(tmp_path, clock)
    try:
        acoustic.under_way(1)
        acoustic.under_way(0)  # its first chunk is out: the vocoder's first step is on its way
        assert vocoder.under_way_all() == 1
        clock.now += LINGER_S * 1.01
        assert vocoder.under_way_all() == 0
    finally:
        acoustic.close()
        vocoder.close()


def test_a_count_left_by_a_dead_process_or_never_refreshed_stops_counting(tmp_path: Path) -> None:
    clock, alive = _Clock(), {1, 2}
    acoustic, vocoder = _boards(tmp_path, clock, alive)
    try:
        acoustic.under_way(3)
        clock.now += FRESH_FOR_S * 1.01  # a process stuck, or a process id taken over by another
        assert vocoder.under_way_all() == 0
        acoustic.under_way(3)
        assert vocoder.under_way_all() == 3
        alive.discard(1)  # the acoustic worker is killed mid-step: its file is cleared at the next read
        clock.now += 2.0
        assert vocoder.under_way_all() == 0
        assert not (tmp_path / "acoustic-1.starts").exists()
    finally:
        acoustic.close()
        vocoder.close()


def test_without_a_folder_nothing_is_shared_and_nothing_holds(tmp_path: Path) -> None:
    board = StartBoard(None, "vocoder")
    board.under_way(4)
    assert board.under_way_all() == 0
    board.close()
    ledger = CpuLedger("group", "vocoder", directory=tmp_path)
    shared = StartBoard.of(ledger)
    try:
        shared.under_way(1)
        assert shared.under_way_all() == 1 and ledger.folder is not None and any(ledger.folder.glob("*.starts"))
    finally:
        shared.close()


class _Board:
    """A board whose other processes' first audios the test sets."""

    def __init__(self) -> None:
        self.own = 0
        self.others = 0

    def under_way(self, count: int) -> None:
        self.own = count

    def under_way_all(self) -> int:
        return self.own + self.others


def _background_takes(executor: DeadlineExecutor) -> threading.Event:
    """Queue a step due in ten seconds (background work); the event is set once it has run."""
    ran = threading.Event()
    executor.submit_by(time.monotonic() + 10.0, ran.set)
    return ran


def test_the_background_lane_holds_while_other_processes_first_audios_take_every_core() -> None:
    executor = DeadlineExecutor(1, urgent_threads=1, first_audio_threads=1)
    board = _Board()
    try:
        executor.share_starts(board, cores=1.0)
        board.others = 1  # the acoustic worker plans a first audio on the only core
        ran = _background_takes(executor)
        assert not ran.wait(0.2)
        board.others = 0  # its first audio has gone on: the lane takes the step within a poll or two
        assert ran.wait(5)
    finally:
        executor.shutdown()


def test_with_a_core_to_spare_the_background_lane_runs_beside_a_first_audio() -> None:
    executor = DeadlineExecutor(1, urgent_threads=1, first_audio_threads=1)
    board = _Board()
    try:
        executor.share_starts(board, cores=2.0)
        board.others = 1
        assert _background_takes(executor).wait(5)
    finally:
        executor.shutdown()


@pytest.mark.parametrize("cores", [0.5, 1.0])
def test_a_first_audio_running_here_holds_the_background_lane_on_a_core_or_less(cores: float) -> None:
    executor = DeadlineExecutor(1, urgent_threads=1, first_audio_threads=1)
    board = _Board()
    gate = threading.Event()
    try:
        executor.share_starts(board, cores=cores)
        running = executor.submit_by(time.monotonic(), gate.wait, first_audio=True)
        deadline = time.monotonic() + 5.0
        while board.own != 1 and time.monotonic() < deadline:  # taken from the queue, still under way
            time.sleep(0.01)
        assert board.own == 1
        ran = _background_takes(executor)
        assert not ran.wait(0.2)
        gate.set()
        running.result(5)
        assert ran.wait(5) and board.own == 0
    finally:
        gate.set()
        executor.shutdown()
