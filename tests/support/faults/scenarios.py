"""Fault scenarios on a running ZoneMesh, each compared with a fault-free run of the same requests.

The fault tests assert on the `ScenarioResult`s; bench/faults.py prints them as a table. Every
scenario leaves the mesh as it found it (workers restarted, proxies passing, Redis up).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

import grpc
import numpy as np

from tests.support.faults.scripted_worker import ScriptedAcoustic
from tests.support.faults.zone_mesh import Spoken, ZoneMesh, metric_sum, speak, wait_for

# Long first sentences, so a fault right after the first audio lands inside a sentence.
LONG_TEXT = (
    "The committee gathered in the old library on a cold and windy morning to read the long report aloud. "
    "Every member listened carefully while the chairman turned the pages one by one. "
    "Nobody spoke until the very last paragraph had been read."
)
TEXTS = (
    "Rivers carry small stones from the mountains all the way down to the quiet sea over many thousands of years. "
    "The water never stops moving.",
    "A careful engineer measures twice before cutting anything, and writes down every number in a small notebook. "
    "Then she checks it again.",
    "Trains leave the central station every seven minutes during the busy morning hours, and they are rarely late. "
    "Passengers like that.",
)
REQUEST_TIMEOUT_S = 60.0


def unique(text: str) -> str:
    """`text` plus a number, so no earlier run has cached it."""
    return f"{text} Number {uuid.uuid4().int % 1_000_000}."


@dataclass
class ScenarioResult:
    """What a fault scenario did to the clients' requests."""

    name: str
    requests: int = 0
    completed: int = 0
    compared: int = 0
    """Completed requests that had a fault-free reference to compare with."""
    identical: int = 0
    """Compared requests whose audio equals the fault-free run's, sample for sample."""
    client_errors: list[str] = field(default_factory=list)
    first_audio_s: list[float] = field(default_factory=list)
    baseline_first_audio_s: list[float] = field(default_factory=list)
    facts: dict[str, float] = field(default_factory=dict)
    """Scenario-specific readings (metric deltas, timings) for assertions and the table."""

    def record(self, spoken: Spoken | None, reference: np.ndarray | None, error: str | None = None) -> None:
        """Count one request's outcome."""
        self.requests += 1
        if spoken is None:
            self.client_errors.append(error or "unknown")
            return
        self.completed += 1
        self.first_audio_s.append(spoken.first_audio_s)
        if reference is None:
            return
        self.compared += 1
        if spoken.samples.shape == reference.shape and np.array_equal(spoken.samples, reference):
            self.identical += 1


def _try_speak(address: str, text: str, **kwargs: object) -> tuple[Spoken | None, str | None]:
    try:
        return speak(address, text, **kwargs), None  # type: ignore[arg-type]
    except grpc.RpcError as error:
        return None, f"{error.code().name}: {error.details()}"  # type: ignore[attr-defined]


def _reference(mesh: ZoneMesh, address: str, text: str, result: ScenarioResult) -> np.ndarray:
    """The fault-free audio of `text`, synthesised (not cached) the same way the faulted run will be."""
    mesh.flush_redis()
    spoken = speak(address, text, timeout_s=REQUEST_TIMEOUT_S)
    result.baseline_first_audio_s.append(spoken.first_audio_s)
    mesh.flush_redis()
    return spoken.samples


def kill_worker_mid_sentence(mesh: ZoneMesh, gateway: str, kind: str) -> ScenarioResult:
    """SIGKILL the local `kind` worker right after the first audio of a long sentence arrives."""
    address = mesh.gateways[gateway].address
    result = ScenarioResult(f"kill -9 {kind} mid-sentence")
    text = unique(LONG_TEXT)
    reference = _reference(mesh, address, text, result)
    resumes_before = metric_sum(mesh.gateway_metrics(gateway), "tts_gateway_resumes_total", kind=kind)

    def kill_on_first_audio(count: int, response: object) -> None:
        if count == 1:
            result.facts["killed_inside_sentence"] = float(not response.sentence_end)
            mesh.kill_worker(kind, "zone-a")

    spoken, error = _try_speak(address, text, timeout_s=REQUEST_TIMEOUT_S, on_audio=kill_on_first_audio)
    result.record(spoken, reference, error)
    result.facts["resumes"] = metric_sum(mesh.gateway_metrics(gateway), "tts_gateway_resumes_total", kind=kind) - resumes_before
    mesh.restart_worker(kind, "zone-a")
    return result


def blackhole_worker(mesh: ZoneMesh, gateway: str, kind: str, attempt_timeout_s: float) -> ScenarioResult:
    """Blackhole the local `kind` worker (it accepts bytes and never answers): the acoustic one before
    the request, the vocoder one right after the first audio."""
    address = mesh.gateways[gateway].address
    result = ScenarioResult(f"blackholed {kind}")
    text = unique(LONG_TEXT)
    reference = _reference(mesh, address, text, result)
    proxy = mesh.proxy(kind, "zone-a")

    def blackhole_on_first_audio(count: int, response: object) -> None:
        if count == 1:
            proxy.blackhole()

    try:
        if kind == "acoustic":
            proxy.blackhole()
            spoken, error = _try_speak(address, text, timeout_s=REQUEST_TIMEOUT_S)
        else:
            spoken, error = _try_speak(address, text, timeout_s=REQUEST_TIMEOUT_S, on_audio=blackhole_on_first_audio)
    finally:
        proxy.pass_through()
    result.record(spoken, reference, error)
    if spoken is not None:
        result.facts["total_s"] = spoken.total_s
        result.facts["attempt_timeout_s"] = attempt_timeout_s
    return result


def _concurrently(calls: list[Callable[[], None]]) -> None:
    threads = [threading.Thread(target=call) for call in calls]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def zone_outage(mesh: ZoneMesh, gateway: str) -> ScenarioResult:
    """Kill both workers of the gateway's zone while streams run; then bring them back."""
    address = mesh.gateways[gateway].address
    result = ScenarioResult("zone-a down mid-stream, then back")
    texts = [unique(text) for text in TEXTS]
    references = [_reference(mesh, address, text, result) for text in texts]
    outcomes: list[tuple[Spoken | None, str | None]] = [(None, None)] * len(texts)
    heard = [threading.Event() for _ in texts]
    killed = threading.Event()

    def run(index: int) -> None:
        def note(count: int, response: object) -> None:
            heard[index].set()
            killed.wait(timeout=30)  # keep the stream open until the zone is gone

        outcomes[index] = _try_speak(address, texts[index], timeout_s=REQUEST_TIMEOUT_S, on_audio=note)
        heard[index].set()

    def kill_zone() -> None:
        for event in heard:
            event.wait(timeout=60)
        mesh.kill_worker("acoustic", "zone-a")
        mesh.kill_worker("vocoder", "zone-a")
        killed.set()

    _concurrently([lambda i=i: run(i) for i in range(len(texts))] + [kill_zone])
    for (spoken, error), reference in zip(outcomes, references, strict=False):
        result.record(spoken, reference, error)

    # New streams go to the other zone while zone-a is down.
    before = {kind: mesh.worker_streams(kind, "zone-b") for kind in ("acoustic", "vocoder")}
    spoken, error = _try_speak(address, unique("A new stream while the local zone is down."), timeout_s=REQUEST_TIMEOUT_S)
    result.record(spoken, None, error)
    result.facts["new_streams_in_zone_b"] = float(all(mesh.worker_streams(k, "zone-b") > before[k] for k in before))

    # Bring zone-a back: once the gateway sees it healthy, traffic returns to it.
    for kind in ("acoustic", "vocoder"):
        mesh.restart_worker(kind, "zone-a", wait=False)
    for kind in ("acoustic", "vocoder"):
        mesh.wait_worker(kind, "zone-a")
    started = time.monotonic()
    wait_for(
        lambda: all(
            metric_sum(mesh.gateway_metrics(gateway), "tts_gateway_healthy_endpoints", kind=kind, zone="zone-a") == 1
            for kind in ("acoustic", "vocoder")
        ),
        timeout_s=30,
        what="the gateway seeing zone-a healthy again",
    )
    result.facts["seconds_to_see_zone_a_again"] = time.monotonic() - started
    before_a = {kind: mesh.worker_streams(kind, "zone-a") for kind in ("acoustic", "vocoder")}
    before_b = {kind: mesh.worker_streams(kind, "zone-b") for kind in ("acoustic", "vocoder")}
    spoken, error = _try_speak(address, unique("Back in the local zone."), timeout_s=REQUEST_TIMEOUT_S)
    result.record(spoken, None, error)
    result.facts["traffic_back_in_zone_a"] = float(
        all(mesh.worker_streams(k, "zone-a") > before_a[k] for k in before_a)
        and all(mesh.worker_streams(k, "zone-b") == before_b[k] for k in before_b)
    )
    return result


def overloaded_worker(mesh: ZoneMesh, gateway: str) -> ScenarioResult:
    """The local acoustic worker takes one stream at a time (TTS_MAX_STREAMS=1 in its environment):
    a second concurrent request is refused there with RESOURCE_EXHAUSTED and served by zone-b."""
    address = mesh.gateways[gateway].address
    result = ScenarioResult("RESOURCE_EXHAUSTED from one worker")
    # The first request must still hold its acoustic stream when the second arrives: give it
    # enough sentences that its stream stays open well past its first audio.
    texts = [unique(" ".join([LONG_TEXT, TEXTS[1], TEXTS[2]])), unique(TEXTS[0])]
    references = [_reference(mesh, address, text, result) for text in texts]
    before = mesh.gateway_metrics(gateway)
    outcomes: list[tuple[Spoken | None, str | None]] = [(None, None), (None, None)]
    first_heard = threading.Event()

    def first() -> None:
        outcomes[0] = _try_speak(address, texts[0], timeout_s=REQUEST_TIMEOUT_S, on_audio=lambda n, r: first_heard.set())
        first_heard.set()

    def second() -> None:
        first_heard.wait(timeout=60)  # the first request's acoustic stream is open in zone-a now
        outcomes[1] = _try_speak(address, texts[1], timeout_s=REQUEST_TIMEOUT_S)

    _concurrently([first, second])
    for (spoken, error), reference in zip(outcomes, references, strict=False):
        result.record(spoken, reference, error)
    after = mesh.gateway_metrics(gateway)
    result.facts["refusals_retried"] = metric_sum(after, "tts_gateway_retries_total", zone="zone-a", reason="resource_exhausted") - metric_sum(
        before, "tts_gateway_retries_total", zone="zone-a", reason="resource_exhausted"
    )
    return result


SHED_AT_ONCE_ENV: Final = {"TTS_ROOM_WAIT_MS": "0"}
"""The environment of `saturated_mesh_sheds`'s gateway: a request that finds the workers full is refused
at once instead of waiting for room, so how fast the refusal comes is the shedding's own speed (the
wait for room has its own tests)."""


def saturated_mesh_sheds(mesh: ZoneMesh, gateway: str) -> ScenarioResult:
    """A gateway (started with SHED_AT_ONCE_ENV) whose only acoustic worker is full sheds the next
    request with RESOURCE_EXHAUSTED, fast."""
    address = mesh.gateways[gateway].address
    result = ScenarioResult("saturated mesh sheds")
    holding = threading.Event()
    outcome: list[tuple[Spoken | None, str | None]] = [(None, None)]

    def hold() -> None:
        outcome[0] = _try_speak(address, unique(LONG_TEXT), timeout_s=REQUEST_TIMEOUT_S, on_audio=lambda n, r: holding.set())
        holding.set()

    thread = threading.Thread(target=hold)
    thread.start()
    holding.wait(timeout=60)
    started = time.monotonic()
    spoken, error = _try_speak(address, unique(TEXTS[1]), timeout_s=REQUEST_TIMEOUT_S)
    result.facts["shed_after_s"] = time.monotonic() - started
    result.record(spoken, None, error)
    thread.join()
    held, held_error = outcome[0]
    result.record(held, None, held_error)
    return result


def invalid_argument_not_retried(mesh: ZoneMesh, model_info: object) -> tuple[ScenarioResult, ScriptedAcoustic]:
    """A zone-a acoustic worker that rejects every sentence with INVALID_ARGUMENT, zone-b healthy."""
    rejecting = ScriptedAcoustic(model_info, grpc.StatusCode.INVALID_ARGUMENT)  # type: ignore[arg-type]
    rejecting.start()
    result = ScenarioResult("INVALID_ARGUMENT from a worker")
    try:
        gateway = mesh.start_gateway(
            "gateway-invalid", acoustic=[f"zone-a={rejecting.address}", mesh.spec("acoustic", "zone-b")], redis_url=""
        )
        zone_b_before = mesh.worker_streams("acoustic", "zone-b")
        spoken, error = _try_speak(gateway.address, unique("This request is rejected."), timeout_s=REQUEST_TIMEOUT_S)
        result.record(spoken, None, error)
        result.facts["zone_b_streams"] = mesh.worker_streams("acoustic", "zone-b") - zone_b_before
        result.facts["retries"] = metric_sum(mesh.gateway_metrics("gateway-invalid"), "tts_gateway_retries_total")
        result.facts["rejecting_streams"] = float(rejecting.streams)
    finally:
        mesh.stop_gateway("gateway-invalid")
        rejecting.stop()
    return result, rejecting


def redis_outage(mesh: ZoneMesh, gateway: str, requests: int = 8) -> ScenarioResult:
    """Slow Redis, then Redis killed in the middle of a run of requests; then restarted."""
    address = mesh.gateways[gateway].address
    result = ScenarioResult("Redis slow, killed, restarted")
    texts = _warm_cache(address, result)
    assert mesh.redis_proxy is not None
    mesh.redis_proxy.delay(0.5)  # five times the gateway's Redis timeout
    for index in range(requests // 2):
        spoken, error = _try_speak(address, texts[index % 2], timeout_s=REQUEST_TIMEOUT_S)
        result.record(spoken, None, error)
    mesh.redis_proxy.pass_through()
    _redis_killed_and_back(mesh, gateway, texts, requests // 2, result)
    return result


def redis_restart(mesh: ZoneMesh, gateway: str, requests: int = 8) -> ScenarioResult:
    """Redis killed in the middle of a run of requests, then started again (a Redis container or pod
    restarted: no proxy in front of it to slow it down)."""
    result = ScenarioResult("Redis killed, restarted")
    texts = _warm_cache(mesh.gateways[gateway].address, result)
    _redis_killed_and_back(mesh, gateway, texts, requests, result)
    return result


def _warm_cache(address: str, result: ScenarioResult) -> list[str]:
    """Two new short sentences, spoken once each so the cache holds them."""
    texts = [unique("Short cached sentence one."), unique("Short cached sentence two.")]
    for text in texts:
        spoken, error = _try_speak(address, text, timeout_s=REQUEST_TIMEOUT_S)
        result.record(spoken, None, error)
    return texts


def _redis_killed_and_back(mesh: ZoneMesh, gateway: str, texts: list[str], requests: int, result: ScenarioResult) -> None:
    """Kill Redis, speak `requests` times without it, start it again and speak until the cache hits."""
    address = mesh.gateways[gateway].address
    mesh.kill_redis()
    for index in range(requests):
        spoken, error = _try_speak(address, texts[index % 2], timeout_s=REQUEST_TIMEOUT_S)
        result.record(spoken, None, error)
    result.facts["completed_without_redis"] = float(result.completed)
    mesh.restart_redis()
    hits = lambda: metric_sum(mesh.gateway_metrics(gateway), "tts_gateway_cache_operations_total", outcome="hit")  # noqa: E731
    hits_before = hits()
    started = time.monotonic()
    # The breaker probes Redis again after it has been open a while; the first requests may still skip it.
    while hits() == hits_before and time.monotonic() - started < 30:
        spoken, error = _try_speak(address, texts[0], timeout_s=REQUEST_TIMEOUT_S)
        result.record(spoken, None, error)
        time.sleep(0.5)
    result.facts["hits_after_restart"] = hits() - hits_before
    result.facts["seconds_to_first_hit"] = time.monotonic() - started


def gateway_drains_on_sigterm(mesh: ZoneMesh, gateway: str, streams: int = 3) -> ScenarioResult:
    """SIGTERM a gateway while it serves `streams` long streams (as a pod's deletion does): each one
    finishes with the audio of a fault-free run, and the gateway then exits by itself."""
    address = mesh.gateways[gateway].address
    result = ScenarioResult("gateway SIGTERM while streaming")
    texts = [unique(LONG_TEXT) for _ in range(streams)]
    references = [_reference(mesh, address, text, result) for text in texts]
    outcomes: list[tuple[Spoken | None, str | None]] = [(None, None)] * streams
    heard = [threading.Event() for _ in texts]
    stopped: dict[str, float] = {}

    def run(index: int) -> None:
        outcomes[index] = _try_speak(address, texts[index], timeout_s=REQUEST_TIMEOUT_S, on_audio=lambda n, r: heard[index].set())
        heard[index].set()

    def stop() -> None:
        for event in heard:
            event.wait(timeout=60)
        started = time.monotonic()
        stopped["exit_code"] = float(mesh.stop_gateway(gateway) or 0)
        stopped["stop_s"] = time.monotonic() - started

    _concurrently([lambda i=i: run(i) for i in range(streams)] + [stop])
    for (spoken, error), reference in zip(outcomes, references, strict=False):
        result.record(spoken, reference, error)
    result.facts.update(stopped)
    return result


def failing_zone_under_load(mesh: ZoneMesh, model_info: object, requests: int = 20) -> ScenarioResult:
    """A zone-a acoustic worker that is SERVING but fails every stream, under a steady request rate;
    a gateway with a small retry budget and ejection off, so every request meets the failing zone."""
    failing = ScriptedAcoustic(model_info, grpc.StatusCode.UNAVAILABLE)  # type: ignore[arg-type]
    failing.start()
    result = ScenarioResult("failing zone under steady load")
    budget = {"TTS_RETRY_MAX_TOKENS": "3", "TTS_RETRY_FLOOR_PER_S": "0.1", "TTS_RETRY_RATIO": "0.1", "TTS_EJECTION_FAILURES": "1000"}
    try:
        gateway = mesh.start_gateway(
            "gateway-budget",
            acoustic=[f"zone-a={failing.address}", mesh.spec("acoustic", "zone-b")],
            redis_url="",
            env=budget,
        )
        started = time.monotonic()
        for index in range(requests):
            spoken, error = _try_speak(gateway.address, f"Steady request number {index}.", timeout_s=REQUEST_TIMEOUT_S)
            result.record(spoken, None, error)
            time.sleep(0.1)
        elapsed_s = time.monotonic() - started
        samples = mesh.gateway_metrics("gateway-budget")
        result.facts["elapsed_s"] = elapsed_s
        result.facts["requests"] = metric_sum(samples, "tts_gateway_requests_total", method="Synthesize")
        result.facts["retries"] = metric_sum(samples, "tts_gateway_retries_total")
        result.facts["denied_by_budget"] = metric_sum(samples, "tts_gateway_retries_denied_total", reason="budget")
        result.facts["budget_bound"] = 3 + 0.1 * result.facts["requests"] + 0.1 * elapsed_s
        result.facts["failing_streams"] = float(failing.streams)
    finally:
        mesh.stop_gateway("gateway-budget")
        failing.stop()
    return result


def baseline(mesh: ZoneMesh, gateway: str, requests: int = 3) -> ScenarioResult:
    """No fault: the same kind of requests, for the first-audio comparison."""
    address = mesh.gateways[gateway].address
    result = ScenarioResult("no fault")
    for _ in range(requests):
        text = unique(LONG_TEXT)
        reference = _reference(mesh, address, text, result)
        spoken, error = _try_speak(address, text, timeout_s=REQUEST_TIMEOUT_S)
        result.record(spoken, reference, error)
    return result

