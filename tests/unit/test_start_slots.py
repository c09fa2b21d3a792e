"""A gateway lets a share of the listeners its workers keep playing start at once; the others wait
their turn in order, and a turn given back or abandoned goes to the next."""

from __future__ import annotations

import asyncio

import pytest

from libs.upstream.playback import StartSlots


@pytest.mark.parametrize(("capacity", "limit"), [(8.5, 2), (17.0, 4), (3.8, 1), (0.9, 1), (0.0, 0)])
def test_the_turns_are_a_share_of_the_capacity_and_at_least_one(capacity: float, limit: int) -> None:
    assert StartSlots(lambda: capacity).limit() == limit  # 0: capacity not known, nothing waits


def test_starts_past_the_limit_wait_their_turn_in_order() -> None:
    async def run() -> list[str]:
        slots, order = StartSlots(lambda: 8.0), []  # two at once

        async def start(name: str) -> None:
            await slots.take()
            order.append(name)

        await start("a")
        await start("b")
        waiting = [asyncio.ensure_future(start(name)) for name in ("c", "d")]
        await asyncio.sleep(0)
        assert order == ["a", "b"] and slots.starting == 2 and slots.waiting == 2
        slots.give_back()  # a has started
        await asyncio.sleep(0)
        assert order == ["a", "b", "c"] and slots.waiting == 1
        slots.give_back()
        slots.give_back()
        await asyncio.gather(*waiting)
        assert slots.starting == 1
        return order

    assert asyncio.run(run()) == ["a", "b", "c", "d"]


def test_nothing_waits_while_the_capacity_is_not_known() -> None:
    async def run() -> int:
        slots = StartSlots(lambda: 0.0)
        for _ in range(50):
            await asyncio.wait_for(slots.take(), timeout=1.0)
        return slots.starting

    assert asyncio.run(run()) == 50


def test_a_start_cancelled_while_waiting_or_just_given_its_turn_holds_none() -> None:
    async def run() -> None:
        slots = StartSlots(lambda: 4.0)  # one at once
        await slots.take()
        gone = asyncio.ensure_future(slots.take())
        given = asyncio.ensure_future(slots.take())
        last = asyncio.ensure_future(slots.take())
        await asyncio.sleep(0)
        gone.cancel()  # left while waiting
        await asyncio.sleep(0)
        slots.give_back()  # the turn goes to `given` ...
        given.cancel()  # ... which is cancelled before it runs: the turn passes on
        await asyncio.wait_for(last, timeout=1.0)
        assert gone.cancelled() and given.cancelled()
        assert slots.starting == 1 and slots.waiting == 0

    asyncio.run(run())


def test_work_nobody_listens_to_starts_only_between_listeners_starts_and_holds_no_turn() -> None:
    async def run() -> None:
        slots = StartSlots(lambda: 4.0)  # one at once
        await slots.take()  # a listener starting
        unlistened = asyncio.ensure_future(slots.take_unlistened())
        waiting = asyncio.ensure_future(slots.take())  # a second listener, waiting for its turn
        await asyncio.sleep(0)
        assert not unlistened.done()
        slots.give_back()  # the first has started: the turn goes to the waiting listener, not the work
        await asyncio.wait_for(waiting, timeout=1.0)
        await asyncio.sleep(0)
        assert not unlistened.done()
        slots.give_back()  # no listener starting or waiting: the work goes
        await asyncio.wait_for(unlistened, timeout=1.0)
        assert slots.starting == 0
        await asyncio.wait_for(slots.take(), timeout=1.0)  # a listener after it finds its turn free
        assert slots.starting == 1

    asyncio.run(run())


def test_work_nobody_listens_to_goes_at_once_on_an_idle_gateway_and_a_cancelled_wait_leaves_nothing() -> None:
    async def run() -> None:
        slots = StartSlots(lambda: 4.0)
        await asyncio.wait_for(slots.take_unlistened(), timeout=1.0)
        await slots.take()
        gone = asyncio.ensure_future(slots.take_unlistened())
        await asyncio.sleep(0)
        gone.cancel()
        await asyncio.sleep(0)
        slots.give_back()
        assert gone.cancelled() and slots.starting == 0 and slots.waiting == 0

    asyncio.run(run())
