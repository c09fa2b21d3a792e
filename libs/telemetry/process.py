"""Process metrics: resident memory (RSS), the objects frozen out of the garbage collector at
start-up and, when this process uses CUDA, GPU memory.

Nothing is registered at import time: a service calls `register_process_metrics(registry)` once
with the registry its `/metrics` endpoint serves. Calling it again, or on the default registry
(where prometheus-client already registers its process collector), registers nothing twice.

RSS comes from prometheus-client's own `ProcessCollector` under the standard names
(`process_resident_memory_bytes`, `process_cpu_seconds_total`, ...), so stock dashboards work.
GPU memory comes from torch's caching allocator, per device, only once the process has initialised
CUDA: asking an uninitialised device would create a CUDA context and itself take GPU memory.
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Iterator
from typing import Final

from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector

GPU_ALLOCATED_METRIC: Final = "tts_gpu_memory_allocated_bytes"
GPU_RESERVED_METRIC: Final = "tts_gpu_memory_reserved_bytes"
GPU_TOTAL_METRIC: Final = "tts_gpu_memory_total_bytes"
GC_FROZEN_METRIC: Final = "tts_gc_frozen_objects"
_GC_FROZEN_HELP: Final = "Objects taken out of the garbage collector's full passes at start-up (libs.serving.server.freeze_startup_heap)."


class FrozenHeap:
    """The objects this process froze out of the garbage collector, counted once, as they were frozen.

    Counting them (`gc.get_freeze_count()`) walks every one with the GIL held, and no other thread of
    the process runs Python meanwhile (the event loop, a first audio, a playing listener's step). In a
    worker, with torch and a voice loaded, that is about half the CPU a lone stream's first audio
    costs. Asked at every scrape, each scrape was such a pause in every service (about 12 times what
    the rest of a scrape costs); counted at the freeze, a scrape reads a number."""

    def __init__(self) -> None:
        self.count = 0
        """Objects frozen (0 while none are)."""

    def freeze(self) -> None:
        """Freeze every object tracked now (`gc.freeze`) and count them."""
        gc.freeze()
        self.count = gc.get_freeze_count()

    def unfreeze(self) -> None:
        """Give every frozen object back to the collector (`gc.unfreeze`): none is frozen then."""
        gc.unfreeze()
        self.count = 0


FROZEN_HEAP: Final = FrozenHeap()
"""This process's frozen heap (libs.serving.server.freeze_startup_heap freezes it)."""


class GcFrozenCollector(Collector):
    """How many objects this process froze out of the garbage collector (0 until it is ready)."""

    def __init__(self, heap: FrozenHeap = FROZEN_HEAP) -> None:
        self._heap = heap

    def collect(self) -> Iterator[GaugeMetricFamily]:
        yield GaugeMetricFamily(GC_FROZEN_METRIC, _GC_FROZEN_HELP, value=float(self._heap.count))

    def describe(self) -> Iterator[GaugeMetricFamily]:
        yield GaugeMetricFamily(GC_FROZEN_METRIC, _GC_FROZEN_HELP)


class GpuMemoryCollector(Collector):
    """Per-device GPU memory of this process as seen by torch's CUDA allocator."""

    def collect(self) -> Iterator[GaugeMetricFamily]:
        allocated = GaugeMetricFamily(GPU_ALLOCATED_METRIC, "GPU memory held by live tensors of this process.", labels=["device"])
        reserved = GaugeMetricFamily(
            GPU_RESERVED_METRIC, "GPU memory reserved by this process's caching allocator.", labels=["device"]
        )
        total = GaugeMetricFamily(GPU_TOTAL_METRIC, "Total memory of the GPU device.", labels=["device"])
        for index in _initialised_cuda_devices():
            import torch  # already imported: _initialised_cuda_devices checked sys.modules

            device = f"cuda:{index}"
            allocated.add_metric([device], float(torch.cuda.memory_allocated(index)))
            reserved.add_metric([device], float(torch.cuda.memory_reserved(index)))
            total.add_metric([device], float(torch.cuda.get_device_properties(index).total_memory))
        yield from (allocated, reserved, total)

    def describe(self) -> Iterator[GaugeMetricFamily]:
        # Names only, so registering never touches torch or the GPU.
        yield GaugeMetricFamily(GPU_ALLOCATED_METRIC, "", labels=["device"])
        yield GaugeMetricFamily(GPU_RESERVED_METRIC, "", labels=["device"])
        yield GaugeMetricFamily(GPU_TOTAL_METRIC, "", labels=["device"])


class _DescribedProcessCollector(ProcessCollector):
    """prometheus-client's process collector, made to declare its names so a registry refuses it twice."""

    def describe(self) -> Iterator[Metric]:
        # Its metrics come from /proc/self: reading them once is cheap.
        return iter(self.collect())


def _initialised_cuda_devices() -> range:
    """Device indices to report: none unless torch is loaded and CUDA is initialised in this process."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return range(0)
    return range(torch.cuda.device_count())


def register_process_metrics(registry: CollectorRegistry) -> list[Collector]:
    """Register RSS (and the other standard process metrics), frozen objects and GPU memory on `registry`.

    Returns the collectors it registered; those already present on `registry` are skipped, so a
    second call is harmless.
    """
    registered: list[Collector] = []
    for collector in (_DescribedProcessCollector(registry=None), GcFrozenCollector(), GpuMemoryCollector()):
        try:
            registry.register(collector)
        except ValueError:  # "Duplicated timeseries": this registry already has these metrics
            continue
        registered.append(collector)
    return registered
