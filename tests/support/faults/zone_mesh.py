"""Two zones of real worker processes behind fault proxies, Redis, and gateways, for fault tests.

Each zone runs one acoustic and one vocoder worker (`python -m services.<kind>`), each on its own
port with a `ThreadedFaultProxy` in front; gateways dial the proxies, so a test can cut, delay or
blackhole any worker, and also kill (SIGKILL) and restart the process behind a proxy on the same
port. Workers are expensive to start (model loading), gateways cheap: a test module shares one set
of workers and starts gateways with whatever routing settings it needs.

Real-time admission is off (`NO_REALTIME_ADMISSION`): these tests start more streams than a slow
machine plays in real time, and measure failover, not admission.

Workers run unbatched in float32 (`EXACT_WORKER_ENV`): dynamic batching changes float rounding
(~1e-7) with what else is in a batch, and the fault tests compare audio sample for sample; float32
makes the comparison the same on every CPU (bf16 resume is exact too: tests/test_resume_exact_bf16.py).

The mesh is plaintext unless given `tls`: fault tests put stand-in workers (plaintext gRPC servers)
next to the real ones, and their proxies only pass bytes, so TLS would change nothing they measure.
With `tls` (a MeshTls, libs.devmesh.certs) workers serve mutual TLS and gateways dial them with the
gateway's certificate, as `make run` does.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import numpy as np
from prometheus_client.parser import text_string_to_metric_families

from libs.devmesh.certs import MeshTls
from libs.devmesh.embedded_redis import EmbeddedRedis, EmbeddedRedisConfig
from libs.devmesh.launcher import service_command, stop_processes, wait_until_serving
from libs.pb.tts.acoustic.v1 import acoustic_pb2, acoustic_pb2_grpc
from libs.pb.tts.v1 import tts_pb2, tts_pb2_grpc
from tests.support.faults.proxy import ThreadedFaultProxy
from tests.support.mesh import NO_REALTIME_ADMISSION, REPO_ROOT, ServiceProcess
from tests.support.ports import free_port

WORKER_KINDS = ("acoustic", "vocoder")
ZONES = ("zone-a", "zone-b")
START_TIMEOUT_S = 300.0  # four models loading at once on two shared cores
EXACT_WORKER_ENV: Mapping[str, str] = {"TTS_MAX_BATCH": "1", "TTS_PRECISION": "fp32"}
"""Unbatched (batching makes a resumed stream differ by round-off), in float32 on every CPU."""
FAST_FAILOVER_ENV: Mapping[str, str] = {
    "TTS_ATTEMPT_TIMEOUT_S": "2.0",
    "TTS_EJECTION_BASE_S": "3.0",
    "TTS_RETRY_BASE_BACKOFF_S": "0.02",
    "TTS_RECONNECT_MAX_MS": "1000",
}
"""Gateway settings that keep fault tests short; production defaults are in libs/upstream/settings.py."""


def worker_name(kind: str, zone: str) -> str:
    """The key of a worker: "acoustic@zone-a"."""
    return f"{kind}@{zone}"


@dataclass
class Spoken:
    """What one Synthesize call returned, as float32 samples (FLOAT_PCM)."""

    samples: np.ndarray
    responses: int
    first_audio_s: float
    total_s: float
    sample_rate_hz: int = 0
    """The audio's rate (0: no audio came)."""


def speak(
    address: str,
    text: str,
    timeout_s: float = 60.0,
    on_audio: Callable[[int, tts_pb2.SynthesizeResponse], None] | None = None,
    voice: str = "",
) -> Spoken:
    """One Synthesize call in FLOAT_PCM (in `voice`; "": the default); `on_audio(n, response)` runs
    after the n-th audio message."""
    with grpc.insecure_channel(address) as channel:
        stub = tts_pb2_grpc.TextToSpeechStub(channel)
        started = time.monotonic()
        first_audio_s = float("nan")
        pieces: list[np.ndarray] = []
        sample_rate_hz = 0
        for response in stub.Synthesize(tts_pb2.SynthesizeRequest(text=text, voice=voice, encoding=tts_pb2.FLOAT_PCM), timeout=timeout_s):
            if not response.audio:
                continue
            sample_rate_hz = response.sample_rate_hz or sample_rate_hz
            if not pieces:
                first_audio_s = time.monotonic() - started
            pieces.append(np.frombuffer(response.audio, dtype="<f4"))
            if on_audio is not None:
                on_audio(len(pieces), response)
        samples = np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.float32)
        return Spoken(samples, len(pieces), first_audio_s, time.monotonic() - started, sample_rate_hz)


def scrape(metrics_port: int) -> dict[str, float]:
    """A process's /metrics samples, keyed `name{label="v",...}` (labels sorted)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5) as reply:
        text = reply.read().decode()
    samples: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = ",".join(f'{key}="{value}"' for key, value in sorted(sample.labels.items()))
            samples[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
    return samples


def metric_sum(samples: Mapping[str, float], name: str, **labels: str) -> float:
    """Sum of every sample of `name` whose labels include `labels`."""
    wanted = [f'{key}="{value}"' for key, value in labels.items()]
    total = 0.0
    for key, value in samples.items():
        if (key == name or key.startswith(name + "{")) and all(part in key for part in wanted):
            total += value
    return total


class ServiceMetrics:
    """What a mesh's services say on /metrics, for a mesh with `gateways` and `workers` by name (each
    with a `metrics_port`)."""

    gateways: Mapping[str, Any]
    workers: Mapping[str, Any]

    def gateway_metrics(self, name: str = "gateway") -> dict[str, float]:
        """A gateway's /metrics samples."""
        return scrape(self.gateways[name].metrics_port)

    def worker_metrics(self, kind: str, zone: str) -> dict[str, float]:
        """A worker's /metrics samples."""
        return scrape(self.workers[worker_name(kind, zone)].metrics_port)

    def worker_streams(self, kind: str, zone: str) -> float:
        """Streams a worker has finished so far, any outcome (0 for a worker that is down)."""
        try:
            return metric_sum(self.worker_metrics(kind, zone), f"tts_{kind}_streams_total")
        except OSError:
            return 0.0


@dataclass
class ZoneMesh(ServiceMetrics):
    """Workers in every zone behind proxies, an embedded Redis (behind a proxy too), and gateways."""

    log_dir: Path
    zones: Sequence[str] = ZONES
    worker_env: dict[str, dict[str, str]] = field(default_factory=dict)
    """Extra environment per worker, keyed by `worker_name(kind, zone)`."""
    redis: EmbeddedRedis | None = None
    redis_proxy: ThreadedFaultProxy | None = None
    workers: dict[str, ServiceProcess] = field(default_factory=dict)
    proxies: dict[str, ThreadedFaultProxy] = field(default_factory=dict)
    gateways: dict[str, ServiceProcess] = field(default_factory=dict)
    tls: MeshTls | None = None
    """Mutual TLS between gateways and workers (None: plaintext)."""

    def start(self, timeout_s: float = START_TIMEOUT_S) -> ZoneMesh:
        """Start Redis and every worker; wait until all are SERVING."""
        try:
            self.redis = EmbeddedRedis(EmbeddedRedisConfig(port=free_port(), maxmemory_mb=64)).start()
            self.redis_proxy = ThreadedFaultProxy(f"127.0.0.1:{self.redis.config.port}")
            self.redis_proxy.start()
            for zone in self.zones:
                for kind in WORKER_KINDS:
                    self._spawn_worker(kind, zone, free_port())
            deadline = time.monotonic() + timeout_s
            for name in list(self.workers):
                self._wait_serving(self.workers[name], deadline)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop every process and proxy."""
        stop_processes([process.process for process in [*self.gateways.values(), *self.workers.values()]])
        self.gateways.clear()
        self.workers.clear()
        for proxy in self.proxies.values():
            proxy.stop()
        self.proxies.clear()
        if self.redis_proxy is not None:
            self.redis_proxy.stop()
            self.redis_proxy = None
        if self.redis is not None:
            self.redis.stop()
            self.redis = None

    @property
    def redis_url(self) -> str:
        """Redis as the gateways see it: through its proxy."""
        assert self.redis_proxy is not None
        return f"redis://{self.redis_proxy.address}/0"

    def spec(self, kind: str, zone: str) -> str:
        """`ZONE=HOST:PORT` of the worker's proxy, for a gateway's --acoustic/--vocoder."""
        return f"{zone}={self.proxies[worker_name(kind, zone)].address}"

    def proxy(self, kind: str, zone: str) -> ThreadedFaultProxy:
        """The fault proxy in front of a worker."""
        return self.proxies[worker_name(kind, zone)]

    def start_gateway(
        self,
        name: str = "gateway",
        *,
        zone: str = "zone-a",
        env: Mapping[str, str] | None = None,
        acoustic: Sequence[str] | None = None,
        vocoder: Sequence[str] | None = None,
        redis_url: str | None = None,
        timeout_s: float = 60.0,
    ) -> ServiceProcess:
        """Start a gateway (by default: every worker, this mesh's Redis) and wait until it is SERVING."""
        acoustic = acoustic if acoustic is not None else [self.spec("acoustic", z) for z in self.zones]
        vocoder = vocoder if vocoder is not None else [self.spec("vocoder", z) for z in self.zones]
        args = ["--redis-url", self.redis_url if redis_url is None else redis_url, "--http-port", "0"]
        # The scenarios test failover, not admission: a zone's loss halves the capacity for a moment, and
        # their clients must not be refused for it.
        args += ["--admission-headroom", "0"]
        args += self.tls.gateway_args() if self.tls else []
        for spec in acoustic:
            args += ["--acoustic", spec]
        for spec in vocoder:
            args += ["--vocoder", spec]
        gateway = self._spawn(name, "gateway", zone, free_port(), args, {**FAST_FAILOVER_ENV, **NO_REALTIME_ADMISSION, **(env or {})})
        self.gateways[name] = gateway
        try:
            self._wait_serving(gateway, time.monotonic() + timeout_s)
        except BaseException:
            self.stop_gateway(name)
            raise
        return gateway

    def stop_gateway(self, name: str) -> None:
        """SIGTERM a gateway and wait for it."""
        gateway = self.gateways.pop(name, None)
        if gateway is not None:
            stop_processes([gateway.process])

    def kill_worker(self, kind: str, zone: str) -> None:
        """SIGKILL a worker (no goodbye: its connections reset, its streams break)."""
        process = self.workers[worker_name(kind, zone)].process
        os.kill(process.pid, signal.SIGKILL)
        process.wait()

    def restart_worker(self, kind: str, zone: str, wait: bool = True, timeout_s: float = START_TIMEOUT_S) -> None:
        """Start a killed worker again on its old port (behind the same proxy)."""
        old = self.workers[worker_name(kind, zone)]
        if old.process.poll() is None:
            raise RuntimeError(f"{worker_name(kind, zone)} is still running")
        worker = self._spawn_worker(kind, zone, old.port, old.metrics_port)
        if wait:
            self._wait_serving(worker, time.monotonic() + timeout_s)

    def wait_worker(self, kind: str, zone: str, timeout_s: float = START_TIMEOUT_S) -> None:
        """Wait until a (re)started worker is SERVING."""
        self._wait_serving(self.workers[worker_name(kind, zone)], time.monotonic() + timeout_s)

    def kill_redis(self) -> None:
        """SIGKILL the Redis server (its data goes with it: it keeps nothing on disk)."""
        assert self.redis is not None and self.redis.pid is not None
        os.kill(self.redis.pid, signal.SIGKILL)
        self.redis.stop()  # reaps the process and removes its work folder

    def restart_redis(self) -> None:
        """Start Redis again on the same port, empty."""
        assert self.redis is not None
        self.redis.start()

    def flush_redis(self) -> None:
        """Empty the cache, so the next request is synthesised (cached mel is float16, not bit-exact)."""
        import redis

        assert self.redis is not None
        client = redis.Redis.from_url(self.redis.url, socket_timeout=2)
        try:
            client.flushall()
        finally:
            client.close()


    def model_info(self) -> acoustic_pb2.ModelInfo:
        """What the first zone's acoustic worker reports about its model."""
        worker = self.workers[worker_name("acoustic", self.zones[0])]
        with self._worker_channel(worker.address) as channel:
            return acoustic_pb2_grpc.AcousticStub(channel).GetModelInfo(acoustic_pb2.GetModelInfoRequest(), timeout=10)

    def _spawn_worker(self, kind: str, zone: str, port: int, metrics_port: int | None = None) -> ServiceProcess:
        name = worker_name(kind, zone)
        env = {**EXACT_WORKER_ENV, **NO_REALTIME_ADMISSION, **self.worker_env.get(name, {})}
        worker = self._spawn(name, kind, zone, port, self.tls.worker_args() if self.tls else [], env, metrics_port)
        self.workers[name] = worker
        if name not in self.proxies:
            proxy = ThreadedFaultProxy(f"127.0.0.1:{port}")
            proxy.start()
            self.proxies[name] = proxy
        return worker

    def _spawn(
        self,
        name: str,
        service: str,
        zone: str,
        port: int,
        extra_args: list[str],
        extra_env: Mapping[str, str],
        metrics_port: int | None = None,
    ) -> ServiceProcess:
        metrics_port = metrics_port or free_port()
        log_path = self.log_dir / f"{name}.log"
        env = dict(os.environ, PYTHONUNBUFFERED="1", **extra_env)
        args = service_command(service, [
            "--host", "127.0.0.1",
            "--port", str(port),
            "--metrics-port", str(metrics_port),
            "--zone", zone,
            *(["--threads", "1"] if service != "gateway" else []),
            *extra_args,
        ])  # fmt: skip
        with log_path.open("ab") as log:
            process = subprocess.Popen(args, cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        return ServiceProcess(name, port, metrics_port, log_path, process)

    def _worker_channel(self, address: str) -> grpc.Channel:
        return grpc.secure_channel(address, self.tls.client_credentials()) if self.tls else grpc.insecure_channel(address)

    def _wait_serving(self, service: ServiceProcess, deadline: float) -> None:
        credentials = self.tls.client_credentials() if self.tls and service in self.workers.values() else None
        try:
            wait_until_serving(service.address, service.process, deadline, credentials=credentials)
        except (RuntimeError, TimeoutError) as error:
            raise RuntimeError(f"{service.name}: {error}\n{service.log_tail()}") from None


def wait_for(condition: Callable[[], bool], timeout_s: float, poll_s: float = 0.2, what: str = "condition") -> None:
    """Poll `condition()` until it holds; AssertionError after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not hold within {timeout_s} s")
        time.sleep(poll_s)
