"""The start-up sequence both workers share: serve health at once, load the model off the loop, then SERVING."""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

from libs.mesh.server import ServiceRuntime, freeze_startup_heap
from libs.mesh.settings import WorkerSettings

_log = logging.getLogger(__name__)

def inference_executor(settings: WorkerSettings) -> ThreadPoolExecutor:
    """The executor every engine call of a worker runs on.

    With one thread (the default), streams take turns chunk by chunk and the model's own intra-op
    parallelism (--threads) uses the cores; more threads let several streams' steps run side by
    side, which batching needs (a batch forms only from steps that are in flight together).
    """
    return ThreadPoolExecutor(max_workers=settings.inference_threads, thread_name_prefix="inference")


def engine_settings(settings: WorkerSettings, on_batch: Callable[..., None] | None = None) -> Any:
    """The engine's run settings from the worker's flags."""
    from libs.voice.batching import BatchingConfig
    from libs.voice.engine import EngineSettings

    return EngineSettings(
        device=settings.device,
        precision=settings.precision,
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
    runtime: ServiceRuntime,
    executor: ThreadPoolExecutor,
    load_engine: Callable[[], Any],
    install_engine: Callable[[Any], None],
) -> None:
    """Start serving (NOT_SERVING), load and warm the engine in `executor`, go SERVING, run until signalled."""
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
