"""The fuzzer (tests.support.fuzz.live) against a live mesh for a bounded time: mutated raw bytes of every
public and internal request, each answered with a clear status in time, no process lost, and every
server still serving a valid call afterwards. The counts of inputs, crashes and hangs go to the log.

The seed is fixed so a failure repeats; TTS_FUZZ_SEED=random (or a number) and TTS_FUZZ_SECONDS
change the run. `make fuzz` runs longer with a random seed.
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterator

import grpc
import pytest

from tests.support.fuzz.live import DEFAULT_SEED, run_fuzz
from tests.support.mesh import NO_REALTIME_ADMISSION, Mesh

CI_SECONDS = 60.0
MIN_INPUTS_PER_TARGET = 5
"""Enough that every method was really tried, however slow the machine."""


def _seed() -> int:
    configured = os.environ.get("TTS_FUZZ_SEED", "")
    if configured == "random":
        return random.SystemRandom().randrange(2**32)
    return int(configured) if configured else DEFAULT_SEED


@pytest.fixture(scope="module")
def fuzzed_mesh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mesh]:
    """A mesh of its own: what the fuzzer does to it (or a process it brings down) stays out of other
    tests. Without real-time admission: the fuzzer's own streams would fill a slow machine, and its
    health calls would be refused for it."""
    running = Mesh(log_dir=tmp_path_factory.mktemp("fuzzed-mesh"), env=dict(NO_REALTIME_ADMISSION)).start()
    try:
        yield running
    finally:
        running.stop()


def test_mutated_requests_get_clear_statuses_in_time_and_every_server_still_serves(
    fuzzed_mesh: Mesh, capsys: pytest.CaptureFixture[str]
) -> None:
    mesh = fuzzed_mesh
    channels = {"gateway": grpc.insecure_channel(mesh.gateway_address)}
    channels.update({name: mesh.worker_channel(name) for name in ("acoustic", "vocoder")})
    try:
        report = run_fuzz(
            channels,
            lambda: {name: service.process.poll() is None for name, service in mesh.services.items()},
            seconds=float(os.environ.get("TTS_FUZZ_SECONDS", CI_SECONDS)),
            seed=_seed(),
        )
    finally:
        for channel in channels.values():
            channel.close()
    with capsys.disabled():  # the counts belong in the CI log whatever pytest's verbosity
        print("\n" + report.summary())
    assert not report.findings, report.summary()
    assert report.health_checks > 0
    assert len(report.inputs) == 6 and min(report.inputs.values()) >= MIN_INPUTS_PER_TARGET, report.summary()
