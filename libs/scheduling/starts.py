"""Processes that share one CPU budget say when first audios are under way in them.

A first audio passes through both workers in turn (the acoustic worker's plan and first chunk, then
the vocoder's first step). Each worker's background lane makes audio ahead of need only with what the
rest leaves, and holds while its own first audios wait; but it cannot see the other worker's. At nice
10 a background step still takes about a quarter of a core from a first-audio step at nice 5, and it
runs to its end once started: in Poisson arrivals at 0.8 of the capacity on one core, the slowest
first audios had up to 77 ms of background steps' CPU inside their waits, some of it begun after the
listener asked, in the other worker or beside the first audio's own running step (docs/performance.md,
2026-12-06). So each process writes how many first-audio steps it has queued or running
to a small file beside its ledger entry (libs.scheduling.ledger), mapped into memory, and reads the
others' the same way: a background lane holds while the first audios under way in the whole budget
take all its cores.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import struct
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Final, Protocol

from libs.scheduling.ledger import CpuLedger, process_alive

LINGER_S: Final = 0.02
"""How long a process still counts one first audio under way after its last one left it: the hop that
carries a first chunk's mel through the gateway to the vocoder takes a millisecond or two, and a
background step started in that gap would hold the core for tens."""
FRESH_FOR_S: Final = 5.0
"""How long a count stands without a change: one left by a process that died mid-step, or whose process
id was reused, stops holding the others' background lanes after this."""
PEERS_EVERY_S: Final = 1.0
"""How long the list of other processes' files is reused before the folder is read again."""
_LAYOUT: Final = struct.Struct("<dd")  # (first-audio steps under way, the count stands until: time.monotonic())
SUFFIX: Final = ".starts"


class StartSignal(Protocol):
    """What an executor needs of a board: to say its own first audios, and to hear the others'."""

    def under_way(self, count: int) -> None:
        """This process now has `count` first-audio steps queued or running."""

    def under_way_all(self) -> int:
        """First-audio steps under way now in every process of the budget, this one's included."""


class StartBoard:
    """This process's count of first audios under way, shared through memory-mapped files."""

    def __init__(
        self,
        folder: Path | None,
        kind: str,
        pid: int | None = None,
        alive: Callable[[int], bool] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`folder`: the budget's ledger folder (None: nothing is shared, and no other process counts)."""
        self._folder = folder
        self._pid = os.getpid() if pid is None else pid
        self._alive = alive or process_alive
        self._clock = clock
        self._lock = threading.Lock()
        self._own: mmap.mmap | None = None
        self._peers: dict[Path, tuple[int, mmap.mmap]] = {}
        self._peers_read_s = float("-inf")
        self._path = folder / f"{kind}-{self._pid}{SUFFIX}" if folder is not None else None
        if self._path is not None:
            with contextlib.suppress(OSError, ValueError):
                self._path.write_bytes(_LAYOUT.pack(0.0, 0.0))
                with self._path.open("r+b") as handle:
                    self._own = mmap.mmap(handle.fileno(), _LAYOUT.size)

    @classmethod
    def of(cls, ledger: CpuLedger) -> StartBoard:
        """The board beside `ledger`'s entries."""
        return cls(ledger.folder, ledger.kind, ledger.pid)

    def under_way(self, count: int) -> None:
        if self._own is None:
            return
        # A count that falls to none lingers as one for LINGER_S: the next worker's step is on its way.
        until_s = self._clock() + (LINGER_S if count <= 0 else FRESH_FOR_S)
        _LAYOUT.pack_into(self._own, 0, float(max(0, count)), until_s)

    def under_way_all(self) -> int:
        if self._own is None:
            return 0
        now = self._clock()
        with self._lock:
            if now - self._peers_read_s > PEERS_EVERY_S:
                self._read_peers()
                self._peers_read_s = now
            total = 0
            for board in [self._own, *(board for _, board in self._peers.values())]:
                try:
                    count, until_s = _LAYOUT.unpack_from(board, 0)
                except (ValueError, TypeError, struct.error):  # closed under us
                    continue
                if until_s > now:
                    total += max(1, int(count))
            return total

    def close(self) -> None:
        """Leave the board (at shutdown)."""
        with self._lock:
            for _, board in self._peers.values():
                board.close()
            self._peers.clear()
            if self._own is not None:
                self._own.close()
                self._own = None
        if self._path is not None:
            with contextlib.suppress(OSError):
                self._path.unlink()

    def _read_peers(self) -> None:
        """Map the files of the other live processes; drop those of processes that are gone."""
        assert self._folder is not None
        seen: set[Path] = set()
        for path in self._folder.glob(f"*{SUFFIX}"):
            pid = _pid_of(path)
            if pid is None or pid == self._pid:
                continue
            if not self._alive(pid):
                with contextlib.suppress(OSError):
                    path.unlink()
                continue
            seen.add(path)
            if path not in self._peers:
                with contextlib.suppress(OSError, ValueError), path.open("rb") as handle:
                    self._peers[path] = (pid, mmap.mmap(handle.fileno(), _LAYOUT.size, access=mmap.ACCESS_READ))
        for path in [path for path in self._peers if path not in seen]:
            self._peers.pop(path)[1].close()


def _pid_of(path: Path) -> int | None:
    """The process id in a board file's name ("vocoder-1234.starts")."""
    try:
        return int(path.name[: -len(SUFFIX)].rsplit("-", 1)[1])
    except (IndexError, ValueError):
        return None

