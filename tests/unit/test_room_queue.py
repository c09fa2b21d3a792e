"""The wait for room: streams refused for room are tried again, oldest first, when a stream ends and
while their buffers grow, and refused as before once their wait runs out."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from libs.synthesis.room import NoRoom, RoomQueue

LONG_S = 30.0
"""A wait or poll interval no test reaches: what these tests show happens because room came."""


class Mesh:
    """Places for streams: `free` of them; each attempt takes one or is refused for room."""

    def __init__(self, free: int = 0) -> None:
        self.free = free
        self.taken: list[str] = []
        self.released: list[str] = []
        self.tried: list[str] = []

    def attempt(self, name: str) -> Callable[[], str]:
        def take() -> str:
            self.tried.append(name)
            if self.free <= 0:
                raise NoRoom("realtime", f"no room for {name}")
            self.free -= 1
            self.taken.append(name)
            return name

        return take


def _queue(
    waited: list[tuple[bool, float]] | None = None, wait_s: float = LONG_S, poll_s: float = LONG_S, max_waiting: int = 8
) -> RoomQueue[str]:
    """A queue whose waits, (admitted, seconds) each, go to `waited`."""
    on_waited = None if waited is None else lambda admitted, seconds: waited.append((admitted, seconds))
    return RoomQueue(wait_s, max_waiting, poll_s=poll_s, on_waited=on_waited)


async def _until(condition: Callable[[], bool], timeout_s: float = 5.0) -> None:
    """Wait until `condition()` holds (the test fails if it never does)."""
    for _ in range(round(timeout_s / 0.001)):
        if condition():
            return
        await asyncio.sleep(0.001)
    raise AssertionError("the condition never came to hold")


async def test_a_stream_with_room_is_admitted_at_once_without_waiting() -> None:
    mesh, waited = Mesh(free=1), []
    queue = _queue(waited)
    assert await queue.take(mesh.attempt("a"), "x", None, mesh.released.append) == "a"
    assert waited == [] and queue.waiting == 0


async def test_a_stream_refused_for_room_is_admitted_when_a_stream_ends() -> None:
    mesh, waited = Mesh(), []
    queue = _queue(waited)
    task = asyncio.create_task(queue.take(mesh.attempt("a"), "x", None, mesh.released.append))
    await _until(lambda: queue.waiting == 1)
    mesh.free = 1
    queue.room_freed()
    assert await task == "a"
    assert queue.waiting == 0
    assert len(waited) == 1 and waited[0][0]


async def test_the_waiting_are_tried_again_while_no_stream_ends() -> None:
    mesh = Mesh()
    queue = _queue(poll_s=0.01)
    task = asyncio.create_task(queue.take(mesh.attempt("a"), "x", None, mesh.released.append))
    await _until(lambda: queue.waiting == 1)
    mesh.free = 1  # the listeners' buffers grew: the test passes now, though nothing ended
    assert await task == "a"


async def test_the_oldest_waiting_stream_gets_the_room_first_and_a_newcomer_comes_after_them() -> None:
    mesh = Mesh()
    queue = _queue()
    first = asyncio.create_task(queue.take(mesh.attempt("first"), "x", None, mesh.released.append))
    await _until(lambda: queue.waiting == 1)
    second = asyncio.create_task(queue.take(mesh.attempt("second"), "y", None, mesh.released.append))
    await _until(lambda: queue.waiting == 2)
    mesh.free = 1
    # A newcomer arriving as room comes: the waiting are tried before it, so the oldest takes the room.
    newcomer = asyncio.create_task(queue.take(mesh.attempt("newcomer"), "z", None, mesh.released.append))
    assert await first == "first"
    await _until(lambda: queue.waiting == 2)
    assert mesh.taken == ["first"] and not second.done() and not newcomer.done()
    mesh.free = 1
    queue.room_freed()
    assert await second == "second"
    mesh.free = 1
    queue.room_freed()
    assert await newcomer == "newcomer"
    assert mesh.taken == ["first", "second", "newcomer"]


async def test_a_stream_still_without_room_when_its_wait_runs_out_is_refused_with_the_latest_reason() -> None:
    mesh, waited = Mesh(), []
    queue = _queue(waited, wait_s=0.05, poll_s=0.01)
    with pytest.raises(NoRoom, match="no room for a") as caught:
        await queue.take(mesh.attempt("a"), "x", None, mesh.released.append)
    assert caught.value.reason == "realtime"
    assert queue.waiting == 0 and mesh.taken == []
    assert len(waited) == 1 and not waited[0][0] and waited[0][1] >= 0.05


async def test_no_wait_at_all_refuses_at_once() -> None:
    mesh, waited = Mesh(), []
    with pytest.raises(NoRoom):
        await _queue(waited, wait_s=0).take(mesh.attempt("a"), "x", None, mesh.released.append)
    assert waited == []


async def test_a_deadline_leaves_half_of_itself_for_the_audio() -> None:
    mesh, waited = Mesh(), []
    queue = _queue(waited, poll_s=0.01)
    with pytest.raises(NoRoom):
        await queue.take(mesh.attempt("a"), "x", 0.1, mesh.released.append)
    assert len(waited) == 1 and 0.05 <= waited[0][1] < LONG_S


async def test_a_place_taken_for_a_caller_that_went_away_is_given_back() -> None:
    mesh = Mesh()
    queue = _queue()
    task = asyncio.create_task(queue.take(mesh.attempt("a"), "x", None, mesh.released.append))
    await _until(lambda: queue.waiting == 1)
    mesh.free = 1
    queue.pump()  # admitted ...
    task.cancel()  # ... as its caller hangs up, before it resumes
    with pytest.raises(asyncio.CancelledError):
        await task
    assert mesh.taken == ["a"] and mesh.released == ["a"]


async def test_a_caller_that_goes_away_while_waiting_leaves_the_queue() -> None:
    mesh = Mesh()
    queue = _queue()
    task = asyncio.create_task(queue.take(mesh.attempt("a"), "x", None, mesh.released.append))
    await _until(lambda: queue.waiting == 1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert queue.waiting == 0
    mesh.free = 1
    queue.pump()
    assert mesh.taken == [] and mesh.released == []


async def test_a_full_queue_and_a_client_holding_half_of_it_are_refused_at_once() -> None:
    mesh = Mesh()
    queue = _queue(max_waiting=4)
    hog = [asyncio.create_task(queue.take(mesh.attempt(f"hog{n}"), "hog", None, mesh.released.append)) for n in range(2)]
    await _until(lambda: queue.waiting == 2)
    with pytest.raises(NoRoom, match="hog2"):  # half of the queue is the hog's already
        await queue.take(mesh.attempt("hog2"), "hog", None, mesh.released.append)
    others = [asyncio.create_task(queue.take(mesh.attempt(f"other{n}"), f"c{n}", None, mesh.released.append)) for n in range(2)]
    await _until(lambda: queue.waiting == 4)
    with pytest.raises(NoRoom, match="late"):  # nobody else may wait now
        await queue.take(mesh.attempt("late"), "d", None, mesh.released.append)
    for task in hog + others:
        task.cancel()
    await asyncio.gather(*hog, *others, return_exceptions=True)
    assert queue.waiting == 0


async def test_another_refusal_on_a_later_try_reaches_its_caller() -> None:
    queue = _queue()
    tries = []

    def attempt() -> str:
        tries.append(1)
        if len(tries) == 1:
            raise NoRoom("realtime", "full")
        raise ValueError("the client's own limit")

    task = asyncio.create_task(queue.take(attempt, "x", None, lambda _: None))
    await _until(lambda: queue.waiting == 1)
    queue.room_freed()
    with pytest.raises(ValueError, match="own limit"):
        await task
    assert queue.waiting == 0


async def test_a_client_s_streams_are_tried_in_the_order_they_came_one_try_per_client_a_round() -> None:
    mesh = Mesh()
    queue = _queue()
    waiting = [
        asyncio.create_task(queue.take(mesh.attempt(name), client, None, mesh.released.append))
        for name, client in (("hog-1", "hog"), ("hog-2", "hog"), ("other-1", "other"))
    ]
    await _until(lambda: queue.waiting == 3)
    # A newcomer of the hog's comes after the hog's own waiting streams: it is not tried at all.
    newcomer = asyncio.create_task(queue.take(mesh.attempt("hog-3"), "hog", None, mesh.released.append))
    await _until(lambda: queue.waiting == 4)
    assert mesh.tried.count("hog-3") == 0
    mesh.tried.clear()
    queue.pump()
    assert mesh.tried == ["hog-1", "other-1"], "the hog's later streams wait for its first"
    mesh.free = 2
    queue.pump()
    assert await waiting[0] == "hog-1" and mesh.taken == ["hog-1", "hog-2"]
    assert await waiting[1] == "hog-2"
    mesh.free = 1
    queue.pump()
    assert await waiting[2] == "other-1"
    newcomer.cancel()
    await asyncio.gather(newcomer, return_exceptions=True)
