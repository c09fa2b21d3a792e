"""Fault tests on real processes: two zones of workers, Redis and gateways on loopback.

Faults are injected with signals (SIGKILL) and with a TCP proxy in front of every worker and of
Redis (blackhole, delay). Every test compares with a fault-free run of the same request.

The workers run without dynamic batching, in float32 (tests/faults/zone_mesh.py EXACT_WORKER_ENV):
batching changes float rounding by ~1e-7 depending on what else shares a batch, and these tests
compare audio sample for sample. The zone-a acoustic worker takes one stream at a time
(TTS_MAX_STREAMS=1), so a second concurrent request meets a real RESOURCE_EXHAUSTED refusal there.
The gateways use shortened timeouts (FAST_FAILOVER_ENV: 2 s attempt timeout, 3 s ejection).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from libs.voice.assets import default_voice_assets
from tests.support.faults import scenarios
from tests.support.faults.zone_mesh import FAST_FAILOVER_ENV, ZoneMesh

pytestmark = [
    pytest.mark.timeout(900),
    pytest.mark.skipif(
        not default_voice_assets().mel_head_path.exists(),
        reason="the default voice's trained weights (assets/voices/en_US-joe-medium) are not built yet",
    ),
]

ATTEMPT_TIMEOUT_S = float(FAST_FAILOVER_ENV["TTS_ATTEMPT_TIMEOUT_S"])


@pytest.fixture(scope="module")
def zones(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZoneMesh]:
    mesh = ZoneMesh(
        log_dir=tmp_path_factory.mktemp("zone-logs"),
        worker_env={"acoustic@zone-a": {"TTS_MAX_STREAMS": "1"}},
    ).start()
    try:
        mesh.start_gateway("gateway")
        yield mesh
    finally:
        mesh.stop()


@pytest.mark.parametrize("kind", ["vocoder", "acoustic"])
def test_worker_killed_mid_sentence_leaves_the_audio_identical_to_fault_free(zones: ZoneMesh, kind: str) -> None:
    result = scenarios.kill_worker_mid_sentence(zones, "gateway", kind)
    assert result.client_errors == []
    assert result.facts["killed_inside_sentence"] == 1.0
    assert result.facts["resumes"] >= 1, "the stream was not resumed: the kill missed it"
    assert result.identical == result.requests == 1


def test_zone_outage_completes_running_streams_and_traffic_returns_when_it_is_back(zones: ZoneMesh) -> None:
    result = scenarios.zone_outage(zones, "gateway")
    assert result.client_errors == []
    assert result.identical == result.compared == len(scenarios.TEXTS), "a stream running through the outage differs from its fault-free audio"
    assert result.facts["new_streams_in_zone_b"] == 1.0
    assert result.facts["traffic_back_in_zone_a"] == 1.0


@pytest.mark.parametrize("kind", ["acoustic", "vocoder"])
def test_blackholed_worker_fails_over_within_the_attempt_timeout(zones: ZoneMesh, kind: str) -> None:
    result = scenarios.blackhole_worker(zones, "gateway", kind, ATTEMPT_TIMEOUT_S)
    assert result.client_errors == []
    assert result.identical == 1
    baseline_s = result.baseline_first_audio_s[0]
    if kind == "acoustic":
        # Silence for one attempt timeout, then the other zone; not a second timeout.
        assert ATTEMPT_TIMEOUT_S <= result.first_audio_s[0] < baseline_s + 2 * ATTEMPT_TIMEOUT_S
    assert result.facts["total_s"] < scenarios.REQUEST_TIMEOUT_S


def test_refusing_worker_is_bypassed_without_a_client_error(zones: ZoneMesh) -> None:
    result = scenarios.overloaded_worker(zones, "gateway")
    assert result.client_errors == []
    assert result.identical == 2
    assert result.facts["refusals_retried"] >= 1


def test_saturated_mesh_sheds_with_resource_exhausted_quickly(zones: ZoneMesh) -> None:
    zones.start_gateway("gateway-one-acoustic", acoustic=[zones.spec("acoustic", "zone-a")], redis_url="", env=scenarios.SHED_AT_ONCE_ENV)
    try:
        result = scenarios.saturated_mesh_sheds(zones, "gateway-one-acoustic")
        shed = zones.gateway_metrics("gateway-one-acoustic")
    finally:
        zones.stop_gateway("gateway-one-acoustic")
    assert len(result.client_errors) == 1 and result.client_errors[0].startswith("RESOURCE_EXHAUSTED")
    assert result.completed == 1  # the request that held the worker
    assert result.facts["shed_after_s"] < 1.0
    assert shed.get('tts_gateway_shed_total{reason="workers_saturated"}', 0.0) == 1.0


def test_invalid_argument_from_a_worker_is_not_retried(zones: ZoneMesh) -> None:
    result, _rejecting = scenarios.invalid_argument_not_retried(zones, zones.model_info())
    assert len(result.client_errors) == 1 and result.client_errors[0].startswith("INVALID_ARGUMENT")
    assert result.facts["rejecting_streams"] == 1.0
    assert result.facts["zone_b_streams"] == 0.0
    assert result.facts["retries"] == 0.0


def test_redis_slow_or_killed_fails_no_request_and_caching_resumes(zones: ZoneMesh) -> None:
    result = scenarios.redis_outage(zones, "gateway")
    assert result.client_errors == []
    assert result.completed == result.requests
    assert result.facts["hits_after_restart"] >= 1


def test_failing_zone_under_steady_load_keeps_retries_within_the_budget(zones: ZoneMesh) -> None:
    result = scenarios.failing_zone_under_load(zones, zones.model_info())
    facts = result.facts
    assert facts["requests"] == result.requests
    assert facts["failing_streams"] >= facts["retries"] > 0
    assert facts["retries"] <= facts["budget_bound"]
    assert facts["denied_by_budget"] >= 1, "the budget never had to refuse: the load did not test it"
    # Every failed stream was dropped cleanly: no grpc request pump left to be destroyed pending.
    log = (zones.log_dir / "gateway-budget.log").read_text()
    assert "Task was destroyed but it is pending" not in log and "was never retrieved" not in log
