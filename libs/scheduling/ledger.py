"""Processes of the mesh that share one CPU budget find each other here, and what each one costs.

On one machine (`make run`), or in one pod, the acoustic worker, the vocoder worker and the gateway
use the same cores: each stream costs all of them, so the streams the cores hold are the budget over
the sum of their costs per audio second, not over any one's. Each process writes one small file
under a folder named by its budget (`CpuBudget.group_id`) in shared memory, and reads the others'.
A file whose process is gone, or that was not refreshed for STALE_AFTER_S, is ignored. Pods do not
share /dev/shm, so workers in separate pods (separate budgets) never see each other.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

LEDGER_DIR_ENV: Final = "TTS_LEDGER_DIR"
DEFAULT_LEDGER_DIRS: Final = (Path("/dev/shm"), Path(tempfile.gettempdir()))
STALE_AFTER_S: Final = 30.0
"""An entry not refreshed for this long is a process that no longer runs (it refreshes every few seconds)."""


@dataclass(frozen=True)
class LedgerEntry:
    """One process sharing the budget."""

    kind: str
    """"gateway", "acoustic" or "vocoder"."""
    pid: int
    """Its process id."""
    cpu_s_per_audio_s: float
    """CPU seconds it spends per second of audio that passes through it (0: not known yet)."""


class CpuLedger:
    """This process's entry in its budget's folder, and everyone's."""

    def __init__(
        self,
        group_id: str,
        kind: str,
        directory: Path | None = None,
        pid: int | None = None,
        alive: Callable[[int], bool] | None = None,
    ) -> None:
        self.kind = kind
        self.pid = os.getpid() if pid is None else pid
        self._alive = alive or _process_alive
        self._folder = _folder(directory, group_id)

    @property
    def available(self) -> bool:
        """Whether the ledger has a folder it can write (else only this process counts)."""
        return self._folder is not None

    def publish(self, cpu_s_per_audio_s: float) -> None:
        """Write (or refresh) this process's entry."""
        if self._folder is None:
            return
        entry = {"kind": self.kind, "pid": self.pid, "cpu_s_per_audio_s": cpu_s_per_audio_s, "at": time.time()}
        path = self._folder / f"{self.kind}-{self.pid}.json"
        temporary = path.with_suffix(".tmp")
        with contextlib.suppress(OSError):
            temporary.write_text(json.dumps(entry), encoding="utf-8")
            os.replace(temporary, path)

    def entries(self) -> list[LedgerEntry]:
        """The live entries of the budget, this process's included."""
        if self._folder is None:
            return []
        found = []
        now = time.time()
        for path in self._folder.glob("*.json"):
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
                entry = LedgerEntry(str(data["kind"]), int(data["pid"]), float(data["cpu_s_per_audio_s"]))
                fresh = now - float(data["at"]) < STALE_AFTER_S
            except (OSError, ValueError, KeyError, TypeError):
                continue
            if fresh and (entry.pid == self.pid or self._alive(entry.pid)):
                found.append(entry)
            elif not fresh or not self._alive(entry.pid):
                with contextlib.suppress(OSError):
                    path.unlink()
        return found

    def withdraw(self) -> None:
        """Remove this process's entry (at shutdown)."""
        if self._folder is not None:
            with contextlib.suppress(OSError):
                (self._folder / f"{self.kind}-{self.pid}.json").unlink()


def shared_costs(entries: list[LedgerEntry]) -> Mapping[str, tuple[float, int]]:
    """Per kind: (mean CPU seconds per audio second of its processes that know theirs, how many processes)."""
    by_kind: dict[str, list[float]] = {}
    for entry in entries:
        by_kind.setdefault(entry.kind, []).append(entry.cpu_s_per_audio_s)
    return {
        kind: (sum(known) / len(known) if (known := [cost for cost in costs if cost > 0]) else 0.0, len(costs))
        for kind, costs in by_kind.items()
    }


def _folder(directory: Path | None, group_id: str) -> Path | None:
    candidates = [directory] if directory is not None else []
    if not candidates and os.environ.get(LEDGER_DIR_ENV):
        candidates = [Path(os.environ[LEDGER_DIR_ENV])]
    candidates = candidates or list(DEFAULT_LEDGER_DIRS)
    for base in candidates:
        folder = base / f"tts-mesh-cpu-{group_id}"
        try:
            folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            probe = folder / f".probe-{os.getpid()}"
            probe.write_text("", encoding="ascii")
            probe.unlink()
            return folder
        except OSError:
            continue
    return None


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: it exists
        return True
    return True
