"""HealthTable: serving state, outstanding streams and passive outlier ejection on a fake clock."""

from __future__ import annotations

import threading

import pytest

from libs.routing.endpoints import Endpoint
from libs.routing.health import HealthConfig, HealthTable, Serving
from tests.support.faults.clock import FakeClock

A0 = Endpoint("zone-a", "a0:1", "acoustic")
A1 = Endpoint("zone-a", "a1:1", "acoustic")
B0 = Endpoint("zone-b", "b0:1", "acoustic")
V0 = Endpoint("zone-a", "v0:1", "vocoder")

FAST = HealthConfig(consecutive_failures=3, base_ejection_s=2.0, max_ejection_s=5.0, ejection_decay_s=10.0, max_ejected_ratio=1.0)


def _serving_table(
    config: HealthConfig = FAST, endpoints: tuple[Endpoint, ...] = (A0, A1, B0, V0)
) -> tuple[HealthTable, FakeClock, list[tuple[str, str, str]]]:
    clock = FakeClock()
    seen: list[tuple[str, str, str]] = []
    table = HealthTable(endpoints, config, clock=clock, on_event=lambda *event: seen.append(event))
    for endpoint in endpoints:
        table.set_serving(endpoint, Serving.SERVING)
    seen.clear()
    return table, clock, seen


def _fail(table: HealthTable, endpoint: Endpoint, times: int) -> list[bool]:
    return [table.record_failure(endpoint) for _ in range(times)]


def test_only_serving_endpoints_are_available_by_default() -> None:
    table = HealthTable([A0, A1, B0], FAST, clock=FakeClock())
    assert [s.available for s in table.statuses()] == [False, False, False]  # unknown until a Watch reports
    table.set_serving(A0, Serving.SERVING)
    table.set_serving(A1, Serving.NOT_SERVING)
    assert [(s.endpoint, s.available) for s in table.statuses()] == [(A0, True), (A1, False), (B0, False)]


def test_unknown_health_is_routable_when_configured() -> None:
    config = HealthConfig(route_unknown=True)
    table = HealthTable([A0], config, clock=FakeClock())
    assert table.is_available(A0)
    table.set_serving(A0, Serving.NOT_SERVING)
    assert not table.is_available(A0)


def test_default_ejection_needs_five_consecutive_failures() -> None:
    table, _, _ = _serving_table(HealthConfig())
    assert _fail(table, A0, 5) == [False, False, False, False, True]
    assert not table.is_available(A0)


def test_success_between_failures_prevents_ejection() -> None:
    table, _, _ = _serving_table()
    _fail(table, A0, 2)
    table.record_success(A0)
    assert _fail(table, A0, 2) == [False, False]
    assert table.status(A0).consecutive_failures == 2
    assert table.is_available(A0)


def test_ejection_lasts_base_time_then_endpoint_returns() -> None:
    table, clock, seen = _serving_table()
    assert _fail(table, A0, 3) == [False, False, True]
    assert seen == [("ejected", "zone-a", "consecutive_failures")]
    assert table.status(A0).ejected_until_s == pytest.approx(clock() + 2.0)
    clock.advance(1.99)
    assert not table.is_available(A0)
    clock.advance(0.01)
    status = table.status(A0)
    assert status.available and status.ejected_until_s is None and status.consecutive_failures == 0
    assert seen[-1] == ("unejected", "zone-a", "ejection_expired")


def test_ejection_time_grows_with_each_ejection_and_is_capped() -> None:
    table, clock, _ = _serving_table()
    durations = []
    for _ in range(4):
        _fail(table, A0, 3)
        status = table.status(A0)
        durations.append(status.ejected_until_s - clock())
        clock.advance(durations[-1])
        assert table.is_available(A0)
    # base 2 s x ejection count: 2, 4, 6 -> capped at 5, 5
    assert durations == pytest.approx([2.0, 4.0, 5.0, 5.0])
    assert table.status(A0).ejection_count == 4


def test_ejection_count_decays_after_quiet_periods() -> None:
    table, clock, _ = _serving_table()
    _fail(table, A0, 3)
    clock.advance(2.0)
    _fail(table, A0, 3)  # second ejection: 4 s
    clock.advance(4.0)
    clock.advance(10.0)  # one full decay period of quiet forgets one ejection
    _fail(table, A0, 3)
    assert table.status(A0).ejection_count == 2
    assert table.status(A0).ejected_until_s - clock() == pytest.approx(4.0)


def test_returning_endpoint_needs_a_full_run_of_failures_again() -> None:
    table, clock, _ = _serving_table()
    _fail(table, A0, 3)
    clock.advance(2.0)
    assert table.is_available(A0)
    assert _fail(table, A0, 2) == [False, False]
    assert table.is_available(A0)


def test_failures_during_ejection_do_not_extend_it() -> None:
    table, _clock, seen = _serving_table()
    _fail(table, A0, 3)
    until_s = table.status(A0).ejected_until_s
    assert _fail(table, A0, 5) == [False] * 5  # in-flight streams failing after the ejection
    assert table.status(A0).ejected_until_s == until_s
    assert [event[0] for event in seen] == ["ejected"]


def test_max_ejected_ratio_keeps_part_of_a_kind_in_service() -> None:
    config = HealthConfig(consecutive_failures=1, base_ejection_s=1.0, max_ejection_s=1.0, max_ejected_ratio=0.5)
    table, _, seen = _serving_table(config, endpoints=(A0, A1, B0, V0))
    assert table.record_failure(A0)  # 1 of 3 acoustic
    assert not table.record_failure(A1)  # 2 of 3 would exceed half
    assert table.record_failure(V0)  # vocoders are counted on their own: 1 of 1 is always allowed
    assert seen == [
        ("ejected", "zone-a", "consecutive_failures"),
        ("ejection_skipped", "zone-a", "max_ejected_ratio"),
        ("ejected", "zone-a", "consecutive_failures"),
    ]
    assert [s.available for s in table.statuses("acoustic")] == [False, True, True]


def test_outstanding_streams_are_counted_and_released() -> None:
    table, _, _ = _serving_table()
    table.stream_started(A0)
    table.stream_started(A0)
    assert table.status(A0).outstanding_streams == 2
    table.stream_finished(A0)
    table.stream_finished(A0)
    assert table.status(A0).outstanding_streams == 0
    with pytest.raises(RuntimeError, match="stream_finished without stream_started"):
        table.stream_finished(A0)


def test_health_change_events_fire_only_on_change() -> None:
    table, _, seen = _serving_table()
    table.set_serving(A0, Serving.SERVING)
    table.set_serving(A0, Serving.NOT_SERVING)
    table.set_serving(A0, Serving.NOT_SERVING)
    assert seen == [("health_changed", "zone-a", "not_serving")]


def test_broken_event_hook_does_not_break_the_table() -> None:
    def explode(kind: str, zone: str, reason: str) -> None:
        raise RuntimeError("metrics down")

    table = HealthTable([A0], FAST, clock=FakeClock(), on_event=explode)
    table.set_serving(A0, Serving.SERVING)
    assert _fail(table, A0, 3)[-1] is True


def test_unknown_endpoint_is_a_clear_error() -> None:
    table, _, _ = _serving_table()
    with pytest.raises(KeyError, match="not in this health table"):
        table.stream_started(Endpoint("zone-c", "c0:1", "acoustic"))


def test_stream_counts_are_exact_under_threads() -> None:
    table, _, _ = _serving_table()

    def churn() -> None:
        for _ in range(2000):
            table.stream_started(A0)
            table.stream_finished(A0)
            table.stream_started(A0)

    threads = [threading.Thread(target=churn) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert table.status(A0).outstanding_streams == 8000


@pytest.mark.parametrize(
    "kwargs",
    [
        {"consecutive_failures": 0},
        {"base_ejection_s": 0.0},
        {"base_ejection_s": 10.0, "max_ejection_s": 5.0},
        {"ejection_decay_s": 0.0},
        {"max_ejected_ratio": 1.5},
    ],
)
def test_health_config_rejects_nonsense(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        HealthConfig(**kwargs)


def test_draining_endpoint_takes_no_new_stream_and_is_forgotten_once_its_streams_end() -> None:
    table, _, _ = _serving_table()
    table.stream_started(A0)
    table.drain(A0)
    status = table.status(A0)
    assert status.draining and not status.available and status.outstanding_streams == 1
    assert table.remove_drained() == []  # its stream is still running
    table.stream_finished(A0)
    assert table.remove_drained() == [A0]
    assert not table.tracks(A0) and not table.is_available(A0)
    assert table.record_failure(A0) is False  # a late failure report of a forgotten worker is ignored
    assert [status.endpoint for status in table.statuses("acoustic")] == [A1, B0]


def test_added_endpoint_waits_for_its_health_and_a_returning_one_stops_draining() -> None:
    table, _, _ = _serving_table()
    new = Endpoint("zone-a", "a2:1", "acoustic")
    assert table.add(new) is True
    assert not table.is_available(new)  # UNKNOWN until its Watch says SERVING
    table.set_serving(new, Serving.SERVING)
    assert table.is_available(new)
    table.drain(A1)
    assert table.add(A1) is False
    assert table.is_available(A1)


def test_draining_endpoints_do_not_count_towards_the_ejection_cap() -> None:
    config = HealthConfig(consecutive_failures=1, base_ejection_s=2.0, max_ejection_s=5.0, max_ejected_ratio=0.5)
    table, _, _ = _serving_table(config, endpoints=(A0, A1, B0))
    table.drain(B0)
    # Two live acoustic endpoints: half of them is one, so the second failure may not eject.
    assert _fail(table, A0, 1) == [True]
    assert _fail(table, A1, 1) == [False]
