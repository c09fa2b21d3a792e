"""A manual clock for tests of time-based policy (ejection, budgets)."""

from __future__ import annotations


class FakeClock:
    """Monotonic seconds that move only when a test calls `advance`."""

    def __init__(self, start_s: float = 1000.0) -> None:
        self.now_s = start_s

    def __call__(self) -> float:
        return self.now_s

    def advance(self, seconds: float) -> None:
        """Move time forward by `seconds` (never backward: the clock is monotonic)."""
        if seconds < 0:
            raise ValueError("a monotonic clock cannot go back")
        self.now_s += seconds
