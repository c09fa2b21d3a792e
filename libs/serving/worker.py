"""What both workers share: how they run their model (`WorkerSettings`), and their start-up: serve
health at once, load the model off the loop, then SERVING."""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Callable, Mapping
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any, Final, Protocol

import grpc
from prometheus_client import CollectorRegistry

from libs.scheduling.budget import CpuBudget
from libs.scheduling.capacity import SharedCapacity
from libs.scheduling.executor import UPSTREAM_URGENT_NICE, DeadlineExecutor
from libs.scheduling.scheduler import Scheduler
from libs.serving.admission import Admission, AdmissionSettings
from libs.serving.server import ServerSettings, ServiceRuntime, freeze_startup_heap
from libs.settings.fields import setting
from libs.telemetry.metrics import WorkerMetrics
from libs.voice.precision import DEFAULT_PRECISION, PRECISIONS

_log = logging.getLogger(__name__)

# The vocoder's steps are the heaviest: two side by side keep both cores busy whenever the acoustic
# worker idles.
DEFAULT_INFERENCE_THREADS: Final[Mapping[str, int]] = {"acoustic": 1, "vocoder": 2}
# Urgent threads take playing listeners' steps that must start now at normal priority, first-audio
# threads first audios a little lower, the inference threads what can wait lower still
# (libs.scheduling.executor): two of each lets two streams' steps of a kind run side by side.
DEFAULT_URGENT_THREADS: Final[Mapping[str, int]] = {"acoustic": 2, "vocoder": 2}
DEFAULT_FIRST_AUDIO_THREADS: Final[Mapping[str, int]] = {"acoustic": 2, "vocoder": 2}
BACKGROUND_PRIORITIES: Final = ("nice", "idle")
"""The OS priority of the inference threads beside the urgent ones: nice 19, or the kernel's idle policy.
Not idle by default: a background step under way at the idle policy makes no progress at all while other
processes in the cgroup keep the cores busy, where at nice 19 it still gets about 1.4% of a core beside
each busy thread at nice 0, and finishes. Both cut a first audio's wait under load alike."""
SCHEDULING_ORDERS: Final = ("deadline", "arrival")
"""How waiting model steps are ordered: earliest playback deadline first, or first come first served."""


@dataclass(frozen=True)
class WorkerSettings:
    """How a worker runs its model."""

    threads: int = setting(1, env="TTS_THREADS", doc="torch intra-op threads of the model", unit="count", minimum=1)
    device: str = setting("cpu", env="TTS_DEVICE", doc="torch device of the model, e.g. cpu or cuda")
    precision: str = setting(
        DEFAULT_PRECISION, env="TTS_PRECISION", choices=PRECISIONS,
        doc="model arithmetic; auto is bf16 on a GPU that runs it, and on a CPU with native bf16 whichever of the two the worker measures cheaper at start-up (recorded for the machine), else fp32",
    )  # fmt: skip
    slice_frames: int = setting(
        0, env="TTS_SLICE_FRAMES", unit="frames", minimum=0,
        doc="frames of the slices a CPU vocoder runs its wide float32 steps in; 0 measures the cheapest of 1, 2 and 4 times its cache rule's width at start-up (recorded for the machine). Part of the model version: pin it where pods cannot share the record and must resume each other's streams bit for bit",
    )  # fmt: skip
    # Off by default: on a CPU, streams side by side use the cores better than batches of them; a GPU wants batches.
    max_batch: int = setting(
        1, env="TTS_MAX_BATCH", doc="most streams whose model steps run as one batch (1: no batching)", unit="count", minimum=1
    )
    batch_wait_ms: float = setting(3.0, env="TTS_BATCH_WAIT_MS", doc="longest a model step waits for a batch to fill", unit="ms", minimum=0)
    inference_threads: int = setting(
        1, env="TTS_INFERENCE_THREADS", unit="count", minimum=1, by_service=DEFAULT_INFERENCE_THREADS,
        doc="threads running model steps of different streams side by side (raised to --max-batch: a batch forms only from steps in flight together)",
    )  # fmt: skip

    urgent_threads: int = setting(
        0, env="TTS_URGENT_THREADS", unit="count", minimum=0, by_service=DEFAULT_URGENT_THREADS,
        doc="threads for playing listeners' steps that must start now, at normal priority; the inference threads then run what can wait at a lower OS priority (0: one lane)",
    )  # fmt: skip
    first_audio_threads: int = setting(
        0, env="TTS_FIRST_AUDIO_THREADS", unit="count", minimum=0, by_service=DEFAULT_FIRST_AUDIO_THREADS,
        doc="threads for first audios, at an OS priority between the urgent and the inference threads (0: the urgent threads take them)",
    )  # fmt: skip

    background_priority: str = setting(
        "nice", env="TTS_BACKGROUND_PRIORITY", choices=BACKGROUND_PRIORITIES,
        doc="OS priority of the inference threads where there are urgent ones: nice (nice 19, the lowest: about 1.4% of a core beside a busy thread, so a first audio keeps nearly all of its core) or idle (the kernel's SCHED_IDLE: only what every other thread in the CPU cgroup leaves, so a step under way stops while anything else in the cgroup keeps the cores busy)",
    )  # fmt: skip

    scheduling: str = setting(
        "deadline", env="TTS_SCHEDULING", choices=SCHEDULING_ORDERS,
        doc="order of waiting model steps: deadline (the listener that runs dry first goes first) or arrival",
    )  # fmt: skip

    @property
    def step_threads(self) -> int:
        """Inference threads actually run: at least `max_batch`, or no batch could ever fill."""
        return max(self.inference_threads, self.max_batch)


def inference_executor(settings: WorkerSettings, budget: CpuBudget | None = None, *, upstream: bool = False) -> DeadlineExecutor:
    """The executor every engine call of a worker runs on, earliest playback deadline first; `upstream`
    for a worker whose steps another worker's follow (its urgent lane yields to theirs:
    libs.scheduling.executor.UPSTREAM_URGENT_NICE).

    With one thread (the default), streams take turns chunk by chunk and the model's own intra-op
    parallelism (--threads) uses the cores; more threads let several streams' steps run side by
    side, which batching needs (a batch forms only from steps that are in flight together, so on a
    GPU the batches are made of the steps with the earliest deadlines). A lane has no more threads
    than the CPU `budget` has cores: two steps sharing half a core both finish late, where one after
    the other the first is on time.
    """
    cores = max(1, math.ceil(budget.cores)) if budget is not None else None
    urgent = settings.urgent_threads if cores is None else min(settings.urgent_threads, cores)
    first = settings.first_audio_threads if cores is None else min(settings.first_audio_threads, cores)
    return DeadlineExecutor(
        settings.step_threads,
        name="inference",
        by_deadline=settings.scheduling == "deadline",
        urgent_threads=urgent if settings.max_batch <= 1 else 0,
        first_audio_threads=first,
        urgent_nice=UPSTREAM_URGENT_NICE if upstream else 0,
        background_idle=settings.background_priority == "idle",
    )


def worker_scheduling(
    kind: str,
    executor: DeadlineExecutor,
    settings: AdmissionSettings,
    metrics: WorkerMetrics,
    batched: Callable[[], bool],
    budget: CpuBudget | None = None,
) -> tuple[Scheduler, Admission]:
    """The worker's scheduler (cost model and capacity on `executor`, with its CPU `budget`) and its
    admission, with capacity, demand and load exported in `metrics`."""
    scheduler = Scheduler(kind, executor, metrics, capacity=SharedCapacity(kind, budget), batched=batched)
    admission = Admission(settings, scheduler=scheduler)
    metrics.track_realtime(lambda: admission.capacity_audio_s_per_s, lambda: admission.demand_audio_s_per_s)
    return scheduler, admission


def engine_settings(settings: WorkerSettings, on_batch: Callable[..., None] | None = None) -> Any:
    """The engine's run settings from the worker's flags."""
    from libs.voice.batching import BatchingConfig
    from libs.voice.engine import EngineSettings

    return EngineSettings(
        device=settings.device,
        precision=settings.precision,
        slice_frames=settings.slice_frames,
        batching=BatchingConfig(max_batch=settings.max_batch, max_wait_ms=settings.batch_wait_ms),
        on_batch=on_batch,
    )


def configure_torch(settings: WorkerSettings) -> None:
    """Apply the thread count before any model is built."""
    import torch

    torch.set_num_threads(settings.threads)
    # Inter-op parallelism only helps graphs with independent branches; ours are chains.
    torch.set_num_interop_threads(1)


async def run_worker(
    settings: WorkerServiceSettingsLike,
    service_name: str,
    registry: CollectorRegistry,
    executor: Executor,
    register: Callable[[grpc.aio.Server], None],
    load_engine: Callable[[], Any],
    install_engine: Callable[[Any], None],
    on_stop: Callable[[], None] | None = None,
) -> None:
    """A worker's life: serve health at once (NOT_SERVING), load and warm the engine in `executor`
    (`load_engine`), hand it to the servicer (`install_engine`), go SERVING, and run until signalled."""
    configure_torch(settings.worker)
    runtime = ServiceRuntime(settings.server, [service_name], registry)
    register(runtime.server)
    await runtime.start()
    loop = asyncio.get_running_loop()
    load = loop.run_in_executor(executor, load_engine)
    stop = asyncio.ensure_future(runtime.wait_for_stop())
    try:
        await asyncio.wait({load, stop}, return_when=asyncio.FIRST_COMPLETED)
        if load.done():
            install_engine(load.result())  # re-raises a failed load: the process exits non-zero
            freeze_startup_heap()
            await runtime.set_serving(True)
            _log.info("model loaded and warmed up: SERVING")
            await stop
    finally:
        stop.cancel()
        await runtime.shutdown()
        executor.shutdown(wait=False, cancel_futures=True)
        if on_stop is not None:
            on_stop()


class WorkerServiceSettingsLike(Protocol):
    """What `run_worker` reads of a worker service's settings (services.settings.WorkerServiceSettings)."""

    @property
    def server(self) -> ServerSettings: ...

    @property
    def worker(self) -> WorkerSettings: ...
