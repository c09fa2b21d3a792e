"""RetryBudget: under sustained failure, retries stay within 10% of requests plus the floor."""

from __future__ import annotations

import random
import threading

import pytest

from libs.routing.retry import RetryBudget, RetryBudgetConfig
from tests.support.faults.clock import FakeClock


def _simulate(
    failure_ratio: float, requests_per_s: float, duration_s: float, config: RetryBudgetConfig, seed: int = 1
) -> tuple[int, int]:
    """Requests arrive at a steady rate; each failing attempt asks for a retry (up to 2 per request)."""
    clock = FakeClock()
    budget = RetryBudget(config, clock=clock)
    rng = random.Random(seed)
    requests = retries = 0
    step_s = 1.0 / requests_per_s
    for _ in range(int(duration_s * requests_per_s)):
        clock.advance(step_s)
        budget.record_request()
        requests += 1
        for _attempt in range(2):
            if rng.random() >= failure_ratio:
                break
            if not budget.try_spend_retry():
                break
            retries += 1
    return requests, retries


@pytest.mark.parametrize("requests_per_s", [20.0, 200.0])
def test_total_failure_retries_stay_within_ten_percent_plus_floor(requests_per_s: float) -> None:
    config = RetryBudgetConfig(retry_ratio=0.1, min_retries_per_s=1.0, max_tokens=10.0)
    duration_s = 120.0
    requests, retries = _simulate(1.0, requests_per_s, duration_s, config)
    bound = 0.1 * requests + config.max_tokens + config.min_retries_per_s * duration_s
    assert retries <= bound
    # The budget is really spent, not just never granted: nearly all of it goes to retries.
    assert retries >= 0.95 * (0.1 * requests + config.min_retries_per_s * duration_s)


def test_retry_ratio_converges_to_ten_percent_at_high_traffic() -> None:
    config = RetryBudgetConfig(retry_ratio=0.1, min_retries_per_s=1.0, max_tokens=10.0)
    requests, retries = _simulate(1.0, 2000.0, 60.0, config)
    assert retries / requests == pytest.approx(0.1, abs=0.002)  # the floor is 60 of 120,000 requests


def test_low_failure_ratio_is_fully_retried() -> None:
    config = RetryBudgetConfig()
    requests, retries = _simulate(0.03, 100.0, 60.0, config, seed=4)
    # About 3% of requests fail once (and 0.09% twice); all of those fit in the budget.
    expected = 0.03 * requests * (1 + 0.03)
    assert retries == pytest.approx(expected, rel=0.15)


def test_floor_lets_a_quiet_gateway_retry() -> None:
    clock = FakeClock()
    budget = RetryBudget(RetryBudgetConfig(retry_ratio=0.1, min_retries_per_s=1.0, max_tokens=2.0), clock=clock)
    assert [budget.try_spend_retry() for _ in range(3)] == [True, True, False]
    clock.advance(1.0)
    assert budget.try_spend_retry() and not budget.try_spend_retry()
    clock.advance(100.0)  # tokens are capped: a long quiet spell buys only max_tokens retries
    assert [budget.try_spend_retry() for _ in range(3)] == [True, True, False]


def test_budget_holds_under_concurrent_threads() -> None:
    clock = FakeClock()
    config = RetryBudgetConfig(retry_ratio=0.1, min_retries_per_s=0.0, max_tokens=5.0)
    budget = RetryBudget(config, clock=clock)
    granted = [0] * 8

    def worker(index: int) -> None:
        for _ in range(5000):
            budget.record_request()
            if budget.try_spend_retry():
                granted[index] += 1

    threads = [threading.Thread(target=worker, args=(index,)) for index in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # 40,000 requests earn 4,000 tokens; 5 were there at the start, and some may be left over.
    assert 4000 <= sum(granted) <= 4000 + 5


@pytest.mark.parametrize("kwargs", [{"retry_ratio": 1.5}, {"min_retries_per_s": -1.0}, {"max_tokens": 0.5}])
def test_budget_config_rejects_nonsense(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        RetryBudgetConfig(**kwargs)
