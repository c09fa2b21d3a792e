"""Picker: local zone first, spill rules, load balance, ejection and recovery."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from libs.routing.endpoints import Endpoint
from libs.routing.health import HealthConfig, HealthTable, Serving
from libs.routing.picker import Picker, PickerConfig
from tests.support.faults.clock import FakeClock

A0 = Endpoint("zone-a", "a0:1", "acoustic")
A1 = Endpoint("zone-a", "a1:1", "acoustic")
B0 = Endpoint("zone-b", "b0:1", "acoustic")
B1 = Endpoint("zone-b", "b1:1", "acoustic")
C0 = Endpoint("zone-c", "c0:1", "acoustic")
VA = Endpoint("zone-a", "va:1", "vocoder")
VB = Endpoint("zone-b", "vb:1", "vocoder")
ALL = (A0, A1, B0, B1, C0, VA, VB)

EJECT_FAST = HealthConfig(consecutive_failures=2, base_ejection_s=5.0, max_ejection_s=20.0, max_ejected_ratio=1.0)


class Setup:
    def __init__(self, strategy: str = "power_of_two", max_streams: int | None = None, seed: int = 7) -> None:
        self.clock = FakeClock()
        self.events: list[tuple[str, str, str]] = []
        self.table = HealthTable(ALL, EJECT_FAST, clock=self.clock)
        for endpoint in ALL:
            self.table.set_serving(endpoint, Serving.SERVING)
        self.picker = Picker(
            self.table,
            PickerConfig(local_zone="zone-a", strategy=strategy, max_streams_per_endpoint=max_streams),
            rng=random.Random(seed),
            on_event=lambda *event: self.events.append(event),
        )

    def zones_of(self, picks: int, **kwargs: object) -> Counter[str]:
        chosen = [self.picker.pick("acoustic", **kwargs) for _ in range(picks)]  # type: ignore[arg-type]
        return Counter(endpoint.zone if endpoint else "none" for endpoint in chosen)


def test_healthy_local_zone_takes_all_traffic() -> None:
    setup = Setup()
    assert setup.zones_of(200) == Counter({"zone-a": 200})
    assert setup.events == []


def test_picks_only_endpoints_of_the_requested_kind() -> None:
    setup = Setup()
    assert {setup.picker.pick("vocoder") for _ in range(50)} == {VA}


def test_spills_to_other_zones_when_local_zone_is_not_serving() -> None:
    setup = Setup()
    setup.table.set_serving(A0, Serving.NOT_SERVING)
    setup.table.set_serving(A1, Serving.UNKNOWN)
    zones = setup.zones_of(300)
    assert set(zones) == {"zone-b", "zone-c"}
    assert setup.events[0] == ("spill", setup.events[0][1], "local_unavailable")


def test_local_zone_failure_prefers_another_zone_even_with_local_capacity() -> None:
    setup = Setup()
    first = setup.picker.pick("acoustic")
    assert first is not None and first.zone == "zone-a"
    retry = setup.picker.pick("acoustic", exclude={first}, failed_zones={"zone-a"})
    assert retry is not None and retry.zone in {"zone-b", "zone-c"}
    assert setup.events == [("spill", retry.zone, "local_failed")]


def test_failure_in_a_remote_zone_moves_to_a_third_zone_before_going_back() -> None:
    setup = Setup()
    for endpoint in (A0, A1):
        setup.table.set_serving(endpoint, Serving.NOT_SERVING)
    # Failed in zone-b: zone-c is preferred over the rest of zone-b.
    assert setup.picker.pick("acoustic", exclude={B0}, failed_zones={"zone-b"}) == C0
    # Failed in zone-b and zone-c: the rest of zone-b is better than nothing.
    assert setup.picker.pick("acoustic", exclude={B0, C0}, failed_zones={"zone-b", "zone-c"}) == B1


def test_failed_local_zone_is_still_used_when_nothing_else_is_left() -> None:
    setup = Setup()
    for endpoint in (B0, B1, C0):
        setup.table.set_serving(endpoint, Serving.NOT_SERVING)
    assert setup.picker.pick("acoustic", exclude={A0}, failed_zones={"zone-a"}) == A1


def test_excluded_endpoints_are_never_picked() -> None:
    setup = Setup()
    picks = {setup.picker.pick("acoustic", exclude={A0}) for _ in range(100)}
    assert picks == {A1}


def test_returns_none_when_nothing_is_available() -> None:
    setup = Setup()
    for endpoint in (A0, A1, B0, B1, C0):
        setup.table.set_serving(endpoint, Serving.NOT_SERVING)
    assert setup.picker.pick("acoustic") is None
    assert setup.picker.pick("vocoder", exclude={VA, VB}) is None
    assert setup.events == [("no_endpoint", "zone-a", "acoustic"), ("no_endpoint", "zone-a", "vocoder")]


def test_ejected_endpoint_is_skipped_and_returns_after_recovery() -> None:
    setup = Setup()
    setup.table.record_failure(A0)
    setup.table.record_failure(A0)
    assert {setup.picker.pick("acoustic") for _ in range(100)} == {A1}
    setup.clock.advance(5.0)
    assert {setup.picker.pick("acoustic") for _ in range(100)} == {A0, A1}


def test_traffic_returns_to_local_zone_after_it_recovers() -> None:
    setup = Setup()
    for endpoint in (A0, A1):
        setup.table.record_failure(endpoint)
        setup.table.record_failure(endpoint)
    assert set(setup.zones_of(100)) == {"zone-b", "zone-c"}
    setup.clock.advance(5.0)
    assert setup.zones_of(100) == Counter({"zone-a": 100})


def test_full_endpoints_count_as_no_capacity_and_spill() -> None:
    setup = Setup(max_streams=2)
    for _ in range(2):
        setup.table.stream_started(A0)
        setup.table.stream_started(A1)
    chosen = setup.picker.pick("acoustic")
    assert chosen is not None and chosen.zone != "zone-a"
    setup.table.stream_finished(A1)
    assert setup.picker.pick("acoustic") == A1


def _mean_spread_under_churn(choose, table: HealthTable) -> float:  # type: ignore[no-untyped-def]
    """Open 3000 streams, ending a random open one whenever 30 are open; mean max-min load seen."""
    rng = random.Random(11)
    open_streams: list[Endpoint] = []
    spreads = []
    for _ in range(3000):
        chosen = choose()
        assert chosen is not None
        table.stream_started(chosen)
        open_streams.append(chosen)
        if len(open_streams) > 30:
            table.stream_finished(open_streams.pop(rng.randrange(len(open_streams))))
        loads = [status.outstanding_streams for status in table.statuses()]
        spreads.append(max(loads) - min(loads))
    return sum(spreads) / len(spreads)


def _serving_zone_a(count: int) -> tuple[list[Endpoint], HealthTable]:
    endpoints = [Endpoint("zone-a", f"a{index}:1", "acoustic") for index in range(count)]
    table = HealthTable(endpoints, clock=FakeClock())
    for endpoint in endpoints:
        table.set_serving(endpoint, Serving.SERVING)
    return endpoints, table


@pytest.mark.parametrize(("strategy", "max_mean_spread"), [("least_outstanding", 2.0), ("power_of_two", 3.5)])
def test_load_stays_balanced_under_churn_far_better_than_random(strategy: str, max_mean_spread: float) -> None:
    endpoints, table = _serving_zone_a(6)
    picker = Picker(table, PickerConfig(local_zone="zone-a", strategy=strategy), rng=random.Random(3))
    balanced = _mean_spread_under_churn(lambda: picker.pick("acoustic"), table)

    endpoints, random_table = _serving_zone_a(6)
    rng = random.Random(3)
    blind = _mean_spread_under_churn(lambda: rng.choice(endpoints), random_table)
    # Measured: least about 1.6, power of two about 2.8, blind random choice about 5.6.
    assert balanced <= max_mean_spread
    assert blind > 1.5 * max_mean_spread


def test_least_outstanding_fills_endpoints_evenly() -> None:
    _, table = _serving_zone_a(6)
    picker = Picker(table, PickerConfig(local_zone="zone-a", strategy="least_outstanding"), rng=random.Random(1))
    for _ in range(603):
        chosen = picker.pick("acoustic")
        assert chosen is not None
        table.stream_started(chosen)
    assert sorted(status.outstanding_streams for status in table.statuses()) == [100, 100, 100, 101, 101, 101]


def test_power_of_two_fills_endpoints_nearly_evenly() -> None:
    _, table = _serving_zone_a(8)
    picker = Picker(table, PickerConfig(local_zone="zone-a"), rng=random.Random(5))
    for _ in range(800):
        chosen = picker.pick("acoustic")
        assert chosen is not None
        table.stream_started(chosen)
    loads = [status.outstanding_streams for status in table.statuses()]
    assert sum(loads) == 800
    assert max(loads) - min(loads) <= 3


def test_picker_config_rejects_unknown_strategy() -> None:
    with pytest.raises(ValueError, match="round_robin"):
        PickerConfig(local_zone="zone-a", strategy="round_robin")
