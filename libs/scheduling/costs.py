"""What a worker's model steps cost on the machine it runs on, measured, not assumed.

Each stage's step costs CPU time in proportion to its size plus a fixed part (`LinearCost`: a plan
per phoneme id, a flow + mel head chunk or a vocoder step per frame). The fit starts from a
calibration at warm-up and follows every step that runs after, so it holds on any CPU, at any
precision, and moves when the machine does. How long a step takes on the clock is its CPU time
stretched by contention: other threads on the same cores, and a CPU quota's throttling
(`Contention`, wall time over CPU time of recent steps). Deadlines, guards and capacity are all
computed from these two (docs/ARCHITECTURE.md, "Scheduling and admission").
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final

DECAY: Final = 0.97
"""Weight an observation keeps per later observation: the fit follows the last ~30 steps of a stage."""
SPREAD_SIGMAS: Final = 1.0
"""A step's high estimate is its mean plus this many standard deviations of the recent relative error
(about the 84th percentile of a normal spread). Leads built from high estimates of every part would
mark work urgent long before it is, and urgent work crowding the cores is what stretches steps."""
MIN_RELATIVE_SPREAD: Final = 0.1
"""The high estimate is never below the mean times 1 + SPREAD_SIGMAS x this: a fit that has seen only
steady steps still leaves room for the next one to vary."""
CONTENTION_QUANTILE: Final = 0.9
"""The share of recent steps whose stretch `Contention.high` stays above."""
QUANTILE_STEP: Final = 0.05
"""How far one step moves `Contention.high`, as a share of it: it follows a change within ~20 steps."""
BACKGROUND_SLOWDOWN: Final = 1134 / 110
"""The least a background step is expected to be stretched: a tenth of an urgent thread's pace (what
a thread at nice 10 gets beside a busy one at nice 0, 110/1134 by the kernel's weights). A background
step is taken only while it would be in time even so, since once it runs on a background thread
nothing can hurry it when its deadline comes near. At the background lane's nice 19 (weight 15) or
the kernel's idle policy (weight 3; libs.scheduling.executor) a busy thread beside it leaves it less,
so the lane's measured stretch is what counts above this: this is the least, for a lane that has
measured only quiet spells. Kept at a tenth when the lane went from nice 10 to nice 19: it is what the
measured gain ran with. At nice 19's own 69, audio made ahead is left to the urgent threads in all
but the longest spells of slack, and they come to it too late more often: in Poisson arrivals at 0.8
of the capacity on a quarter of a core, 8 of 46 listeners ran dry against 1 of 46 at a tenth
(docs/performance.md, "History")."""
URGENT_LANE, FIRST_AUDIO_LANE, BACKGROUND_LANE = "urgent", "first", "background"
"""The lanes of a worker's threads (libs.scheduling.executor), each stretched by contention of its own."""


@dataclass
class LinearCost:
    """CPU seconds of one stage's step as `fixed_s + per_unit_s * units`, fitted by exponentially
    weighted least squares to the steps observed, with the spread of their relative error."""

    fixed_s: float = 0.0
    """CPU seconds every step costs whatever its size."""
    per_unit_s: float = 0.0
    """CPU seconds per unit (phoneme id, frame)."""
    relative_sd: float = MIN_RELATIVE_SPREAD
    """Standard deviation of (observed / predicted - 1) over recent steps."""
    observations: int = 0
    """Steps observed since the fit started."""
    _w: float = field(default=0.0, repr=False)
    _wx: float = field(default=0.0, repr=False)
    _wy: float = field(default=0.0, repr=False)
    _wxx: float = field(default=0.0, repr=False)
    _wxy: float = field(default=0.0, repr=False)
    _wsq: float = field(default=0.0, repr=False)

    def observe(self, units: float, cpu_s: float) -> None:
        """A step of `units` took `cpu_s` CPU seconds."""
        if units <= 0 or not math.isfinite(cpu_s) or cpu_s < 0:
            return
        if self.observations:
            predicted = self.predict(units)
            if predicted > 0:
                error = cpu_s / predicted - 1.0
                self._wsq = DECAY * self._wsq + (1 - DECAY) * error * error
                self.relative_sd = max(MIN_RELATIVE_SPREAD, math.sqrt(self._wsq))
        self._w = DECAY * self._w + 1.0
        self._wx = DECAY * self._wx + units
        self._wy = DECAY * self._wy + cpu_s
        self._wxx = DECAY * self._wxx + units * units
        self._wxy = DECAY * self._wxy + units * cpu_s
        self.observations += 1
        self._refit()

    def _refit(self) -> None:
        variance = self._w * self._wxx - self._wx * self._wx
        # Sizes that barely vary cannot separate the fixed part from the slope: cost is then per unit.
        if variance <= 1e-9 * max(1.0, self._w * self._wxx):
            self.fixed_s, self.per_unit_s = 0.0, self._wy / self._wx if self._wx > 0 else 0.0
            return
        slope = (self._w * self._wxy - self._wx * self._wy) / variance
        intercept = (self._wy - slope * self._wx) / self._w
        if slope < 0 or intercept < 0:  # noise on few sizes: keep the physically meaningful form
            slope, intercept = max(0.0, slope), max(0.0, intercept)
            if slope == 0.0 and intercept == 0.0:
                slope = self._wy / self._wx if self._wx > 0 else 0.0
        self.fixed_s, self.per_unit_s = intercept, slope

    def predict(self, units: float) -> float:
        """Expected CPU seconds of a step of `units`."""
        return self.fixed_s + self.per_unit_s * max(0.0, units)

    def predict_high(self, units: float) -> float:
        """CPU seconds a step of `units` stays under nearly always (mean plus SPREAD_SIGMAS spreads)."""
        return self.predict(units) * (1.0 + SPREAD_SIGMAS * self.relative_sd)


@dataclass
class Contention:
    """How much the clock stretches a step's CPU time now: wall seconds over CPU seconds of recent steps
    on one lane's threads (other threads on the same cores, higher priorities first, a CPU quota's
    throttling).

    Both figures are exponentially weighted: the mean, and a running estimate of the CONTENTION_QUANTILE
    (each step moves it up when the step was stretched more, down otherwise, by steps that balance at
    that quantile), which one step preempted for long cannot blow up as a standard deviation would."""

    mean: float = 1.0
    """Recent wall / CPU, at least 1."""
    high: float = 1.0
    """The stretch recent steps stayed under CONTENTION_QUANTILE of the time."""

    @classmethod
    def expecting(cls, stretch: float) -> Contention:
        """A lane whose steps are expected to stretch `stretch` times until measured."""
        return cls(mean=stretch, high=stretch)

    def observe(self, wall_s: float, cpu_s: float) -> None:
        """A step took `wall_s` on the clock and `cpu_s` of CPU."""
        if cpu_s <= 1e-5 or not math.isfinite(wall_s):
            return
        ratio = max(1.0, wall_s / cpu_s)
        self.mean += (1 - DECAY) * (ratio - self.mean)
        step = QUANTILE_STEP * self.high
        if ratio > self.high:
            self.high += step * CONTENTION_QUANTILE
        else:
            self.high = max(1.0, self.high - step * (1 - CONTENTION_QUANTILE))


@dataclass(frozen=True)
class StepEstimate:
    """What one queued step is expected to take, for the executor's order."""

    cpu_s: float = 0.0
    """Expected CPU seconds."""
    wall_s: float = 0.0
    """Wall seconds it takes on an urgent thread, as the cores are shared now (its high CPU estimate, stretched)."""
    lead_s: float = 0.0
    """How long before its deadline it must start: `wall_s` plus what must follow it before the
    listener has the audio (the next worker's step, the hops)."""
    background_wall_s: float = 0.0
    """Wall seconds it takes on a background thread nearly always, as the background lane is stretched now."""

    @property
    def background_lead_s(self) -> float:
        """The lead on a background thread: how long before its deadline a background thread must take it."""
        return self.lead_s - self.wall_s + max(self.background_wall_s, self.wall_s)


NO_ESTIMATE: Final = StepEstimate()


class CostModel:
    """One worker's stages: a `LinearCost` each, and the contention of each lane of its threads
    (libs.scheduling.executor: urgent, first audio, background). Thread-safe: the inference threads
    observe, the event loop estimates."""

    def __init__(self, stages: Iterable[str], budget_cores: float = 1.0) -> None:
        """`budget_cores`: the CPU the worker may use; below one core no step runs faster than that
        share of a core (a quota of half a core stretches every step at least twice)."""
        self._costs = {stage: LinearCost() for stage in stages}
        self.min_stretch = 1.0 / min(1.0, max(budget_cores, 1e-3))
        """The least any step is stretched, by the budget alone."""
        self.lanes = {
            URGENT_LANE: Contention.expecting(self.min_stretch),
            FIRST_AUDIO_LANE: Contention.expecting(self.min_stretch),
            # Before a background step is measured: one urgent thread on its core.
            BACKGROUND_LANE: Contention.expecting(self.min_stretch * BACKGROUND_SLOWDOWN),
        }
        self._lock = threading.Lock()

    @property
    def contention(self) -> Contention:
        """The urgent lane's: what a playing listener's step at normal priority meets."""
        return self.lanes[URGENT_LANE]

    @property
    def stages(self) -> Mapping[str, LinearCost]:
        """The fit of every stage (read-only use)."""
        return self._costs

    @property
    def calibrated(self) -> bool:
        """Whether every stage has seen at least one step."""
        return all(cost.observations for cost in self._costs.values())

    def observe(self, stage: str, units: float, cpu_s: float, wall_s: float | None = None, lane: str = URGENT_LANE) -> None:
        """A `stage` step of `units` took `cpu_s` of CPU, and `wall_s` on the clock on a thread of `lane`
        (None: not timed on a lane, e.g. at start-up)."""
        with self._lock:
            self._costs[stage].observe(units, cpu_s)
            if wall_s is not None and lane in self.lanes:
                self.lanes[lane].observe(wall_s, cpu_s)

    def cpu_s(self, stage: str, units: float) -> float:
        """Expected CPU seconds of a `stage` step of `units`."""
        return self._costs[stage].predict(units)

    def wall_s(self, stage: str, units: float, lane: str = URGENT_LANE) -> float:
        """Wall seconds a `stage` step of `units` takes on a thread of `lane` now: its high CPU estimate
        stretched by the lane's mean contention (the spread is counted once, in the CPU)."""
        with self._lock:
            return self._costs[stage].predict_high(units) * max(self.lanes[lane].mean, self.min_stretch)

    def estimate(self, stage: str, units: float, after_s: float = 0.0, first_audio: bool = False) -> StepEstimate:
        """The estimate of a `stage` step of `units` followed by `after_s` of other work before its
        listener has the audio (a first audio's, on its own lane, when `first_audio`)."""
        with self._lock:
            cpu_high = self._costs[stage].predict_high(units)
            lane = self.lanes[FIRST_AUDIO_LANE if first_audio else URGENT_LANE]
            wall_s = cpu_high * max(lane.mean, self.min_stretch)
            # A background step must be in time nearly always: by the lane's high stretch, and never
            # less than BACKGROUND_SLOWDOWN. A quiet spell lowers what the lane measures, and a step
            # started then cannot speed up when the urgent threads wake.
            background_s = cpu_high * max(self.lanes[BACKGROUND_LANE].high, self.min_stretch * BACKGROUND_SLOWDOWN)
        return StepEstimate(
            cpu_s=self.cpu_s(stage, units), wall_s=wall_s, lead_s=wall_s + max(0.0, after_s), background_wall_s=background_s
        )
