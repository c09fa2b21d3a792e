"""Worker processes as pods: each on its own loopback address 127.0.0.x, all of one kind and zone
on one port behind one name, and gateways (the real WorkerPool and Synthesizer, in this process)
that find them by resolving the name. `Fleet` runs toy workers (tests/faults/toy_worker.py: the real
servicers around small engines, ready in a second); `ServiceFleet` runs the worker services
themselves with the installed default voice.

Pods run without real-time admission (`NO_REALTIME_ADMISSION`): these tests measure routing, and
what admission takes depends on the machine.

The resolver is the only stand-in: `FleetResolver` answers a name with the addresses of the pods
currently "in DNS", as a headless Service's DNS record would list its ready pods. Adding a pod to it
or taking one out is what the cluster does when a pod turns ready or starts terminating.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import AsyncIterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from libs.cache.mel_cache import MelCache
from libs.devmesh.launcher import service_command, wait_until_serving
from libs.pb.tts.v1 import tts_pb2
from libs.routing.endpoints import parse_endpoint
from libs.routing.health import HealthConfig
from libs.routing.retry import RetryConfig
from libs.synthesis.options import resolve_options
from libs.synthesis.synthesizer import Synthesizer
from libs.synthesis.text_side import TextSide
from libs.text.frontend import Sentence
from libs.upstream.pool import WorkerPool
from libs.upstream.settings import UpstreamSettings
from libs.voice.registry import default_registry
from tests.support.mesh import NO_REALTIME_ADMISSION, REPO_ROOT

ACOUSTIC_PORT_BASE = 50700
VOCODER_PORT_BASE = 50710
METRICS_PORT_OFFSET = 1
SERVICE_METRICS_PORT_BASE = 50800
"""A worker service serves /metrics on every address, so each one gets a port of its own: this plus
the last number of its address."""
# About 30 phonemes per sentence (180 frames, ~2 s of audio): an utterance holds its acoustic stream
# for several chunks, so streams overlap and in-flight counts mean something.
SENTENCE_IDS = [[1] + [0, 20, 0, 59, 0, 24] * 5 + [0, 2], [1] + [0, 35, 0, 27, 0, 30] * 5 + [0, 2]]
_TEXT_THREAD = ThreadPoolExecutor(max_workers=1, thread_name_prefix="text")  # unused: the sentences come phonemised


def service_name(kind: str, zone: str) -> str:
    """The name a kind's pods of one zone stand behind, like a headless Service's."""
    return f"{kind}-{zone}.fleet.test"


@dataclass
class Pod:
    """One worker process."""

    kind: str
    zone: str
    ip: str
    port: int
    process: subprocess.Popen[Any]
    metrics_port: int = 0
    """Its /metrics port (0: its gRPC port + METRICS_PORT_OFFSET, on its own address, as a toy worker's)."""

    @property
    def address(self) -> str:
        return f"{self.ip}:{self.port}"

    def metrics(self) -> dict[str, float]:
        """The worker's own /metrics samples, by sample name, summed over their labels."""
        metrics_port = self.metrics_port or self.port + METRICS_PORT_OFFSET
        with urllib.request.urlopen(f"http://{self.ip}:{metrics_port}/metrics", timeout=5) as response:
            text = response.read().decode()
        totals: dict[str, float] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                totals[sample.name] = totals.get(sample.name, 0.0) + sample.value
        return totals

    def streams_total(self) -> float:
        return self.metrics().get(f"tts_{self.kind}_streams_total", 0.0)

    def inflight(self) -> float:
        return self.metrics().get(f"tts_{self.kind}_inflight_streams", 0.0)


@dataclass
class FleetResolver:
    """Answers each fleet name with the addresses of its pods that are "in DNS" now."""

    names: dict[str, list[str]] = field(default_factory=dict)
    lookups: int = 0

    async def __call__(self, host: str, port: int) -> list[str]:
        self.lookups += 1
        if host not in self.names or not self.names[host]:
            raise OSError(f"{host}: name not known")  # like NXDOMAIN for a Service with no ready pod
        return list(self.names[host])

    def publish(self, pod: Pod) -> None:
        self.names.setdefault(service_name(pod.kind, pod.zone), []).append(pod.ip)

    def withdraw(self, pod: Pod) -> None:
        self.names[service_name(pod.kind, pod.zone)].remove(pod.ip)


class Fleet:
    """Toy worker processes, started in parallel, each on its own loopback address."""

    def __init__(self, acoustic_chunk_delay_s: float = 0.25, grace_s: float = 30.0) -> None:
        self.pods: list[Pod] = []
        self.resolver = FleetResolver()
        self._chunk_delay_s = acoustic_chunk_delay_s
        self._grace_s = grace_s
        self._next_host = 10

    def port_of(self, kind: str, zone_index: int) -> int:
        return (ACOUSTIC_PORT_BASE if kind == "acoustic" else VOCODER_PORT_BASE) + 2 * zone_index

    def start(self, kind: str, zone: str, zone_index: int, count: int, *, publish: bool = True) -> list[Pod]:
        """Start `count` pods of `kind` in `zone` (not waiting for them: see `wait_ready`)."""
        started = []
        for _ in range(count):
            self._next_host += 1
            ip = f"127.0.0.{self._next_host}"
            port = self.port_of(kind, zone_index)
            command = [
                sys.executable, "-m", "tests.support.faults.toy_worker", "--kind", kind, "--host", ip, "--port", str(port),
                "--metrics-port", str(port + METRICS_PORT_OFFSET), "--chunk-delay-s", str(self._chunk_delay_s),
                "--grace-s", str(self._grace_s),
            ]  # fmt: skip
            env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", **NO_REALTIME_ADMISSION}
            process = subprocess.Popen(command, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, text=True)
            pod = Pod(kind, zone, ip, port, process)
            self.pods.append(pod)
            started.append(pod)
        for pod in started:
            self._wait_ready(pod)
            if publish:
                self.resolver.publish(pod)
        return started

    def _wait_ready(self, pod: Pod, timeout_s: float = 120.0) -> None:
        assert pod.process.stdout is not None
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            line = pod.process.stdout.readline()
            if line.strip() == "ready":
                return
            if not line and pod.process.poll() is not None:
                break
        raise AssertionError(f"toy {pod.kind} worker on {pod.address} did not start (exit {pod.process.poll()})")

    def start_groups(self, groups: Sequence[tuple[str, str, int, int]], *, publish: bool = True) -> list[Pod]:
        """Start the pods of every (kind, zone, zone index, count) group, one group after another."""
        return [pod for kind, zone, index, count in groups for pod in self.start(kind, zone, index, count, publish=publish)]

    def terminate(self, pod: Pod) -> None:
        """SIGTERM, as the kubelet sends after the pod left its Service's endpoints."""
        pod.process.send_signal(signal.SIGTERM)

    def stop(self) -> None:
        for pod in self.pods:
            if pod.process.poll() is None:
                pod.process.kill()
        for pod in self.pods:
            pod.process.wait(timeout=10)

    def of(self, kind: str, zone: str | None = None) -> list[Pod]:
        return [pod for pod in self.pods if pod.kind == kind and (zone is None or pod.zone == zone)]


class ServiceFleet(Fleet):
    """The worker services themselves as pods: `python -m services.acoustic` and `python -m
    services.vocoder` with the installed default voice, one model thread each, plaintext (as
    `gateway_pool` dials). Every pod of a call starts at once; each logs to `log_dir`."""

    def __init__(self, log_dir: Path, grace_s: float = 30.0, start_timeout_s: float = 600.0, worker_args: Sequence[str] = ()) -> None:
        super().__init__(grace_s=grace_s)
        self.log_dir = log_dir
        self._start_timeout_s = start_timeout_s
        self._worker_args = tuple(worker_args)

    def start(self, kind: str, zone: str, zone_index: int, count: int, *, publish: bool = True) -> list[Pod]:
        return self.start_groups([(kind, zone, zone_index, count)], publish=publish)

    def start_groups(self, groups: Sequence[tuple[str, str, int, int]], *, publish: bool = True) -> list[Pod]:
        """Start the pods of every (kind, zone, zone index, count) group side by side and wait until each is SERVING."""
        started = [self._spawn(kind, zone, index) for kind, zone, index, count in groups for _ in range(count)]
        deadline = time.monotonic() + self._start_timeout_s
        for pod in started:  # they load their models side by side; this only waits for each in turn
            try:
                wait_until_serving(pod.address, pod.process, deadline)
            except (RuntimeError, TimeoutError) as error:
                raise AssertionError(f"{pod.kind} worker on {pod.address}: {error}\n{self.log_tail(pod)}") from None
            if publish:
                self.resolver.publish(pod)
        return started

    def log_tail(self, pod: Pod, lines: int = 20) -> str:
        text = self._log_path(pod.kind, pod.ip).read_text(errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    def _log_path(self, kind: str, ip: str) -> Path:
        return self.log_dir / f"{kind}-{ip}.log"

    def _spawn(self, kind: str, zone: str, zone_index: int) -> Pod:
        self._next_host += 1
        ip = f"127.0.0.{self._next_host}"
        port = self.port_of(kind, zone_index)
        metrics_port = SERVICE_METRICS_PORT_BASE + self._next_host
        command = service_command(kind, [
            "--host", ip, "--port", str(port), "--metrics-port", str(metrics_port), "--zone", zone, "--threads", "1",
            "--shutdown-grace-s", str(self._grace_s), *self._worker_args,
        ])  # fmt: skip
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", **NO_REALTIME_ADMISSION}
        with self._log_path(kind, ip).open("wb") as log:
            process = subprocess.Popen(command, cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        pod = Pod(kind, zone, ip, port, process, metrics_port=metrics_port)
        self.pods.append(pod)
        return pod


def gateway_pool(
    fleet: Fleet, zones: Sequence[str], local_zone: str, *, interval_s: float = 0.5, registry: CollectorRegistry | None = None
) -> WorkerPool:
    """A gateway's WorkerPool over every fleet name of `zones`, resolving them with the fleet's resolver."""
    upstream = UpstreamSettings(
        acoustic=tuple(
            parse_endpoint(f"{zone}={service_name('acoustic', zone)}:{fleet.port_of('acoustic', i)}", "acoustic")
            for i, zone in enumerate(zones)
        ),
        vocoder=tuple(
            parse_endpoint(f"{zone}={service_name('vocoder', zone)}:{fleet.port_of('vocoder', i)}", "vocoder")
            for i, zone in enumerate(zones)
        ),
        discovery_interval_s=interval_s,
        attempt_timeout_s=5.0,
    )
    return WorkerPool(
        upstream,
        local_zone,
        retry=RetryConfig(base_backoff_s=0.01, max_backoff_s=0.05),
        ejection=HealthConfig(base_ejection_s=1.0),
        registry=registry or CollectorRegistry(),
        resolver=fleet.resolver,
    )


def synthesizer(pool: WorkerPool) -> Synthesizer:
    """The gateway's synthesis API over `pool`, without a cache (every sentence reaches the workers)."""
    return Synthesizer(pool=pool, cache=MelCache(None, ttl_s=1, timeout_s=0.1), text_side=TextSide(_TEXT_THREAD, 5000), max_streams=256)


_utterances = itertools.count()


async def _sentences() -> AsyncIterator[Any]:
    # One phoneme differs per utterance, so no two concurrent utterances share a sentence (the gateway
    # would run a shared one once, single flight) and every utterance has the same length.
    variant = 3 + next(_utterances) % 200
    for index, ids in enumerate(SENTENCE_IDS):
        yield Sentence(text=f"Sentence {index}.", phonemes=("x",), phoneme_ids=(ids[0], variant, *ids[2:]))


async def speak(synth: Synthesizer, timeout_s: float = 60.0) -> int:
    """One utterance of the fleet sentences through the synthesis API; the number of samples heard."""
    options = resolve_options(
        default_registry(), voice="", speed=0, encoding=tts_pb2.FLOAT_PCM, sample_rate_hz=0, speaker_id=0,
        request_id="fleet", include_alignment=False,
    )  # fmt: skip
    samples = 0
    async for chunk in synth.speak(_sentences(), options, timeout_s):
        samples += len(chunk.audio) // 4
    return samples


@dataclass
class Load:
    """`clients` loops, each speaking one utterance after another through the given gateways."""

    synthesizers: Sequence[Synthesizer]
    clients: int
    completed: int = 0
    errors: list[BaseException] = field(default_factory=list)
    samples: list[int] = field(default_factory=list)
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)
    _stop: bool = False

    def start(self) -> None:
        for index in range(self.clients):
            synth = self.synthesizers[index % len(self.synthesizers)]
            self._tasks.append(asyncio.create_task(self._loop(synth)))

    async def _loop(self, synth: Synthesizer) -> None:
        while not self._stop:
            try:
                self.samples.append(await speak(synth))
                self.completed += 1
            except Exception as error:  # every client error is a failure of the test
                self.errors.append(error)

    async def stop(self) -> None:
        """Let every utterance in progress finish, then stop."""
        self._stop = True
        await asyncio.gather(*self._tasks)


async def sample_inflight(pods: Sequence[Pod], duration_s: float, every_s: float = 0.1) -> dict[str, float]:
    """Each pod's in-flight streams (its own gauge), averaged over `duration_s`."""
    totals = {pod.address: 0.0 for pod in pods}
    samples = 0
    deadline = time.monotonic() + duration_s
    while time.monotonic() < deadline:
        values = await asyncio.gather(*(asyncio.to_thread(pod.inflight) for pod in pods))
        for pod, value in zip(pods, values, strict=False):
            totals[pod.address] += value
        samples += 1
        await asyncio.sleep(every_s)
    return {address: total / samples for address, total in totals.items()}
