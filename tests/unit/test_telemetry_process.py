"""Process metrics: real RSS from this process, the start-up freeze of the heap, GPU memory only where CUDA is in use."""

from __future__ import annotations

import gc
import os
from pathlib import Path

import numpy as np
import pytest
import torch
from prometheus_client import REGISTRY, CollectorRegistry, generate_latest

from libs.serving.server import freeze_startup_heap
from libs.telemetry.process import (
    FROZEN_HEAP,
    GC_FROZEN_METRIC,
    GPU_ALLOCATED_METRIC,
    FrozenHeap,
    GcFrozenCollector,
    register_process_metrics,
)

RSS_READ_SLACK = 4 * 2**20
"""Bytes the gauge may differ from the kernel's reads around it (allocations of the read itself)."""


def _value(registry: CollectorRegistry, name: str, labels: dict[str, str] | None = None) -> float | None:
    return registry.get_sample_value(name, labels or {})


def _kernel_rss_bytes() -> int:
    """This process's resident set as the kernel counts it now."""
    return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _rss_between_kernel_reads(registry: CollectorRegistry) -> float:
    """The gauge, checked against the kernel's count read just before and just after it: other threads
    of this process (a suite's earlier tests) may free memory at any moment, so the gauge is held to
    what the kernel said around it, not to a fixed figure."""
    low = _kernel_rss_bytes()
    value = _value(registry, "process_resident_memory_bytes")
    high = _kernel_rss_bytes()
    assert value is not None
    assert min(low, high) - RSS_READ_SLACK <= value <= max(low, high) + RSS_READ_SLACK, (low, value, high)
    return value


def test_rss_gauge_reports_this_process_and_grows_with_an_allocation() -> None:
    registry = CollectorRegistry()
    register_process_metrics(registry)
    before = _rss_between_kernel_reads(registry)
    assert before > 10 * 2**20  # a Python process with numpy and torch loaded
    block = np.ones(256 * 2**20, dtype=np.uint8)  # 256 MiB, every page touched
    after = _rss_between_kernel_reads(registry)
    # Half the block: what other threads free meanwhile (40 MiB once, in a full suite) cannot hide it.
    assert after - before > 128 * 2**20
    del block


def test_start_up_freeze_takes_the_heap_out_of_full_collections_and_shows_in_the_gauge() -> None:
    registry = CollectorRegistry()
    register_process_metrics(registry)
    tracked = len(gc.get_objects())
    try:
        freeze_startup_heap()
        # Counted as frozen; frozen objects another thread lets go of since only lower the live count.
        frozen = _value(registry, GC_FROZEN_METRIC)
        assert frozen is not None and frozen >= gc.get_freeze_count() > 10_000  # torch alone brings more
        # A full pass no longer walks them: what it still sees is what was made since.
        assert len(gc.get_objects()) < tracked / 10
    finally:
        FROZEN_HEAP.unfreeze()
    assert _value(registry, GC_FROZEN_METRIC) == 0


def test_a_scrape_never_walks_the_frozen_heap(monkeypatch: pytest.MonkeyPatch) -> None:
    """Counting frozen objects walks them all with the GIL held (in a worker, about half a lone first
    audio's CPU): a scrape reads the count taken at the freeze instead."""
    heap = FrozenHeap()
    registry = CollectorRegistry()
    registry.register(GcFrozenCollector(heap))
    try:
        heap.freeze()
        counted = heap.count

        def walk() -> int:
            raise AssertionError("a scrape counted the frozen objects")

        monkeypatch.setattr(gc, "get_freeze_count", walk)
        assert counted > 10_000
        assert _value(registry, GC_FROZEN_METRIC) == counted
        assert f"{GC_FROZEN_METRIC} {float(counted)}" in generate_latest(registry).decode()
    finally:
        monkeypatch.undo()
        heap.unfreeze()
    assert _value(registry, GC_FROZEN_METRIC) == 0


def test_registering_twice_registers_nothing_twice() -> None:
    registry = CollectorRegistry()
    assert len(register_process_metrics(registry)) == 3
    assert register_process_metrics(registry) == []
    assert generate_latest(registry).decode().count("# TYPE process_resident_memory_bytes gauge") == 1


def test_default_registry_keeps_its_own_process_collector() -> None:
    added = register_process_metrics(REGISTRY)
    try:
        assert [type(collector).__name__ for collector in added] in ([], ["GcFrozenCollector", "GpuMemoryCollector"])
        assert _value(REGISTRY, "process_resident_memory_bytes") > 0
    finally:
        for collector in added:
            REGISTRY.unregister(collector)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only path")
def test_no_gpu_samples_without_cuda() -> None:
    registry = CollectorRegistry()
    register_process_metrics(registry)
    assert GPU_ALLOCATED_METRIC not in {
        sample.name for family in registry.collect() for sample in family.samples
    }


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_gpu_memory_gauges_follow_a_cuda_allocation() -> None:
    registry = CollectorRegistry()
    register_process_metrics(registry)
    device = {"device": "cuda:0"}
    tensor = torch.empty(64 * 2**20, dtype=torch.float32, device="cuda:0")  # 256 MiB
    torch.cuda.synchronize()
    allocated = _value(registry, GPU_ALLOCATED_METRIC, device)
    assert allocated is not None and allocated >= 256 * 2**20
    assert _value(registry, "tts_gpu_memory_reserved_bytes", device) >= allocated
    assert _value(registry, "tts_gpu_memory_total_bytes", device) > allocated
    del tensor
    torch.cuda.empty_cache()
    assert _value(registry, GPU_ALLOCATED_METRIC, device) < allocated
