"""How much CPU this process may use: the cores it may run on, capped by its cgroup's CPU quota.

A Kubernetes CPU limit is a CFS quota: `quota` microseconds of CPU per `period` (100 ms) for all the
cgroup's threads together, so a limit of 500m is half a core however many cores the node has. Both
cgroup versions are read: v2 (`cpu.max`, "max 100000" or "50000 100000") and v1
(`cpu.cfs_quota_us` / `cpu.cfs_period_us`); the tightest quota on the way from the process's cgroup
to the root applies. Processes that share a budget (the same quota-limited cgroup, or a machine
without one) share its cores, and `group_id` names that budget so they can find each other
(libs.scheduling.ledger).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

CGROUP_ROOT: Final = Path("/sys/fs/cgroup")
BOOT_ID: Final = Path("/proc/sys/kernel/random/boot_id")


@dataclass(frozen=True)
class CpuBudget:
    """The CPU one process may use."""

    cores: float
    """CPU seconds per second at most (the quota's share of a core, or the cores it may run on)."""
    source: str
    """Where `cores` comes from, for logs and metrics ("cgroup v2 /pod/x", "affinity")."""
    group_id: str
    """The same for every process that shares this budget on this machine (a hash)."""
    quota_period_s: float = 0.0
    """The quota's period (seconds; 0 when no quota applies): within one, a group that has used its
    quota waits for the next."""


def read_cpu_budget(
    proc_self_cgroup: Path = Path("/proc/self/cgroup"),
    cgroup_root: Path = CGROUP_ROOT,
    affinity: Callable[[], int] = lambda: len(os.sched_getaffinity(0)),
    machine_id: Callable[[], str] = lambda: _read(BOOT_ID) or os.uname().nodename,
) -> CpuBudget:
    """This process's budget: the tightest CFS quota of its cgroups (v2 or v1), else its CPU affinity."""
    cores = float(affinity())
    best: tuple[float, str, float] | None = None  # (cores, cgroup path, period)
    for version, path in _cgroup_paths(proc_self_cgroup):
        for quota_cores, period_s, where in _quotas(version, path, cgroup_root):
            if best is None or quota_cores < best[0]:
                best = (quota_cores, f"cgroup {version} {where}", period_s)
    machine = machine_id()
    if best is not None and best[0] < cores:
        quota_cores, source, period_s = best
        return CpuBudget(quota_cores, source, _hash(machine, source), period_s)
    return CpuBudget(cores, "affinity", _hash(machine, "affinity", str(sorted(os.sched_getaffinity(0)))))


def _cgroup_paths(proc_self_cgroup: Path) -> list[tuple[str, str]]:
    """(version, path) of this process's cgroups that can hold a CPU quota."""
    text = _read(proc_self_cgroup)
    found = []
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        if controllers == "":
            found.append(("v2", path))
        elif "cpu" in controllers.split(","):
            found.append(("v1", path))
    return found


def _quotas(version: str, path: str, cgroup_root: Path) -> list[tuple[float, float, str]]:
    """(cores, period seconds, cgroup) of every quota from `path` up to its root."""
    found = []
    parts = [part for part in path.split("/") if part]
    for depth in range(len(parts), -1, -1):
        relative = "/".join(parts[:depth])
        if version == "v2":
            quota = _v2_quota(cgroup_root / relative / "cpu.max")
        else:
            quota = _v1_quota(cgroup_root / "cpu" / relative, cgroup_root / "cpu,cpuacct" / relative)
        if quota is not None:
            found.append((*quota, "/" + relative))
    return found


def _v2_quota(cpu_max: Path) -> tuple[float, float] | None:
    fields = _read(cpu_max).split()
    if len(fields) != 2 or fields[0] == "max":
        return None
    try:
        quota_us, period_us = int(fields[0]), int(fields[1])
    except ValueError:
        return None
    return (quota_us / period_us, period_us / 1e6) if quota_us > 0 and period_us > 0 else None


def _v1_quota(*directories: Path) -> tuple[float, float] | None:
    for directory in directories:
        quota_text, period_text = _read(directory / "cpu.cfs_quota_us"), _read(directory / "cpu.cfs_period_us")
        try:
            quota_us, period_us = int(quota_text), int(period_text)
        except ValueError:
            continue
        if quota_us > 0 and period_us > 0:
            return quota_us / period_us, period_us / 1e6
    return None


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return ""


def _hash(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]
