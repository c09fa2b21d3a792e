"""Giving freed memory back to the operating system once a stream is over.

glibc's malloc keeps what a process frees for reuse: after a long sentence (its latent, mel and
samples) or a client that stopped reading, a process holds on to hundreds of MiB it no longer
uses, and its RSS, which admission (`--max-rss-mb`) and the container's limit go by, stays high.
`malloc_trim(0)` hands every free page of every arena back. It walks the heap, so it runs off the
event loop, a moment after streams end, at most once per `TRIM_INTERVAL_S`.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import logging
import time
from collections.abc import Callable
from typing import Final

_log = logging.getLogger(__name__)

TRIM_DELAY_S: Final = 0.5
"""How long after a stream ends the trim runs (streams that end together share one trim)."""
TRIM_INTERVAL_S: Final = 5.0
"""Least time between two trims: under steady load freed memory is reused soon anyway."""


def _load_malloc_trim() -> Callable[[int], int] | None:
    """glibc's malloc_trim, or None where the C library has none (musl, macOS)."""
    name = ctypes.util.find_library("c")
    try:
        trim = ctypes.CDLL(name).malloc_trim if name else None
    except (OSError, AttributeError):
        return None
    if trim is not None:
        trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim


_MALLOC_TRIM: Final = _load_malloc_trim()


def release_free_memory() -> bool:
    """Return the C heap's free pages to the operating system now; False where that is not possible."""
    if _MALLOC_TRIM is None:
        return False
    _MALLOC_TRIM(0)
    return True


class MemoryReleaser:
    """Trims the heap a moment after streams end, in a thread, at most once per `interval_s`."""

    def __init__(self, delay_s: float = TRIM_DELAY_S, interval_s: float = TRIM_INTERVAL_S) -> None:
        self._delay_s = delay_s
        self._interval_s = interval_s
        self._scheduled: asyncio.TimerHandle | None = None
        self._last_s = float("-inf")
        self.trims = 0
        """Trims run so far."""

    def stream_ended(self) -> None:
        """A stream is over: its memory is free to go back (call on the event loop)."""
        if self._scheduled is not None or _MALLOC_TRIM is None:
            return
        loop = asyncio.get_running_loop()
        wait_s = max(self._delay_s, self._last_s + self._interval_s - time.monotonic())
        self._scheduled = loop.call_later(wait_s, self._trim, loop)

    def call_done(self, _context: object) -> None:
        """`stream_ended` as a gRPC call's done callback (`context.add_done_callback`)."""
        self.stream_ended()

    def _trim(self, loop: asyncio.AbstractEventLoop) -> None:
        self._scheduled = None
        self._last_s = time.monotonic()
        self.trims += 1
        loop.run_in_executor(None, release_free_memory).add_done_callback(_log_failure)


def _log_failure(done: asyncio.Future[bool]) -> None:
    if not done.cancelled() and done.exception() is not None:
        _log.warning("malloc_trim failed: %s", done.exception())


RELEASER: Final = MemoryReleaser()
"""The process's releaser: every servicer tells it when a stream ends."""
