"""The cost model: a stage's step cost fitted as fixed + per-unit, its spread, and contention's stretch."""

from __future__ import annotations

import random

import pytest

from libs.scheduling.costs import (
    BACKGROUND_SLOWDOWN,
    MIN_RELATIVE_SPREAD,
    SPREAD_SIGMAS,
    Contention,
    CostModel,
    LinearCost,
    StepEstimate,
)


def test_a_stage_cost_is_fitted_as_a_fixed_part_and_a_cost_per_unit() -> None:
    cost = LinearCost()
    for units in (32, 64, 128, 32, 64, 128, 96, 288):
        cost.observe(units, 0.004 + 0.0002 * units)
    assert cost.fixed_s == pytest.approx(0.004, rel=1e-6)
    assert cost.per_unit_s == pytest.approx(0.0002, rel=1e-6)
    assert cost.predict(500) == pytest.approx(0.104)
    # Exact observations leave only the floor of the spread: the next step may still vary.
    assert cost.relative_sd == pytest.approx(MIN_RELATIVE_SPREAD)
    assert cost.predict_high(500) == pytest.approx(0.104 * (1 + SPREAD_SIGMAS * MIN_RELATIVE_SPREAD))


def test_steps_of_one_size_are_costed_per_unit() -> None:
    cost = LinearCost()
    for _ in range(5):
        cost.observe(128, 0.0256)
    assert (cost.fixed_s, cost.per_unit_s) == (0.0, pytest.approx(0.0002))


def test_the_fit_follows_a_machine_that_slows_down_and_its_spread_grows_with_noise() -> None:
    cost = LinearCost()
    rng = random.Random(7)
    for _ in range(60):
        units = rng.choice((32, 64, 128))
        cost.observe(units, 0.0001 * units)
    quiet_sd = cost.relative_sd
    for _ in range(120):  # the same steps now take three times as long, and vary by +-30 %
        units = rng.choice((32, 64, 128))
        cost.observe(units, 0.0003 * units * rng.uniform(0.7, 1.3))
    assert cost.predict(100) == pytest.approx(0.03, rel=0.15)
    assert cost.relative_sd > quiet_sd * 1.5
    assert cost.predict_high(100) > cost.predict(100) * 1.15


def test_nonsense_observations_are_ignored() -> None:
    cost = LinearCost()
    cost.observe(0, 1.0)
    cost.observe(10, float("nan"))
    cost.observe(10, -1.0)
    assert cost.observations == 0 and cost.predict(10) == 0.0


def test_contention_follows_the_stretch_of_most_steps_not_one_outlier() -> None:
    contention = Contention()
    for _ in range(200):
        contention.observe(wall_s=0.02, cpu_s=0.01)  # every step stretched twice: two threads a core
    assert contention.mean == pytest.approx(2.0, rel=0.05)
    assert contention.high == pytest.approx(2.0, rel=0.1)
    contention.observe(wall_s=1.0, cpu_s=0.01)  # one step held up by a long throttle
    assert contention.high < 2.5
    for _ in range(300):  # the machine is quiet again
        contention.observe(wall_s=0.01, cpu_s=0.01)
    assert contention.high == pytest.approx(1.0, abs=0.1)
    contention.observe(wall_s=1.0, cpu_s=0.0)  # no CPU: a step that only waited tells nothing
    assert contention.high == pytest.approx(1.0, abs=0.1)


def test_an_estimate_is_the_step_on_the_clock_and_what_must_follow_it() -> None:
    model = CostModel(("chunk",))
    for units in (32, 64, 128) * 20:
        model.observe("chunk", units, 0.0002 * units, wall_s=0.0004 * units)  # stretched twice
    estimate = model.estimate("chunk", 100, after_s=0.05)
    assert estimate.cpu_s == pytest.approx(0.02)
    assert estimate.wall_s >= 0.02 * 2 * 0.95  # the stretch, and the spread on top
    assert estimate.lead_s == pytest.approx(estimate.wall_s + 0.05)
    # Without a wall time (a background thread's step) the stretch is not learnt from it.
    high = model.contention.high
    model.observe("chunk", 64, 0.0128, wall_s=None)
    assert model.stages["chunk"].observations == 61 and model.contention.high == high


def test_a_step_on_a_background_thread_needs_a_longer_lead_from_its_lanes_stretch() -> None:
    estimate = StepEstimate(cpu_s=0.01, wall_s=0.012, lead_s=0.05, background_wall_s=0.2)
    assert estimate.background_lead_s == pytest.approx(0.05 - 0.012 + 0.2)
    model = CostModel(("chunk",))
    model.observe("chunk", 100, 0.01)
    # Before any background step is measured, the lane is expected to run a step BACKGROUND_SLOWDOWN times slower.
    assert model.estimate("chunk", 100).background_wall_s == pytest.approx(model.estimate("chunk", 100).wall_s * BACKGROUND_SLOWDOWN)
    for _ in range(200):  # a quota and three urgent threads: background steps stretch thirty times
        model.observe("chunk", 100, 0.01, wall_s=0.3, lane="background")
    assert model.estimate("chunk", 100).background_wall_s > 0.01 * 25
    for _ in range(200):  # a quiet spell: background steps ran alone, unstretched
        model.observe("chunk", 100, 0.01, wall_s=0.01, lane="background")
    # A step taken in a quiet spell still needs the lead of one that the urgent threads will crowd.
    assert model.estimate("chunk", 100).background_wall_s >= model.estimate("chunk", 100).wall_s * BACKGROUND_SLOWDOWN
    first = model.estimate("chunk", 100, first_audio=True)  # its own lane's stretch, not measured: none
    assert first.wall_s == pytest.approx(model.stages["chunk"].predict_high(100))
