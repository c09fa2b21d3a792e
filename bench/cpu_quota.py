"""A CFS CPU quota for the processes a benchmark starts: a smaller machine, or a CPU-limited pod, on this one.

A Kubernetes CPU limit is exactly this: `quota` microseconds of CPU per 100 ms period for all the
cgroup's processes together. The benchmark makes a cgroup of its own under the cpu controller (v1,
`cpu.cfs_quota_us`; or v2, `cpu.max`), starts the mesh's processes in it (each joins before it
runs: `preexec`), and removes it afterwards. Needs write access to the cgroup tree (root).
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path
from typing import Final

CGROUP_ROOT: Final = Path("/sys/fs/cgroup")
PERIOD_US: Final = 100_000
"""The period Kubernetes uses."""
MAX_SHARES_V1: Final = 262_144
MAX_WEIGHT_V2: Final = 10_000
"""The quota's group also gets the highest CPU weight, so other processes on the machine cannot take
its quota from it: what runs inside sees a dedicated share of the cores, as a pod with a CPU request
equal to its limit does."""


class CpuQuotaError(RuntimeError):
    """The cgroup could not be made (no cpu controller, or no permission)."""


class CpuQuota:
    """A cgroup whose processes together get `cores` cores' worth of CPU (0.5: half a core), or, with
    `cores` None, no quota but the same top weight: for the benchmark's own client, which must not be
    starved by the mesh it measures (a client on another machine would not be)."""

    def __init__(self, cores: float | None, name: str | None = None, root: Path = CGROUP_ROOT) -> None:
        if cores is not None and cores <= 0:
            raise ValueError(f"cores must be positive, got {cores}")
        self.cores = cores
        self._name = name or f"tts-bench-{os.getpid()}-{time.monotonic_ns()}"
        self._root = root
        self._dir: Path | None = None
        self._v2 = False

    def __enter__(self) -> CpuQuota:
        quota_us = -1 if self.cores is None else max(1000, round(self.cores * PERIOD_US))
        v1 = self._root / "cpu"
        if (v1 / "cpu.cfs_quota_us").exists():
            directory = v1 / self._name
            try:
                directory.mkdir()
                (directory / "cpu.cfs_period_us").write_text(str(PERIOD_US))
                (directory / "cpu.cfs_quota_us").write_text(str(quota_us))
                (directory / "cpu.shares").write_text(str(MAX_SHARES_V1))
            except OSError as error:
                raise CpuQuotaError(f"cannot make a CPU quota under {v1}: {error}") from error
        elif (self._root / "cgroup.controllers").exists():
            self._v2 = True
            directory = self._root / self._name
            try:
                with contextlib.suppress(OSError):
                    (self._root / "cgroup.subtree_control").write_text("+cpu")
                directory.mkdir()
                (directory / "cpu.max").write_text(f"{'max' if quota_us < 0 else quota_us} {PERIOD_US}")
                (directory / "cpu.weight").write_text(str(MAX_WEIGHT_V2))
            except OSError as error:
                raise CpuQuotaError(f"cannot make a CPU quota under {self._root}: {error}") from error
        else:
            raise CpuQuotaError(f"no cgroup cpu controller under {self._root}")
        self._dir = directory
        return self

    @property
    def path(self) -> Path:
        assert self._dir is not None, "enter the quota first"
        return self._dir

    def add(self, pid: int) -> None:
        """Move process `pid` (and the threads it has) into the quota."""
        (self.path / "cgroup.procs").write_text(str(pid))

    def preexec(self) -> None:
        """For `subprocess.Popen(preexec_fn=...)`: the child joins the quota before it runs anything."""
        (self.path / "cgroup.procs").write_text(str(os.getpid()))

    def throttled_s(self) -> float:
        """Seconds the cgroup's processes spent throttled (waiting for the next period) so far."""
        if self._v2:
            stat = dict(line.split() for line in (self.path / "cpu.stat").read_text().splitlines())
            return int(stat.get("throttled_usec", 0)) / 1e6
        stat = dict(line.split() for line in (self.path / "cpu.stat").read_text().splitlines())
        return int(stat.get("throttled_time", 0)) / 1e9

    def __exit__(self, *exc: object) -> None:
        if self._dir is None:
            return
        parent = self._dir.parent / "cgroup.procs"
        for _ in range(50):  # processes may still be exiting
            pids = [line for line in (self._dir / "cgroup.procs").read_text().split() if line]
            for pid in pids:
                with contextlib.suppress(OSError):
                    parent.write_text(pid)
            try:
                self._dir.rmdir()
                break
            except OSError:
                time.sleep(0.1)
        self._dir = None
