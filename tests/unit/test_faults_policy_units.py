"""The pieces of failure handling that need no network: admission limits, routing settings, attempts."""

from __future__ import annotations

import random
from types import SimpleNamespace

import grpc
import pytest

from libs.routing.attempts import AttemptFailure, Attempts
from libs.routing.endpoints import Endpoint
from libs.routing.health import HealthConfig, HealthTable, Serving
from libs.routing.picker import Picker, PickerConfig
from libs.routing.retry import RetryBudget, RetryBudgetConfig, RetryConfig, RetryPolicy
from libs.serving.admission import Admission, AdmissionSettings, refusal_reason
from libs.upstream.settings import UpstreamSettings, channel_options
from libs.wire.headers import GATEWAY_METADATA_KEY, PUSHBACK_METADATA_KEY
from scripts.run_zones import zone_specs
from tests.support.faults.clock import FakeClock


def _refusal(**state: float) -> str | None:
    values = dict(open_streams=0, queue_depth=0, rss_mb=100.0, free_gpu_mb=None)
    values.update(state)
    return refusal_reason(AdmissionSettings(max_streams=4, max_queue_depth=8, max_rss_mb=2000, min_free_gpu_mb=512), **values)


def test_admission_refuses_at_each_limit_and_admits_below_them() -> None:
    assert _refusal(open_streams=3, queue_depth=7, rss_mb=1999, free_gpu_mb=513) is None
    assert "4 streams open" in (_refusal(open_streams=4) or "")
    assert "8 inference jobs queued" in (_refusal(queue_depth=8) or "")
    assert "process memory 2001 MiB" in (_refusal(rss_mb=2001) or "")
    assert "free GPU memory 100 MiB" in (_refusal(free_gpu_mb=100) or "")


def test_zero_switches_a_limit_off() -> None:
    settings = AdmissionSettings(max_streams=0, max_queue_depth=0, max_rss_mb=0, min_free_gpu_mb=0)
    assert refusal_reason(settings, open_streams=10_000, queue_depth=10_000, rss_mb=1e9, free_gpu_mb=0.0) is None


class _Context:
    """The ServicerContext calls admission makes, recorded."""

    def __init__(self, metadata: tuple = ()) -> None:
        self.aborted: tuple[grpc.StatusCode, str, tuple] | None = None
        self.done_callbacks: list = []
        self.headers_sent = False
        self._metadata = metadata

    def invocation_metadata(self) -> tuple:
        return self._metadata

    async def abort(self, code: grpc.StatusCode, details: str, trailing_metadata: tuple = ()) -> None:
        self.aborted = (code, details, trailing_metadata)
        raise grpc.aio.AbortError()

    async def send_initial_metadata(self, metadata: tuple) -> None:
        self.headers_sent = True

    def add_done_callback(self, callback) -> None:  # type: ignore[no-untyped-def]
        self.done_callbacks.append(callback)


async def test_admission_counts_open_streams_by_gateway_and_refuses_with_a_pushback_hint() -> None:
    admission = Admission(AdmissionSettings(max_streams=1, pushback_ms=250), rss_mb=lambda: 0.0, gpu_free_mb=lambda d: None)
    first, second = _Context(((GATEWAY_METADATA_KEY, "gateway-a"),)), _Context()
    engine = SimpleNamespace(queue_depth=0, settings=SimpleNamespace(device="cpu"))
    await admission.admit(first, engine)
    assert admission.open_streams == 1 and first.aborted is None and first.headers_sent
    assert admission.by_gateway == {"gateway-a": 1}
    with pytest.raises(grpc.aio.AbortError):
        await admission.admit(second, engine)
    assert second.aborted is not None and not second.headers_sent
    code, _, trailers = second.aborted
    assert code is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert trailers == ((PUSHBACK_METADATA_KEY, "250"),)
    first.done_callbacks[0](first)  # the first stream ends
    assert admission.open_streams == 0 and admission.by_gateway == {}


def test_worker_channels_take_their_reconnect_and_keepalive_settings() -> None:
    options = dict(channel_options(UpstreamSettings(reconnect_max_ms=1500)))
    assert options["grpc.max_reconnect_backoff_ms"] == 1500
    assert options["grpc.keepalive_time_ms"] >= 10_000, "workers answer pings faster than every 10 s with GOAWAY"


def _attempts(clock: FakeClock, budget_tokens: float = 10.0) -> tuple[Attempts, HealthTable, list[Endpoint]]:
    endpoints = [Endpoint(zone, f"{zone}:1", "vocoder") for zone in ("zone-a", "zone-b", "zone-c")]
    table = HealthTable(endpoints, HealthConfig(consecutive_failures=2), clock=clock)
    for endpoint in endpoints:
        table.set_serving(endpoint, Serving.SERVING)
    picker = Picker(table, PickerConfig(local_zone="zone-a"), rng=random.Random(0))
    budget = RetryBudget(RetryBudgetConfig(max_tokens=budget_tokens), clock=clock)
    policy = RetryPolicy(RetryConfig(), budget=budget, rng=random.Random(0))
    return Attempts("vocoder", table, picker, policy), table, endpoints


def test_attempts_go_local_first_never_repeat_an_endpoint_and_stop_at_three() -> None:
    attempts, _, endpoints = _attempts(FakeClock())
    failure = AttemptFailure(grpc.StatusCode.UNAVAILABLE, "gone")
    chosen = []
    while (endpoint := attempts.choose()) is not None:
        chosen.append(endpoint)
        if not attempts.failed(endpoint, failure, remaining_s=10.0).retry:
            break
    assert chosen[0] == endpoints[0] and len(set(chosen)) == len(chosen) == 3


def test_overload_refusals_do_not_eject_but_worker_faults_do() -> None:
    attempts, table, endpoints = _attempts(FakeClock())
    local = endpoints[0]
    for _ in range(3):
        attempts.failed(local, AttemptFailure(grpc.StatusCode.RESOURCE_EXHAUSTED, "full"), remaining_s=10.0)
    assert table.status(local).available
    for _ in range(2):
        attempts.failed(local, AttemptFailure(grpc.StatusCode.DEADLINE_EXCEEDED, "silent"), remaining_s=10.0)
    assert not table.status(local).available


def test_success_starts_the_next_sentence_with_a_fresh_count() -> None:
    attempts, _, endpoints = _attempts(FakeClock())
    first = attempts.choose()
    assert first is not None
    attempts.failed(first, AttemptFailure(grpc.StatusCode.UNAVAILABLE, "gone"), remaining_s=10.0)
    second = attempts.choose()
    assert second is not None and second != first
    attempts.succeeded(second)
    assert attempts.made == 0 and attempts.choose() == endpoints[0]


def test_run_zones_wires_a_gateway_in_the_first_zone_to_both_zones() -> None:
    specs = zone_specs()
    gateway = specs[-1]
    assert gateway.service == "gateway" and gateway.args[:2] == ["--zone", "zone-a"]
    workers = [(spec.name, spec.port) for spec in specs[:-1]]
    assert workers == [("acoustic@zone-a", 50052), ("vocoder@zone-a", 50053), ("acoustic@zone-b", 50062), ("vocoder@zone-b", 50063)]
    assert "zone-b=127.0.0.1:50063" in gateway.args and "zone-a=127.0.0.1:50052" in gateway.args
