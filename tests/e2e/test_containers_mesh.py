"""The mesh in containers, built from the image (`make test-containers`; marked `containers`, so not in
`make test`): every service its own container on one network, run read-only as the k8s base runs it,
and the fault scenarios of the process mesh (tests/support/faults/scenarios.py) against it.

Two zones of workers (`acoustic-zone-a`, `vocoder-zone-b`, ... as the prod overlay's per-zone Services),
unbatched in float32 as in the process fault tests (EXACT_WORKER_ENV), so a resumed stream can be
compared with its fault-free run sample for sample; the gateway in zone-a with the shortened
failover timings of those tests (FAST_FAILOVER_ENV). Faults are the engine's: SIGKILL of a worker
or Redis container and a restart of the same container, SIGTERM of a gateway container.
"""

from __future__ import annotations

import subprocess
import urllib.request
from collections.abc import Iterator

import pytest

from scripts.containers.engine import available
from scripts.containers.manifests import pod_container
from scripts.containers.mesh import DEFAULT_IMAGE, ContainerMesh
from tests.support.faults import scenarios
from tests.support.faults.zone_mesh import EXACT_WORKER_ENV, FAST_FAILOVER_ENV, speak

pytestmark = [pytest.mark.containers, pytest.mark.timeout(1200)]


@pytest.fixture(scope="module")
def containers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ContainerMesh]:
    if not available():
        pytest.skip("no container engine: make container-engine")
    mesh = ContainerMesh(
        zones=("zone-a", "zone-b"), worker_env={"*": dict(EXACT_WORKER_ENV)}, gateway_env=dict(FAST_FAILOVER_ENV),
        log_dir=tmp_path_factory.mktemp("container-logs"),
    )  # fmt: skip
    if not mesh.engine.image_exists(DEFAULT_IMAGE):
        pytest.skip(f"no image {DEFAULT_IMAGE}: make image")
    mesh.start()
    try:
        yield mesh
    finally:
        mesh.stop()


def _exec(mesh: ContainerMesh, container: str, *command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([mesh.engine.name, "exec", container, *command], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("service", ["gateway", "acoustic@zone-a", "vocoder@zone-b", "redis", "edge"])
def test_each_container_runs_read_only_as_its_manifests_non_root_user_without_capabilities(containers: ContainerMesh, service: str) -> None:
    running = {s.name: s for s in containers.services()}[service]
    pod = pod_container(service.split("@")[0])
    config = _exec(containers, running.container, "sh", "-c", "id -u; id -g; grep ^CapEff /proc/1/status; grep ^NoNewPrivs /proc/1/status")
    uid, gid, cap_eff, no_new_privs = config.stdout.split("\n")[:4]
    assert f"{uid}:{gid}" == pod.user and int(uid) > 0
    assert cap_eff.split()[1] == "0000000000000000"  # every capability dropped
    assert no_new_privs.split()[1] == "1"
    # The root filesystem refuses writes, even where the image's own files are (the voice cache, /app);
    # only the manifest's emptyDir folders take them.
    for path in ("/app/written", "/opt/tts-mesh/cache/written", "/home/tts/written"):
        assert _exec(containers, running.container, "sh", "-c", f": > {path}").returncode != 0, f"{path} was writable"
    for folder in pod.writable:
        assert _exec(containers, running.container, "sh", "-c", f": > {folder}/written && rm {folder}/written").returncode == 0


def test_the_edge_container_forwards_grpc_to_the_gateway_container(containers: ContainerMesh) -> None:
    assert containers.edge_service is not None
    with urllib.request.urlopen(f"http://{containers.edge_service.address}/healthz", timeout=5) as reply:
        assert reply.status == 200
    spoken = speak(containers.edge_service.address, scenarios.unique("Spoken through the edge container."))
    assert spoken.samples.size > 22050 // 2


@pytest.mark.parametrize("kind", ["vocoder", "acoustic"])
def test_worker_container_killed_mid_sentence_leaves_the_audio_identical_to_fault_free(containers: ContainerMesh, kind: str) -> None:
    result = scenarios.kill_worker_mid_sentence(containers, "gateway", kind)  # type: ignore[arg-type]
    assert result.client_errors == []
    assert result.facts["killed_inside_sentence"] == 1.0
    assert result.facts["resumes"] >= 1, "the stream was not resumed: the kill missed it"
    assert result.identical == result.requests == 1


def test_redis_container_killed_fails_no_request_and_caching_resumes_after_its_restart(containers: ContainerMesh) -> None:
    result = scenarios.redis_restart(containers, "gateway")  # type: ignore[arg-type]
    assert result.client_errors == []
    assert result.completed == result.requests
    assert result.facts["hits_after_restart"] >= 1


def test_gateway_container_stopped_with_sigterm_finishes_its_streams_then_exits_cleanly(containers: ContainerMesh) -> None:
    containers.start_gateway("gateway-drain")
    result = scenarios.gateway_drains_on_sigterm(containers, "gateway-drain")  # type: ignore[arg-type]
    assert result.client_errors == []
    assert result.identical == result.compared == result.requests == 3, "a stream cut by the SIGTERM differs from its fault-free audio"
    assert result.facts["exit_code"] == 0.0
    # It left as soon as its streams were done, long before the grace (330 s) ran out.
    assert result.facts["stop_s"] < 120
