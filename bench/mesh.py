"""The mesh under benchmark: the end-to-end test launcher (Redis + three service processes on free
loopback ports), with extra flags for the workers and the processes' peak memory. It is secured as
`make run` is (mutual TLS to the workers, sealed cache values, a Redis password), so what is
measured is what runs."""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bench.measure import peak_rss_bytes
from libs.voice.precision import CPU_PRECISIONS
from tests.support.mesh import DEFAULT_START_TIMEOUT_S, Mesh, ServiceProcess

WORKERS = ("acoustic", "vocoder")
MAX_BATCH_FLAG = "--max-batch"
PRECISION_FLAG = "--precision"


@dataclass
class BenchMesh(Mesh):
    """`tests.support.mesh.Mesh` whose workers get `worker_args` after the launcher's own (later flags win)."""

    worker_args: list[str] = field(default_factory=list)

    def _spawn(self, name: str, extra_args: list[str]) -> ServiceProcess:
        if name in WORKERS:
            extra_args = [*extra_args, *self.worker_args]
        return super()._spawn(name, extra_args)

    def pids(self) -> dict[str, int]:
        """Process id of each service and of Redis."""
        pids = {name: service.process.pid for name, service in self.services.items()}
        if self.redis is not None and self.redis.pid is not None:
            pids["redis"] = self.redis.pid
        return pids

    def precisions(self) -> dict[str, str]:
        """The arithmetic each worker serves in, as its `tts_<worker>_precision` gauge names it."""
        served = {}
        for worker in WORKERS:
            samples = self.metrics(worker)
            for precision in CPU_PRECISIONS:
                if samples.get(f'tts_{worker}_precision{{precision="{precision}"}}') == 1.0:
                    served[worker] = precision
        return served

    def peak_rss(self) -> dict[str, int]:
        """Peak RSS of each process since it started (bytes)."""
        return {name: peak_rss_bytes(pid) for name, pid in self.pids().items()}


def start_mesh(
    worker_args: Sequence[str] = (), log_dir: Path | None = None, timeout_s: float = DEFAULT_START_TIMEOUT_S
) -> BenchMesh:
    """Start Redis and the three services and wait until all are SERVING; call `.stop()` when done."""
    logs = log_dir or Path(tempfile.mkdtemp(prefix="tts-bench-"))
    logs.mkdir(parents=True, exist_ok=True)
    return BenchMesh(log_dir=logs, worker_args=list(worker_args)).start(timeout_s)
