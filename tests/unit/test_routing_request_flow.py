"""The gateway's request loop (`Attempts` over the health table, picker, retry policy and budget)
against simulated workers that answer at once (no network)."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable

import grpc

from libs.routing.attempts import AttemptFailure, Attempts
from libs.routing.endpoints import Endpoint
from libs.routing.health import HealthConfig, HealthTable, Serving
from libs.routing.picker import Picker, PickerConfig
from libs.routing.retry import RetryBudget, RetryBudgetConfig, RetryConfig, RetryPolicy
from tests.support.faults.clock import FakeClock

ENDPOINTS = [Endpoint(zone, f"{zone}-{index}:1", "acoustic") for zone in ("zone-a", "zone-b") for index in range(3)]

Worker = Callable[[Endpoint], grpc.StatusCode]


class SimulatedGateway:
    """One piece of work at a time through `Attempts`, each attempt answered by `worker` instantly."""

    def __init__(self, seed: int = 1) -> None:
        self.clock = FakeClock()
        self.events: Counter[tuple[str, str, str]] = Counter()

        def hook(kind: str, zone: str, reason: str) -> None:
            self.events[(kind, zone, reason)] += 1

        self.table = HealthTable(ENDPOINTS, HealthConfig(base_ejection_s=30.0), clock=self.clock, on_event=hook)
        for endpoint in ENDPOINTS:
            self.table.set_serving(endpoint, Serving.SERVING)
        self.picker = Picker(self.table, PickerConfig(local_zone="zone-a"), rng=random.Random(seed), on_event=hook)
        self.budget = RetryBudget(RetryBudgetConfig(), clock=self.clock)
        self.policy = RetryPolicy(RetryConfig(), budget=self.budget, rng=random.Random(seed), on_event=hook)
        self.attempts: list[Endpoint] = []

    def request(self, worker: Worker, deadline_s: float = 10.0) -> grpc.StatusCode:
        self.budget.record_request()
        started_s = self.clock()
        attempts = Attempts("acoustic", self.table, self.picker, self.policy)
        while True:
            endpoint = attempts.choose()
            if endpoint is None:
                return grpc.StatusCode.UNAVAILABLE
            self.attempts.append(endpoint)
            self.table.stream_started(endpoint)
            code = worker(endpoint)
            self.table.stream_finished(endpoint)
            if code is grpc.StatusCode.OK:
                attempts.succeeded(endpoint)
                return code
            remaining_s = deadline_s - (self.clock() - started_s)
            decision = attempts.failed(endpoint, AttemptFailure(code, code.name), remaining_s)
            if not decision.retry:
                return code
            self.clock.advance(decision.delay_s)


def _zone_a_down(endpoint: Endpoint) -> grpc.StatusCode:
    return grpc.StatusCode.UNAVAILABLE if endpoint.zone == "zone-a" else grpc.StatusCode.OK


def test_failed_local_attempt_is_retried_in_the_other_zone() -> None:
    gateway = SimulatedGateway()
    assert gateway.request(_zone_a_down) is grpc.StatusCode.OK
    assert [endpoint.zone for endpoint in gateway.attempts] == ["zone-a", "zone-b"]


def test_invalid_argument_is_answered_after_one_attempt() -> None:
    gateway = SimulatedGateway()
    assert gateway.request(lambda endpoint: grpc.StatusCode.INVALID_ARGUMENT) is grpc.StatusCode.INVALID_ARGUMENT
    assert len(gateway.attempts) == 1


def test_dead_local_zone_is_ejected_then_traffic_returns_when_it_recovers() -> None:
    gateway = SimulatedGateway()
    codes = []
    attempts_per_request = []
    for _ in range(40):
        before = len(gateway.attempts)
        codes.append(gateway.request(_zone_a_down))
        attempts_per_request.append([endpoint.zone for endpoint in gateway.attempts[before:]])
        gateway.clock.advance(0.1)
    assert gateway.events[("ejected", "zone-a", "consecutive_failures")] == 3
    # Ejecting three workers takes 15 failed attempts, a little more than the retry budget holds, so a
    # few early requests may fail (the health Watch usually sees a dead zone first); none fail later.
    failed = [index for index, code in enumerate(codes) if code is not grpc.StatusCode.OK]
    assert len(failed) <= 3 and all(index < 15 for index in failed)
    assert attempts_per_request[-20:] == [["zone-b"]] * 20
    gateway.clock.advance(300.0)
    gateway.attempts.clear()
    for _ in range(20):
        assert gateway.request(lambda endpoint: grpc.StatusCode.OK) is grpc.StatusCode.OK
    assert Counter(endpoint.zone for endpoint in gateway.attempts) == Counter({"zone-a": 20})


def test_everything_failing_costs_at_most_ten_percent_more_attempts_plus_floor() -> None:
    gateway = SimulatedGateway()
    requests = 2000
    started_s = gateway.clock()
    for _ in range(requests):
        gateway.request(lambda endpoint: grpc.StatusCode.RESOURCE_EXHAUSTED)  # never ejects; only the budget limits
        gateway.clock.advance(0.01)
    duration_s = gateway.clock() - started_s  # request spacing plus the backoff sleeps
    retries = len(gateway.attempts) - requests
    config = RetryBudgetConfig()
    assert retries <= 0.1 * requests + config.max_tokens + config.min_retries_per_s * duration_s
    assert retries >= 0.1 * requests  # the budget was spent, not sat on
    assert gateway.events[("retry_denied", "zone-a", "budget")] > 0
