"""RetryPolicy: retryable codes, attempt limit, full-jitter backoff, pushback and deadlines."""

from __future__ import annotations

import random
import statistics

import grpc
import pytest

from libs.routing.retry import Pushback, RetryBudget, RetryBudgetConfig, RetryConfig, RetryPolicy, parse_pushback
from tests.support.faults.clock import FakeClock

TRANSIENT = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.RESOURCE_EXHAUSTED}
CONFIG = RetryConfig(max_attempts=3, base_backoff_s=0.1, max_backoff_s=0.3, min_attempt_time_s=0.05)


def _policy(seed: int = 1, budget: RetryBudget | None = None, events: list | None = None) -> RetryPolicy:
    hook = (lambda *event: events.append(event)) if events is not None else (lambda *event: None)
    return RetryPolicy(CONFIG, budget=budget, rng=random.Random(seed), on_event=hook)


@pytest.mark.parametrize("code", sorted(TRANSIENT, key=lambda code: code.name))
def test_transient_codes_are_retried(code: grpc.StatusCode) -> None:
    decision = _policy().decide(attempts_made=1, code=code)
    assert decision.retry and decision.reason == "backoff"
    assert 0.0 <= decision.delay_s <= 0.1


@pytest.mark.parametrize("code", [code for code in grpc.StatusCode if code not in TRANSIENT])
def test_every_other_code_is_final(code: grpc.StatusCode) -> None:
    decision = _policy().decide(attempts_made=1, code=code, trailing_metadata=[("grpc-retry-pushback-ms", "10")])
    assert decision == decision.__class__(retry=False, delay_s=0.0, reason="not_retryable")


def test_at_most_three_attempts() -> None:
    events: list[tuple[str, str, str]] = []
    policy = _policy(events=events)
    outcomes = [
        policy.decide(attempts_made=attempts, code=grpc.StatusCode.UNAVAILABLE, zone="zone-b").retry for attempts in (1, 2, 3, 4)
    ]
    assert outcomes == [True, True, False, False]
    assert events[:3] == [
        ("retry", "zone-b", "unavailable"),
        ("retry", "zone-b", "unavailable"),
        ("retry_denied", "zone-b", "max_attempts"),
    ]


def test_backoff_ceiling_doubles_and_is_capped() -> None:
    policy = _policy()
    assert [policy.backoff_ceiling_s(index) for index in range(5)] == pytest.approx([0.1, 0.2, 0.3, 0.3, 0.3])
    assert policy.backoff_ceiling_s(10_000) == pytest.approx(0.3)


@pytest.mark.parametrize("retry_index", [0, 1, 4])
def test_full_jitter_is_uniform_below_the_ceiling(retry_index: int) -> None:
    policy = _policy(seed=12345)
    ceiling_s = policy.backoff_ceiling_s(retry_index)
    draws = [policy.backoff_s(retry_index) for _ in range(20_000)]
    assert min(draws) >= 0.0 and max(draws) <= ceiling_s
    # Uniform(0, c): mean c/2 (std error c/sqrt(12 n) ~ 0.002 c), quartiles at c/4, c/2, 3c/4.
    assert statistics.fmean(draws) == pytest.approx(ceiling_s / 2, rel=0.02)
    quartiles = statistics.quantiles(draws, n=4)
    assert quartiles == pytest.approx([ceiling_s / 4, ceiling_s / 2, 3 * ceiling_s / 4], rel=0.04)
    # Full jitter reaches both ends of the range, unlike "equal jitter".
    assert min(draws) < 0.01 * ceiling_s and max(draws) > 0.99 * ceiling_s


def test_decide_uses_the_ceiling_of_its_attempt() -> None:
    policy = _policy(seed=3)
    second_retry = [policy.decide(attempts_made=2, code=grpc.StatusCode.UNAVAILABLE).delay_s for _ in range(5000)]
    assert max(second_retry) <= 0.2 and max(second_retry) > 0.19
    assert statistics.fmean(second_retry) == pytest.approx(0.1, rel=0.05)


def test_pushback_delay_is_waited_exactly() -> None:
    decision = _policy().decide(
        attempts_made=1, code=grpc.StatusCode.RESOURCE_EXHAUSTED, trailing_metadata=[("grpc-retry-pushback-ms", "750")]
    )
    assert decision.retry and decision.reason == "pushback"
    assert decision.delay_s == pytest.approx(0.75)  # longer than max_backoff_s: the server knows best


@pytest.mark.parametrize("value", ["-1", "soon", "1.5", "", " 10", "+10", b"\xff", "99999999999"])
def test_negative_or_garbage_pushback_means_do_not_retry(value: str | bytes) -> None:
    events: list[tuple[str, str, str]] = []
    decision = _policy(events=events).decide(
        attempts_made=1,
        code=grpc.StatusCode.UNAVAILABLE,
        trailing_metadata=[("grpc-retry-pushback-ms", value)],
        zone="zone-a",
    )
    assert not decision.retry and decision.reason == "pushback_stop"
    assert events == [("retry_denied", "zone-a", "pushback_stop")]


def test_parse_pushback() -> None:
    assert parse_pushback(None) is None
    assert parse_pushback([("other", "1")]) is None
    assert parse_pushback([("grpc-retry-pushback-ms", "0")]) == Pushback(delay_s=0.0)
    assert parse_pushback([("Grpc-Retry-Pushback-Ms", b"250")]) == Pushback(delay_s=0.25)
    assert parse_pushback([("grpc-retry-pushback-ms", "1"), ("grpc-retry-pushback-ms", "2")]) == Pushback(delay_s=None)


def test_no_retry_when_the_deadline_leaves_no_time_for_an_attempt() -> None:
    policy = _policy()
    assert policy.decide(attempts_made=1, code=grpc.StatusCode.UNAVAILABLE, remaining_s=0.04).reason == "deadline"
    pushback = [("grpc-retry-pushback-ms", "500")]
    unavailable = grpc.StatusCode.UNAVAILABLE
    assert policy.decide(attempts_made=1, code=unavailable, trailing_metadata=pushback, remaining_s=0.5).reason == "deadline"
    assert policy.decide(attempts_made=1, code=unavailable, trailing_metadata=pushback, remaining_s=0.56).retry


def test_backoff_never_sleeps_past_the_deadline() -> None:
    policy = _policy(seed=9)
    remaining_s = 0.08  # below the 0.1 s ceiling: the draw is bounded by what the deadline allows
    delays = [
        policy.decide(attempts_made=1, code=grpc.StatusCode.UNAVAILABLE, remaining_s=remaining_s) for _ in range(2000)
    ]
    assert all(decision.retry for decision in delays)
    assert max(decision.delay_s for decision in delays) <= remaining_s - CONFIG.min_attempt_time_s
    assert max(decision.delay_s for decision in delays) > 0.029


def test_budget_is_consulted_last_and_denies_when_spent() -> None:
    clock = FakeClock()
    budget = RetryBudget(RetryBudgetConfig(retry_ratio=0.1, min_retries_per_s=0.0, max_tokens=1.0), clock=clock)
    events: list[tuple[str, str, str]] = []
    policy = _policy(budget=budget, events=events)
    # A final code must not spend a token.
    assert policy.decide(attempts_made=1, code=grpc.StatusCode.INVALID_ARGUMENT).reason == "not_retryable"
    assert policy.decide(attempts_made=1, code=grpc.StatusCode.UNAVAILABLE).retry
    decision = policy.decide(attempts_made=1, code=grpc.StatusCode.UNAVAILABLE, zone="zone-c")
    assert (decision.retry, decision.reason) == (False, "budget")
    assert events[-1] == ("retry_denied", "zone-c", "budget")
    for _ in range(10):
        budget.record_request()
    assert policy.decide(attempts_made=1, code=grpc.StatusCode.UNAVAILABLE).retry


def test_a_retry_outside_the_budget_spends_no_token_and_keeps_every_other_rule() -> None:
    budget = RetryBudget(RetryBudgetConfig(retry_ratio=0.0, min_retries_per_s=0.0, max_tokens=1.0), clock=FakeClock())
    policy = _policy(budget=budget)
    assert policy.decide(attempts_made=1, code=grpc.StatusCode.UNAVAILABLE).retry  # the one token
    assert policy.decide(attempts_made=1, code=grpc.StatusCode.UNAVAILABLE).reason == "budget"
    assert policy.decide(attempts_made=1, code=grpc.StatusCode.UNAVAILABLE, budgeted=False).retry
    assert budget.tokens() == 0.0
    assert policy.decide(attempts_made=CONFIG.max_attempts, code=grpc.StatusCode.UNAVAILABLE, budgeted=False).reason == "max_attempts"
    assert policy.decide(attempts_made=1, code=grpc.StatusCode.INVALID_ARGUMENT, budgeted=False).reason == "not_retryable"


@pytest.mark.parametrize(
    "kwargs",
    [{"max_attempts": 0}, {"base_backoff_s": -1.0}, {"base_backoff_s": 2.0, "max_backoff_s": 1.0}, {"min_attempt_time_s": -0.1}],
)
def test_retry_config_rejects_nonsense(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        RetryConfig(**kwargs)
