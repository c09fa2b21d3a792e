"""The soak's verdict: growth measured from 5 minutes into each process's life to its end, a life too
short to measure left out, and a run that passes only with every stream equal and nothing grown."""

from __future__ import annotations

from bench.soak import WARM_S, Life, Tally, half_way_between_kills, report

MIB = 2**20


def _life(service: str, start_s: float, minutes: float, rss_mib: list[float], fds: list[int]) -> Life:
    life = Life(service, pid=100)
    step_s = minutes * 60 / (len(rss_mib) - 1)
    life.samples = [(start_s + index * step_s, int(rss * MIB), fd) for index, (rss, fd) in enumerate(zip(rss_mib, fds, strict=True))]
    return life


def test_growth_counts_from_five_minutes_into_a_life_so_start_up_is_not_growth() -> None:
    # 600 MiB at start, 1000 MiB once warm (5 min), 1050 MiB at the end: 5 % growth, not 75 %.
    life = _life("acoustic@zone-a", 0.0, 20.0, [600, 1000, 1000, 1020, 1050], [40, 60, 60, 61, 62])
    assert life.samples[1][0] - life.samples[0][0] == WARM_S
    rss_growth, fd_growth = life.growth()  # type: ignore[misc]
    assert abs(rss_growth - 0.05) < 1e-6 and fd_growth == 2


def test_a_life_shorter_than_the_warm_up_has_no_growth_to_report() -> None:
    assert _life("vocoder@zone-b", 600.0, 4.0, [500, 600, 610], [30, 31, 31]).growth() is None


def test_the_run_passes_only_with_every_stream_equal_no_error_and_nothing_grown() -> None:
    steady = _life("gateway", 0.0, 30.0, [300, 320, 330, 331, 332, 333, 334], [50, 52, 52, 52, 52, 52, 52])
    tally = Tally(completed=10, equal=10, pushback=3)
    _, passed = report(30, 0.7, 10.0, 7, tally, [steady], [])
    assert passed  # pushback refusals are allowed
    leaking = _life("gateway", 0.0, 30.0, [300, 320, 330, 350, 370, 380, 400], [50, 52, 52, 52, 52, 52, 52])
    assert not report(30, 0.7, 10.0, 7, tally, [leaking], [])[1]
    fds_leaking = _life("gateway", 0.0, 30.0, [300, 320, 330, 331, 332, 333, 334], [50, 52, 52, 60, 70, 80, 90])
    assert not report(30, 0.7, 10.0, 7, tally, [fds_leaking], [])[1]
    differing = Tally(completed=10, equal=9)
    assert not report(30, 0.7, 10.0, 7, differing, [steady], [])[1]
    failed = Tally(completed=10, equal=10)
    failed.errors["UNAVAILABLE: gone"] += 1
    assert not report(30, 0.7, 10.0, 7, failed, [steady], [])[1]


def test_redis_restarts_about_half_way_and_never_with_a_worker_kill() -> None:
    assert half_way_between_kills(30, 5) == 17.5
    assert half_way_between_kills(3, 1) == 1.5
    for minutes in (10, 20, 30, 60):
        at = half_way_between_kills(minutes, 5)
        assert at % 5 != 0 and abs(at - minutes / 2) <= 2.5
