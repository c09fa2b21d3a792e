"""The dynamic micro-batcher: its window, its batch limit, cancellation, errors and overload."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from libs.voice.batching import BatcherClosed, BatchingConfig, BatchStats, MicroBatcher, Overloaded, padding_groups


class GatedSquares:
    """A batch function that squares numbers, records each batch, and can be held shut."""

    def __init__(self) -> None:
        self.batches: list[list[int]] = []
        self.gate = threading.Event()
        self.gate.set()
        self.entered = threading.Event()

    def __call__(self, jobs: list[int]) -> list[int]:
        self.entered.set()
        self.gate.wait(5)
        if any(job < 0 for job in jobs):
            raise ValueError(f"negative job in {jobs}")
        self.batches.append(list(jobs))
        return [job * job for job in jobs]


def _batcher(function: GatedSquares, stats: list[BatchStats] | None = None, **config: float) -> MicroBatcher:
    return MicroBatcher(function, BatchingConfig(**config), None if stats is None else stats.append)


def test_jobs_arriving_within_the_window_share_one_batch() -> None:
    squares = GatedSquares()
    stats: list[BatchStats] = []
    batcher = _batcher(squares, stats, max_batch=8, max_wait_ms=200)
    try:
        futures = [batcher.submit(n) for n in range(5)]
        assert [f.result(5) for f in futures] == [0, 1, 4, 9, 16]
        assert squares.batches == [[0, 1, 2, 3, 4]]
        assert stats[0].batch_size == 5 and len(stats[0].queue_s) == 5
        # The window runs from the first job's arrival: nobody waited much longer than 200 ms.
        assert max(stats[0].queue_s) < 1.0 and stats[0].compute_s >= 0.0
    finally:
        batcher.close()


def test_a_full_batch_runs_without_waiting_for_the_window() -> None:
    squares = GatedSquares()
    batcher = _batcher(squares, max_batch=4, max_wait_ms=10_000)
    try:
        started = time.perf_counter()
        futures = [batcher.submit(n) for n in range(10)]
        assert futures[3].result(5) == 9
        # The second full batch too runs at once: wait for it, as it may still be running when the first is done.
        assert futures[7].result(5) == 49
        assert time.perf_counter() - started < 5.0
        assert squares.batches[0] == [0, 1, 2, 3]
        assert squares.batches[1] == [4, 5, 6, 7]
        # The last two wait out their window (10 s) unless closed; closing cancels them.
        batcher.close()
        assert futures[8].cancelled() and futures[9].cancelled()
    finally:
        batcher.close()


def test_a_lone_job_runs_after_the_window() -> None:
    squares = GatedSquares()
    batcher = _batcher(squares, max_batch=8, max_wait_ms=30)
    try:
        started = time.perf_counter()
        assert batcher(7) == 49
        assert 0.025 <= time.perf_counter() - started < 2.0
        assert squares.batches == [[7]]
    finally:
        batcher.close()


def test_cancelled_job_is_dropped_and_the_others_are_served() -> None:
    squares = GatedSquares()
    squares.gate.clear()
    batcher = _batcher(squares, max_batch=2, max_wait_ms=0)
    try:
        blocker = batcher.submit(100)  # holds the compute thread while the next jobs queue up
        assert squares.entered.wait(5)
        kept, dropped, other = batcher.submit(2), batcher.submit(3), batcher.submit(4)
        assert dropped.cancel()
        squares.gate.set()
        assert (blocker.result(5), kept.result(5), other.result(5)) == (10_000, 4, 16)
        assert dropped.cancelled()
        assert [3] not in squares.batches and all(3 not in batch for batch in squares.batches)
        assert sorted(job for batch in squares.batches for job in batch) == [2, 4, 100]
    finally:
        batcher.close()


def test_a_failing_job_fails_only_its_own_caller() -> None:
    squares = GatedSquares()
    stats: list[BatchStats] = []
    batcher = _batcher(squares, stats, max_batch=4, max_wait_ms=200)
    try:
        futures = [batcher.submit(n) for n in (2, -1, 3, 4)]
        assert futures[0].result(5) == 4 and futures[2].result(5) == 9 and futures[3].result(5) == 16
        with pytest.raises(ValueError, match="negative job"):
            futures[1].result(5)
        assert sum(s.failed_jobs for s in stats) == 1
    finally:
        batcher.close()


def test_full_queue_refuses_with_overloaded_and_a_retry_hint() -> None:
    squares = GatedSquares()
    squares.gate.clear()
    batcher = _batcher(squares, max_batch=1, max_wait_ms=0, max_queue_depth=3)
    try:
        running = batcher.submit(1)
        assert squares.entered.wait(5)
        queued = [batcher.submit(n) for n in (2, 3, 4)]
        assert batcher.queue_depth == 3
        with pytest.raises(Overloaded) as refused:
            batcher.submit(5)
        assert refused.value.queue_depth == 3 and refused.value.retry_after_s > 0
        squares.gate.set()
        assert [f.result(5) for f in (running, *queued)] == [1, 4, 9, 16]
        assert batcher.queue_depth == 0
    finally:
        batcher.close()


def test_closed_batcher_refuses_new_jobs() -> None:
    batcher = _batcher(GatedSquares())
    batcher.close()
    with pytest.raises(BatcherClosed):
        batcher.submit(1)


def test_cancelling_an_awaiting_task_drops_its_job() -> None:
    squares = GatedSquares()
    squares.gate.clear()
    batcher = _batcher(squares, max_batch=8, max_wait_ms=0)

    async def scenario() -> tuple[int, int]:
        blocker = asyncio.ensure_future(batcher.submit_async(10))
        await asyncio.sleep(0.05)
        assert squares.entered.is_set()
        doomed = asyncio.ensure_future(batcher.submit_async(5))
        survivor = asyncio.ensure_future(batcher.submit_async(6))
        await asyncio.sleep(0.01)
        doomed.cancel()
        await asyncio.sleep(0.01)
        squares.gate.set()
        with pytest.raises(asyncio.CancelledError):
            await doomed
        return await blocker, await survivor

    try:
        assert asyncio.run(scenario()) == (100, 36)
        assert all(5 not in batch for batch in squares.batches)
    finally:
        batcher.close()


def test_caller_that_times_out_takes_its_job_back() -> None:
    squares = GatedSquares()
    squares.gate.clear()
    batcher = _batcher(squares, max_batch=1, max_wait_ms=0)
    try:
        blocker = batcher.submit(1)
        assert squares.entered.wait(5)
        with pytest.raises(TimeoutError):
            batcher(9, timeout_s=0.05)
        squares.gate.set()
        assert blocker.result(5) == 1
        assert batcher(3) == 9
        assert all(9 not in batch for batch in squares.batches)
    finally:
        batcher.close()


def test_padding_groups_keep_padding_under_the_share() -> None:
    assert padding_groups([100, 98, 96, 20, 18]) == [[0, 1, 2], [3, 4]]
    assert padding_groups([50]) == [[0]]
    lengths = [64, 17, 250, 80, 33, 256, 120, 90]
    groups = padding_groups(lengths)
    assert sorted(i for group in groups for i in group) == list(range(len(lengths)))
    for group in groups:
        longest = max(lengths[i] for i in group)
        assert longest * len(group) <= 1.25 * sum(lengths[i] for i in group)
