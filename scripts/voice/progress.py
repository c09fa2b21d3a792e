"""A progress bar with an estimate of the time left, for a voice build.

A build is a few stages of known size (teacher renderings, optimiser steps, held-out sentences).
Each has a prior cost per unit, measured on the default voice's build on 2 cores; the estimate is
that prior scaled by how fast this machine has gone so far, and within a stage by the stage's own
measured pace once it has done a few units. On a terminal the bar redraws in place; elsewhere (a
log, CI) a line is written every tenth of the way.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, TextIO

BAR_WIDTH: Final = 30
REDRAW_S: Final = 0.5
_PACE_AFTER_UNITS: Final = 3


@dataclass
class Stage:
    """One stage of a build."""

    name: str
    """What it does ("teacher data", "mel head", ...)."""
    units: int
    """How many units of work it has."""
    prior_s_per_unit: float
    """Seconds per unit measured on the reference machine."""
    done: int = 0
    seconds: float = 0.0


def format_duration(seconds: float) -> str:
    """"12 min 5 s", "40 s"."""
    seconds = max(0, round(seconds))
    minutes, seconds = divmod(seconds, 60)
    return f"{minutes} min {seconds:02d} s" if minutes else f"{seconds} s"


class BuildProgress:
    """The bar of a build made of `stages`, drawn on `stream`."""

    def __init__(self, stages: list[Stage], stream: TextIO | None = None, clock: Callable[[], float] = time.perf_counter) -> None:
        self.stages = stages
        self._stream = stream if stream is not None else sys.stderr
        self._live = self._stream.isatty()
        self._clock = clock
        self._current = 0
        self._stage_started = clock()
        self._last_drawn = -1.0
        self._last_tenth = -1

    @property
    def fraction(self) -> float:
        """The share of the prior cost done so far (0 to 1)."""
        total = sum(stage.units * stage.prior_s_per_unit for stage in self.stages)
        done = sum(stage.done * stage.prior_s_per_unit for stage in self.stages)
        return done / total if total else 1.0

    def seconds_left(self) -> float:
        """The estimate of the time the build still needs."""
        finished = [stage for stage in self.stages if stage.done and stage.seconds]
        prior = sum(stage.done * stage.prior_s_per_unit for stage in finished)
        speed = sum(stage.seconds for stage in finished) / prior if prior else 1.0
        left = 0.0
        for index, stage in enumerate(self.stages):
            remaining = stage.units - stage.done
            if index == self._current and stage.done >= _PACE_AFTER_UNITS:
                left += remaining * stage.seconds / stage.done
            else:
                left += remaining * stage.prior_s_per_unit * speed
        return left

    def start(self, name: str) -> None:
        """The stage called `name` begins (stages run in order)."""
        self._current = next(index for index, stage in enumerate(self.stages) if stage.name == name)
        self._stage_started = self._clock()
        self.draw(force=True)

    def advance(self, units: int = 1) -> None:
        """`units` more of the current stage are done."""
        stage = self.stages[self._current]
        stage.done = min(stage.units, stage.done + units)
        stage.seconds = self._clock() - self._stage_started
        self.draw()

    def finish(self) -> None:
        """The build is done: the bar ends its line."""
        for stage in self.stages:
            stage.done = stage.units
        self.draw(force=True)
        if self._live:
            self._stream.write("\n")
            self._stream.flush()

    def line(self) -> str:
        """The bar as text."""
        fraction = self.fraction
        filled = round(fraction * BAR_WIDTH)
        stage = self.stages[self._current]
        left = "done" if fraction >= 1 else f"about {format_duration(self.seconds_left())} left"
        return f"[{'#' * filled}{'.' * (BAR_WIDTH - filled)}] {fraction:4.0%} {stage.name} {stage.done}/{stage.units}, {left}"

    def draw(self, force: bool = False) -> None:
        now = self._clock()
        if self._live:
            if force or now - self._last_drawn >= REDRAW_S:
                self._stream.write("\r" + self.line() + "\033[K")
                self._stream.flush()
                self._last_drawn = now
            return
        tenth = int(self.fraction * 10)
        if force or tenth > self._last_tenth:
            self._stream.write(self.line() + "\n")
            self._stream.flush()
            self._last_tenth = tenth
