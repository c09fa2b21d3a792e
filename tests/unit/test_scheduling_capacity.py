"""How many listeners a worker holds: its CPU budget (cgroup quotas, affinity), the processes it shares it
with (the ledger), and its cost per audio second."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from libs.scheduling.budget import read_cpu_budget
from libs.scheduling.capacity import WINDOW_AUDIO_S, AudioCost, SharedCapacity, with_children_cpu
from libs.scheduling.ledger import STALE_AFTER_S, CpuLedger, shared_costs


def _cgroup_v1(tmp_path: Path, path: str, quota_us: int, period_us: int = 100_000) -> tuple[Path, Path]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    proc = tmp_path / "cgroup"
    proc.write_text(f"4:memory:/x\n1:cpu,cpuacct:{path}\n0::/\n")
    directory = tmp_path / "sys" / "cpu" / path.strip("/")
    directory.mkdir(parents=True)
    (directory / "cpu.cfs_quota_us").write_text(str(quota_us))
    (directory / "cpu.cfs_period_us").write_text(str(period_us))
    return proc, tmp_path / "sys"


def test_a_cgroup_v1_quota_is_the_budget_and_names_its_group(tmp_path: Path) -> None:
    proc, root = _cgroup_v1(tmp_path, "/bench/pod-a", 50_000)
    budget = read_cpu_budget(proc, root, affinity=lambda: 2, machine_id=lambda: "machine")
    assert budget.cores == pytest.approx(0.5) and budget.quota_period_s == pytest.approx(0.1)
    assert "/bench/pod-a" in budget.source
    # Another process in the same cgroup shares the budget; the same path on another machine does not.
    assert read_cpu_budget(proc, root, affinity=lambda: 2, machine_id=lambda: "machine").group_id == budget.group_id
    assert read_cpu_budget(proc, root, affinity=lambda: 2, machine_id=lambda: "other").group_id != budget.group_id


def test_the_tightest_quota_up_the_tree_applies(tmp_path: Path) -> None:
    proc = tmp_path / "cgroup"
    proc.write_text("0::/kubepods/pod-b/container\n")
    for relative, value in (("kubepods", "max 100000"), ("kubepods/pod-b", "150000 100000"), ("kubepods/pod-b/container", "max 100000")):
        directory = tmp_path / "sys" / relative
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "cpu.max").write_text(value)
    budget = read_cpu_budget(proc, tmp_path / "sys", affinity=lambda: 4, machine_id=lambda: "m")
    assert budget.cores == pytest.approx(1.5) and "/kubepods/pod-b" in budget.source


def test_without_a_quota_the_budget_is_the_cores_the_process_may_run_on(tmp_path: Path) -> None:
    proc = tmp_path / "cgroup"
    proc.write_text("0::/\n")
    (tmp_path / "sys").mkdir()
    (tmp_path / "sys" / "cpu.max").write_text("max 100000")
    budget = read_cpu_budget(proc, tmp_path / "sys", affinity=lambda: 2, machine_id=lambda: "m")
    assert (budget.cores, budget.source, budget.quota_period_s) == (2.0, "affinity", 0.0)
    # A quota above the cores changes nothing: the cores are the limit.
    proc2, root2 = _cgroup_v1(tmp_path / "big", "/wide", 800_000)
    assert read_cpu_budget(proc2, root2, affinity=lambda: 2, machine_id=lambda: "m").cores == 2.0


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_cost_per_audio_second_is_measured_window_by_window_without_the_idle_time() -> None:
    cpu, wall = _Clock(), _Clock()
    cost = AudioCost(cpu_time=cpu, clock=wall)
    cost.calibrate(0.05)
    cpu.now += 5.0  # start-up, health checks: no audio is being made
    wall.now += 60.0
    assert not cost.produced(WINDOW_AUDIO_S / 4)  # the window starts with the audio
    cpu.now += 0.2
    wall.now += 0.5
    assert not cost.produced(WINDOW_AUDIO_S / 4)  # half a window: no new figure yet
    cpu.now += 0.2
    wall.now += 0.5
    assert cost.produced(WINDOW_AUDIO_S / 2)
    assert cost.cpu_s_per_audio_s == pytest.approx(0.05 + 0.3 * (0.4 / WINDOW_AUDIO_S - 0.05))
    cpu.now -= 1.0  # a clock that fell (a child process replaced): the window says nothing
    before = cost.cpu_s_per_audio_s
    assert not cost.produced(WINDOW_AUDIO_S)
    assert cost.cpu_s_per_audio_s == before


def _capacity(
    tmp_path: Path, kind: str, cost_s: float, cores: float = 2.0, pid: int | None = None, clock: _Clock | None = None
) -> SharedCapacity:
    from libs.scheduling.budget import CpuBudget

    budget = CpuBudget(cores, "test", "group")
    ledger = CpuLedger("group", kind, directory=tmp_path, pid=pid, alive=lambda pid: pid < 900_000)
    audio = AudioCost(cpu_time=lambda: 0.0)
    audio.calibrate(cost_s)
    capacity = SharedCapacity(kind, budget, ledger, audio, clock=clock or _Clock())
    capacity.publish()
    return capacity


def test_a_worker_alone_holds_its_budget_over_its_own_cost(tmp_path: Path) -> None:
    assert _capacity(tmp_path, "vocoder", 0.05).streams() == pytest.approx(40.0)


def test_workers_on_one_budget_share_it_by_the_sum_of_their_costs(tmp_path: Path) -> None:
    acoustic = _capacity(tmp_path, "acoustic", 0.02, pid=101)
    vocoder = _capacity(tmp_path, "vocoder", 0.03, pid=102)
    _capacity(tmp_path, "gateway", 0.01, pid=103)
    # Every stream passes through all three: 2 cores / 0.06 CPU s per audio s.
    assert acoustic.streams() == pytest.approx(2.0 / 0.06)
    assert vocoder.streams() == pytest.approx(2.0 / 0.06)
    # A second vocoder on the same budget: the streams are the same, each vocoder takes half, once the
    # first reads the ledger again (it keeps what it read for a second).
    clock = _Clock()
    first = _capacity(tmp_path, "vocoder", 0.03, pid=105, clock=clock)
    assert first.streams() == pytest.approx(2.0 / 0.06 / 2)
    _capacity(tmp_path, "vocoder", 0.03, pid=104)
    assert first.streams() == pytest.approx(2.0 / 0.06 / 2)  # read a moment ago
    clock.now += 1.5
    assert first.streams() == pytest.approx(2.0 / 0.06 / 3)


def test_entries_of_processes_that_are_gone_are_ignored_and_removed(tmp_path: Path) -> None:
    vocoder = _capacity(tmp_path, "vocoder", 0.05, pid=201)
    _capacity(tmp_path, "acoustic", 0.05, pid=999_999)  # not alive (the fake's rule)
    assert vocoder.streams() == pytest.approx(40.0)
    assert not (tmp_path / "tts-mesh-cpu-group" / "acoustic-999999.json").exists()
    stale = tmp_path / "tts-mesh-cpu-group" / "acoustic-202.json"
    stale.write_text('{"kind": "acoustic", "pid": 202, "cpu_s_per_audio_s": 0.05, "at": 0}')
    assert [entry.pid for entry in vocoder.ledger.entries()] == [201]
    assert STALE_AFTER_S > 0


def test_a_kind_whose_cost_is_not_known_yet_counts_its_known_peers_only() -> None:
    from libs.scheduling.ledger import LedgerEntry

    costs = shared_costs([LedgerEntry("gateway", 1, 0.0), LedgerEntry("vocoder", 2, 0.04), LedgerEntry("vocoder", 3, 0.02)])
    assert costs == {"gateway": (0.0, 1), "vocoder": (pytest.approx(0.03), 2)}


def test_a_process_and_its_children_count_their_cpu_together() -> None:
    own_only = with_children_cpu(list, own=lambda: 1.5)
    assert own_only() == 1.5
    with_self = with_children_cpu(lambda: [os.getpid()], own=lambda: 0.0)  # this process read as a child
    assert with_self() > 0
    assert with_children_cpu(lambda: [2**22 + 7], own=lambda: 1.0)() == 1.0  # a child that is gone adds nothing
