"""Prewarming on a real mesh: hot texts are in the cache before anyone asks and stay there past the
cache TTL, a hot-text file is reloaded without a restart, and a sentence asked for often enough is
promoted and kept warm too. A sentence served from the cache shows as a hit in the gateway's metrics;
the workers count prewarming's streams as unlistened."""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.client import synthesize
from tests.support.gateway_process import extra_gateway
from tests.support.mesh import NO_REALTIME_ADMISSION, Mesh, ServiceProcess

CACHE_TTL_S = 4
WARM_TIMEOUT_S = 60.0


@pytest.fixture(scope="module")
def quiet_mesh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mesh]:
    """A mesh whose own gateway neither runs jobs nor promotes: the gateways under test are extra ones."""
    # Admission by measured real-time capacity is not under test, and on a shared machine it refuses at random.
    env = {"TTS_JOB_RUNNERS": "0", "TTS_PROMOTE_AFTER": "0", **NO_REALTIME_ADMISSION}
    running = Mesh(log_dir=tmp_path_factory.mktemp("prewarm-mesh"), env=env).start()
    try:
        yield running
    finally:
        running.stop()


def cache_operations(gateway: ServiceProcess, outcome: str) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{gateway.metrics_port}/metrics", timeout=5) as reply:
        text = reply.read().decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "tts_gateway_cache_operations_total" and sample.labels.get("outcome") == outcome:
                return sample.value
    return 0.0


def hits(gateway: ServiceProcess) -> float:
    return cache_operations(gateway, "hit")


def wait_for_writes(gateway: ServiceProcess, count: float, timeout_s: float = WARM_TIMEOUT_S) -> None:
    """Until the gateway has written `count` mels in all (prewarming writes without any request)."""
    deadline = time.monotonic() + timeout_s
    while cache_operations(gateway, "written") < count:
        assert time.monotonic() < deadline, f"fewer than {count} cache writes after {timeout_s} s"
        time.sleep(0.1)


def is_hit(gateway: ServiceProcess, text: str) -> bool:
    before = hits(gateway)
    synthesize(gateway.address, text)
    return hits(gateway) == before + 1


def test_hot_texts_are_cached_before_asked_kept_past_the_ttl_and_reloaded(quiet_mesh: Mesh, tmp_path: Path) -> None:
    hot_file = tmp_path / "hot.txt"
    hot_file.write_text("# prompts\nPress one for opening hours.\n\nYour call is important to us.\n")
    args = ["--hot-texts-file", str(hot_file), "--hot-texts-reload-s", "0.2", "--cache-ttl-s", str(CACHE_TTL_S), "--job-runners", "0"]
    with extra_gateway(quiet_mesh, tmp_path / "gateway.log", args) as gateway:
        wait_for_writes(gateway, 2)  # both hot sentences, before anyone asked
        # Nobody listened to them as they were made: both workers ran them on what listeners leave.
        for worker in ("acoustic", "vocoder"):
            assert quiet_mesh.metric(worker, f"tts_{worker}_unlistened_streams_total") >= 1
        assert is_hit(gateway, "Press one for opening hours.")
        time.sleep(CACHE_TTL_S + 2)  # past the TTL of the first write: only a renewal keeps it
        assert is_hit(gateway, "Your call is important to us.")
        assert not is_hit(gateway, "Press two for the billing team.")  # not hot: a miss
        written = cache_operations(gateway, "written")
        hot_file.write_text("Press three to hear these options again.\n")
        wait_for_writes(gateway, written + 1)
        assert is_hit(gateway, "Press three to hear these options again.")


def test_a_sentence_asked_for_often_is_promoted_and_kept_warm(quiet_mesh: Mesh, tmp_path: Path) -> None:
    args = ["--promote-after", "3", "--promote-window-s", "30", "--cache-ttl-s", str(CACHE_TTL_S), "--job-runners", "0"]
    with extra_gateway(quiet_mesh, tmp_path / "gateway.log", args) as gateway:
        popular, rare = "Your parcel has been delivered.", "Your parcel is delayed."
        for _ in range(3):
            synthesize(gateway.address, popular)
        synthesize(gateway.address, rare)
        time.sleep(CACHE_TTL_S + 3)  # both first writes have expired by now
        assert is_hit(gateway, popular)
        assert not is_hit(gateway, rare)
