"""Work that costs a test a known amount of CPU."""

from __future__ import annotations

import time


def spin(cpu_s: float) -> None:
    """Burn the calling thread's CPU for `cpu_s` seconds of its own CPU time, however long that takes on the clock."""
    end = time.thread_time() + cpu_s
    while time.thread_time() < end:
        pass
