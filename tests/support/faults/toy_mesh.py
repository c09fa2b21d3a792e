"""Acoustic and vocoder workers as real gRPC servers inside the test process, over small engines.

The servicers are the real ones; only the engines are small. The acoustic engine draws its mel from
the sentence's seed and cuts it on the real chunk schedule; the vocoder is the real VocoderEngine
around a tiny randomly initialised HiFi-GAN (the same weights in every worker). Both keep the
properties resume relies on: chunk boundaries fixed by frame index, and output a pure function of
the input. Each worker sits behind a `FaultProxy`, so a test can cut or blackhole it. This runs in
a second where the real voice's processes take a minute to start, so the resume logic is tested
in every run.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import grpc
import numpy as np
import torch
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from libs.models.hifigan import Generator, GeneratorConfig
from libs.pb.tts.acoustic.v1 import acoustic_pb2_grpc
from libs.pb.tts.vocoder.v1 import vocoder_pb2_grpc
from libs.scheduling.scheduler import Scheduler
from libs.serving.admission import Admission, AdmissionSettings
from libs.serving.voice_shelf import VoiceShelf
from libs.telemetry.metrics import AcousticMetrics, VocoderMetrics
from libs.voice.acoustic_engine import SpokenPart
from libs.voice.chunking import ACOUSTIC_SCHEDULE
from libs.voice.engine import MelVocoder, VocoderEngine
from services.acoustic.servicer import AcousticServicer
from services.vocoder.servicer import VocoderServicer
from tests.support.faults.proxy import FaultProxy
from tests.support.servers import aio_server

VOICE = "en_US-joe-medium"
FRAMES_PER_PHONEME = 6
N_MELS = 80
HOP_LENGTH = 256
SAMPLE_RATE_HZ = 22050


class ToyAcousticEngine:
    """Mel frames drawn from each sentence's seed, cut on the real acoustic chunk schedule."""

    model_version = "toy-acoustic-1"
    voice_name = VOICE
    sample_rate_hz = SAMPLE_RATE_HZ
    hop_length = HOP_LENGTH
    n_mels = N_MELS
    num_speakers = 1
    queue_depth = 0
    batcher = None
    acoustic = SimpleNamespace(config=SimpleNamespace(n_vocab=256))  # the phoneme ids the servicer accepts

    lag_frames = 0
    """Its chunks take no more frames than they give (a real engine's first takes the flow's lag too)."""

    def __init__(self, chunk_delay_s: float = 0.02) -> None:
        self.chunk_delay_s = chunk_delay_s
        self.schedule = ACOUSTIC_SCHEDULE
        self.wide_plans: list[bool] = []
        """`wide` of every plan, in order (whether the servicer gave the text side both cores)."""

    def synthesis_seed(self, phoneme_ids: Sequence[int], params: Any) -> int:
        digest = hashlib.sha256(repr((self.model_version, list(phoneme_ids), params)).encode()).digest()
        return int.from_bytes(digest[:8], "little") or 1

    def plan(self, phoneme_ids: Sequence[int], params: Any, seed: int, wide: bool = False) -> Any:
        self.wide_plans.append(wide)
        frames = FRAMES_PER_PHONEME * len(phoneme_ids)
        return SimpleNamespace(frame_count=frames, phoneme_frames=[FRAMES_PER_PHONEME] * len(phoneme_ids), seed=seed)

    def spoken_part(self, plan: Any, first_id: int = 0, end_id: int | None = None) -> SpokenPart:
        """As the real engine's: the whole plan, or the frames of a span of its ids after their left
        context (here the plan's frames before the span)."""
        end_id = len(plan.phoneme_frames) if end_id is None else end_id
        start, end = FRAMES_PER_PHONEME * first_id, FRAMES_PER_PHONEME * end_id
        prior = plan if end == plan.frame_count else SimpleNamespace(frame_count=end, phoneme_frames=[], seed=plan.seed)
        return SpokenPart(prior, start, end - start, list(plan.phoneme_frames[first_id:end_id]))

    def step_frames(self, total_frames: int) -> list[int]:
        return [end - start for start, end in self.schedule.bounds(total_frames)]

    def mel_chunks(self, plan: Any, start_frame: int = 0):  # type: ignore[no-untyped-def]
        mel = np.random.default_rng(plan.seed).normal(-5.0, 1.5, size=(N_MELS, plan.frame_count)).astype(np.float32)
        for start, end in self.schedule.bounds(plan.frame_count, start_frame):
            time.sleep(self.chunk_delay_s)  # model time, so a stream can be broken while it runs
            yield mel[:, max(start, start_frame) : end]


def _scheduling(kind: str, executor: Any, metrics: Any, admission: AdmissionSettings | None = None) -> tuple[Scheduler, Admission]:
    """A worker's scheduler on `executor` and an admission with `admission` (default: the default settings)."""
    scheduler = Scheduler(kind, executor, metrics)
    return scheduler, Admission(admission or AdmissionSettings(), scheduler=scheduler)


toy_scheduling = _scheduling


def toy_vocoder_engine() -> VocoderEngine:
    """A real VocoderEngine around a tiny HiFi-GAN V3-shaped generator with fixed random weights."""
    torch.manual_seed(1234)
    config = GeneratorConfig(
        resblock="2",
        upsample_rates=(8, 8, 4),
        upsample_kernel_sizes=(16, 16, 8),
        upsample_initial_channel=32,
        resblock_kernel_sizes=(3,),
        resblock_dilation_sizes=((1, 2),),
        in_channels=N_MELS,
    )
    generator = Generator(config).eval()
    return VocoderEngine(
        MelVocoder(None, generator), model_version="toy-vocoder-1", sample_rate_hz=SAMPLE_RATE_HZ, hop_length=HOP_LENGTH, n_mels=N_MELS
    )


@dataclass
class ToyWorker:
    """One worker server and the proxy the gateway dials instead of it."""

    kind: str
    zone: str
    server: grpc.aio.Server
    proxy: FaultProxy
    health: health.aio.HealthServicer
    metrics: Any
    servicer: Any
    scheduler: Scheduler

    @property
    def spec(self) -> str:
        """`ZONE=HOST:PORT` of the proxy."""
        return f"{self.zone}={self.proxy.address}"

    async def set_serving(self, serving: bool) -> None:
        status = health_pb2.HealthCheckResponse.SERVING if serving else health_pb2.HealthCheckResponse.NOT_SERVING
        await self.health.set("", status)

    def streams(self) -> float:
        """Streams this worker has taken so far (any outcome)."""
        return sum(sample.value for metric in self.metrics.streams_total.collect() for sample in metric.samples if sample.name.endswith("_total"))


@dataclass
class ToyMesh:
    """Toy acoustic and vocoder workers per zone, each behind a fault proxy."""

    workers: list[ToyWorker] = field(default_factory=list)
    executor: ThreadPoolExecutor = field(default_factory=lambda: ThreadPoolExecutor(max_workers=4))

    def of(self, kind: str, zone: str) -> ToyWorker:
        return next(worker for worker in self.workers if worker.kind == kind and worker.zone == zone)

    async def start(self, zones: Sequence[str] = ("zone-a", "zone-b"), chunk_delay_s: float = 0.02) -> ToyMesh:
        vocoder_engine = toy_vocoder_engine()
        for zone in zones:
            for kind in ("acoustic", "vocoder"):
                server = aio_server()
                health_servicer = health.aio.HealthServicer()
                health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
                if kind == "acoustic":
                    metrics: Any = AcousticMetrics()
                    scheduler, admission = _scheduling(kind, self.executor, metrics)
                    servicer: Any = AcousticServicer(metrics, scheduler, admission)
                    servicer.install(VoiceShelf.holding(ToyAcousticEngine(chunk_delay_s), VOICE))
                    acoustic_pb2_grpc.add_AcousticServicer_to_server(servicer, server)
                else:
                    metrics = VocoderMetrics()
                    scheduler, admission = _scheduling(kind, self.executor, metrics)
                    servicer = VocoderServicer(metrics, scheduler, admission)
                    servicer.install(VoiceShelf.holding(vocoder_engine, VOICE))
                    vocoder_pb2_grpc.add_VocoderServicer_to_server(servicer, server)
                port = server.add_insecure_port("127.0.0.1:0")
                await server.start()
                proxy = FaultProxy(f"127.0.0.1:{port}")
                await proxy.start()
                worker = ToyWorker(kind, zone, server, proxy, health_servicer, metrics, servicer, scheduler)
                await worker.set_serving(True)
                self.workers.append(worker)
        return self

    async def stop(self) -> None:
        for worker in self.workers:
            await worker.proxy.stop()
            await worker.server.stop(0)
        self.executor.shutdown(wait=False, cancel_futures=True)


async def wait_until(condition: Any, timeout_s: float = 5.0, poll_s: float = 0.02) -> None:
    """Wait for `condition()` to hold; AssertionError after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(poll_s)
