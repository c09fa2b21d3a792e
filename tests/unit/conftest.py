"""Unit tests hold to their layer: a unit test that opens a network socket or starts a process fails.

The guard is what keeps `make test-fast` fast and independent of the machine: such a test belongs
in tests/integration or tests/e2e.
"""

from __future__ import annotations

import multiprocessing.process
import socket
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

_NETWORK_FAMILIES = {socket.AF_INET, socket.AF_INET6}


class LayerViolation(AssertionError):
    """A unit test reached for the network or a child process."""


@pytest.fixture(autouse=True)
def no_network_no_processes(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    real_connect, real_bind = socket.socket.connect, socket.socket.bind

    def guarded(real: Any, what: str) -> Any:
        def call(sock: socket.socket, address: Any) -> Any:
            if sock.family in _NETWORK_FAMILIES:
                raise LayerViolation(f"a unit test may not {what} a network socket ({address!r}); move it to tests/integration")
            return real(sock, address)

        return call

    def no_process(*args: Any, **kwargs: Any) -> Any:
        raise LayerViolation("a unit test may not start a process; move it to tests/integration")

    monkeypatch.setattr(socket.socket, "connect", guarded(real_connect, "connect"))
    monkeypatch.setattr(socket.socket, "bind", guarded(real_bind, "bind"))
    monkeypatch.setattr(subprocess.Popen, "__init__", no_process)
    monkeypatch.setattr(multiprocessing.process.BaseProcess, "start", no_process)
    yield
