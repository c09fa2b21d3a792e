"""Worker admission control: refuse a new stream when the worker is out of room.

A worker that takes a stream it cannot serve makes every stream on it slower and may run out of
memory. It refuses at stream start instead, with RESOURCE_EXHAUSTED and a `grpc-retry-pushback-ms`
hint, and the gateway reroutes. The limits: open streams, inference queue depth, process resident
memory (CPU) and free GPU memory (CUDA devices), and real time. The gateway admits a listener only
when the listeners it already serves keep playing (libs.synthesis.admission, by their buffers); the
worker is the backstop for what no one gateway sees: it refuses when its most urgent step is already
late to start, and when its streams exceed `--realtime-overcommit` times what it makes in real time
(libs.scheduling.capacity). Each is a setting; 0 switches a limit off.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

import grpc

from libs.scheduling.scheduler import Scheduler
from libs.settings.fields import setting
from libs.wire.headers import (
    FAST_MODEL_VERSION_METADATA_KEY,
    GATEWAY_METADATA_KEY,
    LISTENING_METADATA,
    MODEL_VERSION_METADATA_KEY,
    PUSHBACK_METADATA_KEY,
    STREAM_ACCEPTED_METADATA,
    STREAM_LIMIT_METADATA_KEY,
)

_log = logging.getLogger(__name__)

# One inference thread takes streams in turns, chunk by chunk: past a few dozen open streams each
# one gets its next chunk later than its audio plays, so more streams only make all of them late.
DEFAULT_MAX_STREAMS: Final = 32
# The batcher's own queue bound is 64 jobs; refusing new streams at half of it leaves the streams
# already admitted the other half.
DEFAULT_MAX_QUEUE_DEPTH: Final = 32
DEFAULT_MAX_RSS_MB: Final = 0
"""Off by default: the right bound is ~90% of the container's memory limit, which only the deployment knows."""
# A sentence's activations on a GPU take tens of MiB; below half a GiB free the next batch may fail.
DEFAULT_MIN_FREE_GPU_MB: Final = 512
# About one chunk's compute on a busy worker: long enough for a stream to finish or a queue to drain.
DEFAULT_PUSHBACK_MS: Final = 200
# The share of the real-time capacity that listeners may need: a tenth stays for what the cost model
# does not see coming (a longer sentence, another process on the cores).
DEFAULT_REALTIME_HEADROOM: Final = 0.9
# Streams with audio buffered need less than one audio second per second for a while, so the gateway
# may hold more streams than the capacity; twice it is what no buffer covers for long.
DEFAULT_REALTIME_OVERCOMMIT: Final = 2.0

_MIB: Final = 1024 * 1024


@dataclass(frozen=True)
class AdmissionSettings:
    """When a worker refuses new streams."""

    max_streams: int = setting(
        DEFAULT_MAX_STREAMS, env="TTS_MAX_STREAMS", doc="open streams at which a worker refuses new ones (0: no limit)",
        unit="count", minimum=0,
    )  # fmt: skip
    max_queue_depth: int = setting(
        DEFAULT_MAX_QUEUE_DEPTH, env="TTS_MAX_QUEUE_DEPTH", unit="count", minimum=0,
        doc="inference jobs waiting for a batch at which a worker refuses new streams (0: no limit)",
    )  # fmt: skip
    max_rss_mb: int = setting(
        DEFAULT_MAX_RSS_MB, env="TTS_MAX_RSS_MB", unit="MiB", minimum=0,
        doc="process memory above which a worker refuses new streams (0: no limit; ~90% of the container's limit)",
    )  # fmt: skip
    min_free_gpu_mb: int = setting(
        DEFAULT_MIN_FREE_GPU_MB, env="TTS_MIN_FREE_GPU_MB", unit="MiB", minimum=0,
        doc="free memory of a CUDA device below which a worker refuses new streams (0: no limit)",
    )  # fmt: skip
    realtime_headroom: float = setting(
        DEFAULT_REALTIME_HEADROOM, env="TTS_REALTIME_HEADROOM", unit="ratio", minimum=0, maximum=1,
        doc="share of the real-time capacity (audio s per s) that open streams may demand before new ones are refused (0: no limit)",
    )  # fmt: skip
    realtime_capacity: float = setting(
        0.0, env="TTS_REALTIME_CAPACITY", unit="audio s per s", minimum=0,
        doc="the worker's real-time capacity, if known; 0 computes it from its CPU budget and measured costs",
    )  # fmt: skip
    realtime_overcommit: float = setting(
        DEFAULT_REALTIME_OVERCOMMIT, env="TTS_REALTIME_OVERCOMMIT", unit="ratio", minimum=1,
        doc="streams a worker holds, as a multiple of the usable real-time capacity, before it refuses new ones "
        "(the gateway admits by its listeners' buffers; this is the backstop)",
    )  # fmt: skip
    pushback_ms: int = setting(
        DEFAULT_PUSHBACK_MS, env="TTS_OVERLOAD_PUSHBACK_MS", unit="ms", minimum=0,
        doc="retry-pushback hint a worker sends with a refusal",
    )  # fmt: skip


def process_rss_mb() -> float:
    """This process's resident memory now (MiB), from /proc; 0 where /proc is missing."""
    try:
        with open("/proc/self/statm", encoding="ascii") as statm:
            resident_pages = int(statm.read().split()[1])
    except (OSError, IndexError, ValueError):
        return 0.0
    return resident_pages * os.sysconf("SC_PAGE_SIZE") / _MIB


def free_gpu_mb(device: str) -> float | None:
    """Free memory of a CUDA `device` (MiB), or None for a CPU device."""
    if not device.startswith("cuda"):
        return None
    import torch  # a GPU worker has loaded it long before the first stream

    free_bytes, _ = torch.cuda.mem_get_info(torch.device(device))
    return free_bytes / _MIB


def refusal_reason(
    settings: AdmissionSettings,
    *,
    open_streams: int,
    queue_depth: int,
    rss_mb: float,
    free_gpu_mb: float | None,
    capacity_audio_s_per_s: float = 0.0,
    behind_s: float = 0.0,
    step_s: float = 0.0,
    listening: bool = False,
) -> str | None:
    """Why a new stream must be refused given the worker's state, or None to admit it: `behind_s` is
    how late the most urgent waiting step is to start, `step_s` what one step takes now (0: not known,
    and then lateness is not judged). A stream whose listener already has audio of its utterance
    (`listening`) is judged by the hard limits alone: the gateway admitted it, and refusing it here
    would cut the listener off mid-utterance rather than keep work away."""
    if settings.max_streams and open_streams >= settings.max_streams:
        return f"{open_streams} streams open (limit {settings.max_streams})"
    if settings.max_queue_depth and queue_depth >= settings.max_queue_depth:
        return f"{queue_depth} inference jobs queued (limit {settings.max_queue_depth})"
    if settings.max_rss_mb and rss_mb > settings.max_rss_mb:
        return f"process memory {rss_mb:.0f} MiB is above {settings.max_rss_mb} MiB"
    if settings.min_free_gpu_mb and free_gpu_mb is not None and free_gpu_mb < settings.min_free_gpu_mb:
        return f"free GPU memory {free_gpu_mb:.0f} MiB is below {settings.min_free_gpu_mb} MiB"
    if open_streams == 0 or not settings.realtime_headroom or listening:
        return None  # a worker serving no stream always takes one: there is nothing to protect
    if step_s > 0 and behind_s > step_s:
        return f"its most urgent step is {behind_s * 1000:.0f} ms late to start: the listeners it serves would run dry"
    usable = capacity_audio_s_per_s * settings.realtime_headroom
    most = usable * settings.realtime_overcommit
    if usable > 0 and open_streams + 1 > most:
        return (
            f"{open_streams + 1} streams would be {settings.realtime_overcommit:g} times more than the "
            f"{usable:.1f} audio s per s it makes for listeners"
        )
    return None


class Admission:
    """Counts a worker's open streams and refuses new ones past the limits; one per servicer."""

    def __init__(
        self,
        settings: AdmissionSettings,
        rss_mb: Callable[[], float] = process_rss_mb,
        gpu_free_mb: Callable[[str], float | None] = free_gpu_mb,
        scheduler: Scheduler | None = None,
    ) -> None:
        self.settings = settings
        self.open_streams = 0
        self.by_gateway: dict[str, int] = {}
        """Open streams per opening gateway's id ("" for a caller that named none)."""
        self.scheduler = scheduler
        """Where the real-time capacity and lateness come from (None: only a pinned `realtime_capacity` counts)."""
        self._rss_mb = rss_mb
        self._gpu_free_mb = gpu_free_mb

    async def admit(self, context: grpc.aio.ServicerContext, engine: object) -> None:
        """Admit the stream of `context` (counted until it ends) or abort it with RESOURCE_EXHAUSTED.

        `engine` is the worker's engine: its `queue_depth` and `settings.device` are read when it has them.
        """
        settings = self.settings
        device = str(getattr(getattr(engine, "settings", None), "device", "cpu"))
        reason = refusal_reason(
            settings,
            open_streams=self.open_streams,
            queue_depth=int(getattr(engine, "queue_depth", 0)),
            rss_mb=self._rss_mb() if settings.max_rss_mb else 0.0,
            free_gpu_mb=self._gpu_free_mb(device) if settings.min_free_gpu_mb else None,
            capacity_audio_s_per_s=self.capacity_audio_s_per_s,
            behind_s=self.scheduler.behind_s() if self.scheduler is not None else 0.0,
            step_s=self.scheduler.step_lead_s() if self.scheduler is not None else 0.0,
            listening=LISTENING_METADATA in tuple(context.invocation_metadata() or ()),
        )
        if reason is not None:
            _log.warning("refusing a new stream: %s", reason)
            await context.abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"worker overloaded: {reason}; retry on another worker",
                trailing_metadata=((PUSHBACK_METADATA_KEY, str(settings.pushback_ms)),),
            )
        gateway = next((str(value) for key, value in context.invocation_metadata() or () if key == GATEWAY_METADATA_KEY), "")[:64]
        self.open_streams += 1
        self.by_gateway[gateway] = self.by_gateway.get(gateway, 0) + 1
        context.add_done_callback(lambda _context: self._stream_done(gateway))
        # Headers now tell the gateway the stream is accepted before it writes (see its `accepted`).
        model_version = str(getattr(engine, "model_version", ""))
        headers = [STREAM_ACCEPTED_METADATA, (MODEL_VERSION_METADATA_KEY, model_version), (STREAM_LIMIT_METADATA_KEY, str(self.stream_limit))]
        fast = getattr(engine, "fast_tier", None)  # a vocoder's voice with a fast tier: its sentences may be spoken in it
        if fast is not None:
            headers.append((FAST_MODEL_VERSION_METADATA_KEY, str(fast.model_version)))
        await context.send_initial_metadata(tuple(headers))

    @property
    def stream_limit(self) -> int:
        """Streams this worker takes at once now (0: no limit): the open-stream limit, or fewer when
        its real-time capacity holds fewer listeners."""
        limits = [self.settings.max_streams] if self.settings.max_streams else []
        usable = self.capacity_audio_s_per_s * self.settings.realtime_headroom
        if usable > 0:
            limits.append(max(1, math.floor(usable * self.settings.realtime_overcommit)))
        return min(limits, default=0)

    @property
    def capacity_audio_s_per_s(self) -> float:
        """Audio seconds per second this worker can make: the pinned setting, else the measured one (0: unknown)."""
        if self.settings.realtime_capacity > 0:
            return self.settings.realtime_capacity
        return 0.0 if self.scheduler is None else self.scheduler.capacity.streams()

    @property
    def demand_audio_s_per_s(self) -> float:
        """Audio seconds per second the open streams need: one each, as each listener plays in real time."""
        return float(self.open_streams)

    def _stream_done(self, gateway: str) -> None:
        self.open_streams -= 1
        left = self.by_gateway.pop(gateway, 1) - 1
        if left > 0:
            self.by_gateway[gateway] = left
