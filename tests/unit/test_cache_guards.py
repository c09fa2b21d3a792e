"""The circuit breaker and single-flight coalescing that keep the cache cheap and safe."""

from __future__ import annotations

import asyncio

import pytest

from libs.cache.circuit_breaker import BreakerConfig, BreakerState, CircuitBreaker
from libs.cache.single_flight import SingleFlight


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_breaker_opens_after_threshold_then_allows_exactly_one_probe() -> None:
    clock = FakeClock()
    breaker = CircuitBreaker(BreakerConfig(failure_threshold=3, open_s=5.0), clock)
    for _ in range(2):
        breaker.record_failure()
    assert breaker.allow()
    breaker.record_failure()
    assert breaker.state is BreakerState.OPEN and not breaker.allow()
    clock.now = 5.0
    assert breaker.allow() and breaker.state is BreakerState.HALF_OPEN
    assert not breaker.allow(), "only one probe while half-open"
    breaker.record_failure()
    assert breaker.state is BreakerState.OPEN and not breaker.allow()
    clock.now = 10.0
    assert breaker.allow()
    breaker.record_success()
    assert breaker.state is BreakerState.CLOSED and breaker.allow()


def test_success_resets_the_consecutive_failure_count() -> None:
    breaker = CircuitBreaker(BreakerConfig(failure_threshold=2), FakeClock())
    breaker.record_failure()
    breaker.record_success()
    breaker.record_failure()
    assert breaker.state is BreakerState.CLOSED


async def test_concurrent_waiters_get_the_leaders_result_and_work_runs_once() -> None:
    flights: SingleFlight[str] = SingleFlight()
    calls = 0
    release = asyncio.Event()

    async def leader() -> str:
        nonlocal calls
        async with flights.lead("k") as flight:
            calls += 1
            await release.wait()
            flight.publish("mel")
        return "mel"

    leading = asyncio.create_task(leader())
    await asyncio.sleep(0)
    assert flights.in_flight("k")
    waiters = [asyncio.create_task(flights.wait("k")) for _ in range(3)]
    await asyncio.sleep(0)
    release.set()
    assert await asyncio.gather(leading, *waiters) == ["mel"] * 4
    assert calls == 1 and not flights.in_flight("k")


async def test_failed_leader_gives_waiters_none_and_cancelled_waiter_does_not_hurt_others() -> None:
    flights: SingleFlight[str] = SingleFlight()

    async def failing_leader() -> None:
        async with flights.lead("k"):
            await asyncio.sleep(0.01)
            raise RuntimeError("acoustic failed")

    leading = asyncio.create_task(failing_leader())
    await asyncio.sleep(0)
    cancelled = asyncio.create_task(flights.wait("k"))
    survivor = asyncio.create_task(flights.wait("k"))
    await asyncio.sleep(0)
    cancelled.cancel()
    with pytest.raises(RuntimeError):
        await leading
    assert await survivor is None
    assert await flights.wait("k") is None


async def test_a_published_result_keeps_serving_until_its_cache_write_lands() -> None:
    """Between the leader's result and its cache write, a new request would miss the cache and find
    no flight: the flight stays until the write is done."""
    flights: SingleFlight[str] = SingleFlight()
    written = asyncio.Event()

    async def write() -> None:
        await written.wait()

    async with flights.lead("k") as flight:
        flight.publish("mel")
        flight.hold_until(asyncio.ensure_future(write()))
    assert flights.in_flight("k") and await flights.wait("k") == "mel"
    written.set()
    await asyncio.sleep(0.01)
    assert not flights.in_flight("k")
