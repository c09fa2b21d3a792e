"""How many listeners a worker can keep playing: its CPU budget over what a stream costs it and the
processes it shares the budget with.

A worker measures its own cost, CPU seconds per audio second it makes (`AudioCost`: the process's
CPU time over the audio it made, window by window; calibrated at warm-up so it is known before the
first stream). It reads its budget (libs.scheduling.budget) and, through the ledger
(libs.scheduling.ledger), the costs of the other processes on that budget. Every stream passes
through one process of each kind, so the streams the budget holds in real time are

    budget cores / (sum over the kinds on the budget of their cost per audio second)

and a worker's own capacity is its share of that among the processes of its kind. This is exact
whatever the load (cost per audio second does not depend on how busy the worker is), so it is
right from the first stream, and it falls with the quota of a CPU-limited pod.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Final

from libs.scheduling.budget import CpuBudget, read_cpu_budget
from libs.scheduling.ledger import CpuLedger, shared_costs

_log = logging.getLogger(__name__)

WINDOW_AUDIO_S: Final = 20.0
"""Audio seconds per measurement window of the cost: many steps' worth (an acoustic chunk alone may
make seconds of audio), so a window's CPU is not a single step's."""
IDLE_GAP_S: Final = 1.0
"""A window whose audio stopped for this long starts again at the next audio: the CPU of a process
that waits (health checks, load reports, its own start-up) is not a stream's."""
WINDOW_WEIGHT: Final = 0.3
"""Share of the difference to a new window's cost that is taken."""
PUBLISH_EVERY_S: Final = 5.0
"""How often a process refreshes its ledger entry when its cost has not moved."""
READ_EVERY_S: Final = 1.0
"""How long the others' entries are reused before the ledger is read again."""


def process_cpu_s(pid: int) -> float:
    """CPU seconds process `pid` has used (user and system, its threads included; 0 once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text(encoding="ascii").rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime
    except (OSError, IndexError, ValueError):
        return 0.0


def with_children_cpu(children: Callable[[], list[int]], own: Callable[[], float] = time.process_time) -> Callable[[], float]:
    """A CPU clock of this process and its `children()` (pids) together: a gateway's text processes
    do part of its work. A child that is replaced takes its CPU with it, which a window then sees as
    a fall: `AudioCost` drops such a window."""
    return lambda: own() + sum(process_cpu_s(pid) for pid in children())


class AudioCost:
    """A process's CPU seconds per audio second, from its CPU time and the audio it made."""

    def __init__(self, cpu_time: Callable[[], float] = time.process_time, clock: Callable[[], float] = time.monotonic) -> None:
        self._cpu_time = cpu_time
        self._clock = clock
        self._lock = threading.Lock()
        self.cpu_s_per_audio_s = 0.0
        """The current estimate (0 until calibrated or measured)."""
        self._audio_s = 0.0
        self._window_started_cpu_s = cpu_time()
        self._last_audio_at_s = float("-inf")

    def calibrate(self, cpu_s_per_audio_s: float) -> None:
        """Start from a measured value (warm-up) and count windows from now."""
        with self._lock:
            self.cpu_s_per_audio_s = max(0.0, cpu_s_per_audio_s)
            self._audio_s = 0.0
            self._window_started_cpu_s = self._cpu_time()

    def produced(self, audio_s: float) -> bool:
        """`audio_s` more audio was made; True when that closed a window and moved the estimate."""
        with self._lock:
            now = self._clock()
            if now - self._last_audio_at_s > IDLE_GAP_S:  # after a pause: the window starts here
                self._audio_s, self._window_started_cpu_s = 0.0, self._cpu_time()
            self._last_audio_at_s = now
            self._audio_s += max(0.0, audio_s)
            if self._audio_s < WINDOW_AUDIO_S:
                return False
            now_cpu_s = self._cpu_time()
            measured = (now_cpu_s - self._window_started_cpu_s) / self._audio_s
            self._audio_s, self._window_started_cpu_s = 0.0, now_cpu_s
            if measured <= 0:  # a clock that fell (a child process replaced): this window says nothing
                return False
            current = self.cpu_s_per_audio_s
            self.cpu_s_per_audio_s = measured if current <= 0 else current + WINDOW_WEIGHT * (measured - current)
            return True


class SharedCapacity:
    """One process's view of the budget it shares: its cost, everyone's, and the streams that fit."""

    def __init__(
        self,
        kind: str,
        budget: CpuBudget | None = None,
        ledger: CpuLedger | None = None,
        cost: AudioCost | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.kind = kind
        self.budget = budget or read_cpu_budget()
        self.ledger = ledger if ledger is not None else CpuLedger(self.budget.group_id, kind)
        self.cost = cost or AudioCost()
        self._clock = clock
        self._published_s = float("-inf")
        self._read_s = float("-inf")
        self._others: dict[str, tuple[float, int]] = {}
        _log.info("CPU budget %.2f cores (%s)", self.budget.cores, self.budget.source)

    def produced(self, audio_s: float) -> bool:
        """This process made (or passed on) `audio_s` of audio; True when that moved its cost."""
        moved = self.cost.produced(audio_s)
        if moved or self._clock() - self._published_s > PUBLISH_EVERY_S:
            self.publish()
        return moved

    def publish(self) -> None:
        """Write this process's cost to the ledger now."""
        self.ledger.publish(self.cost.cpu_s_per_audio_s)
        self._published_s = self._clock()

    def streams(self) -> float:
        """Streams this process can keep in real time: its share of what the budget holds (0: unknown)."""
        own = self.cost.cpu_s_per_audio_s
        if own <= 0:
            return 0.0
        now = self._clock()
        if now - self._read_s > READ_EVERY_S:
            self._others, self._read_s = dict(shared_costs(self.ledger.entries())), now
        shared = dict(self._others)
        mine, processes = shared.get(self.kind, (own, 1))
        shared[self.kind] = (mine if mine > 0 else own, max(1, processes))
        per_stream_s = sum(cost for cost, _ in shared.values())
        if per_stream_s <= 0:
            return 0.0
        return self.budget.cores / per_stream_s / shared[self.kind][1]

    def close(self) -> None:
        """Leave the ledger."""
        self.ledger.withdraw()
