"""Shared fixtures. The real mesh starts once per test session: model loading takes seconds."""

from __future__ import annotations

from typing import Iterator

import pytest

from tests.e2e.mesh import Mesh


@pytest.fixture(scope="session")
def mesh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mesh]:
    """Redis + acoustic + vocoder + gateway as real processes on free loopback ports."""
    running = Mesh(log_dir=tmp_path_factory.mktemp("mesh-logs")).start()
    try:
        yield running
    finally:
        running.stop()
