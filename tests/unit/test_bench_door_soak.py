"""The door soak's report: each target met or MISSED by what the run saw (bench.door_soak)."""

from __future__ import annotations

from bench.door_soak import MAX_GROWTH_MIB, DoorStats, markdown


def _result(failed: list[str], left: float, spoken_after: bool, growth_mib: float) -> dict:
    return {
        "duration_s": 300.0, "clients": 6, "drop_share": 0.2,
        "stats": {"HTTP": DoorStats(spoken=10, dropped=2, failed=failed, first_audio_s=[0.1, 0.2]), "gRPC": DoorStats(), "WebSocket": DoorStats()},
        "left": {"gateway in flight": left, "gateway starting": 0.0}, "spoken_after": spoken_after,
        "memory": {"gateway": (300.0, 300.0 + growth_mib, 320.0), "redis": (10.0, 200.0, 200.0)},
    }  # fmt: skip


def test_a_clean_run_meets_every_target_and_redis_may_grow() -> None:
    report = markdown(_result([], 0.0, True, 3.0))
    assert "MISSED" not in report and report.count(", met") == 4
    assert "| HTTP | 10 | 2 | 0 | 150 / 200 |" in report


def test_failures_leftovers_silence_and_growth_are_each_missed() -> None:
    report = markdown(_result(["UNAVAILABLE"], 2.0, False, MAX_GROWTH_MIB + 1))
    assert report.count("MISSED") == 4
    assert "UNAVAILABLE" in report and "'gateway in flight': 2.0" in report
