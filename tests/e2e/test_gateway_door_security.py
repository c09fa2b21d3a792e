"""The gateway's door with TLS and API keys on, as the production overlay runs it: a real gateway
process in front of the session mesh's workers (mutual TLS), real TLS clients, a real keys file.

Proves: TLS on the public port (plaintext and untrusting clients refused); health open to probes,
also on the plaintext --health-port; UNAUTHENTICATED without a valid key; per-key rate and stream
limits answered with RESOURCE_EXHAUSTED and a retry hint while other keys are served; the keys
file reloaded without a restart; the HTTP door asking for the same keys.
"""

from __future__ import annotations

import os
import queue
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import httpx
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from libs.devmesh.certs import MeshTls, make_mesh_tls
from libs.devmesh.launcher import service_command, stop_processes, wait_until_serving
from libs.pb.tts.v1 import tts_pb2, tts_pb2_grpc
from libs.serving.keys import StoredKey, hash_key, mint_key
from libs.wire.headers import PUSHBACK_METADATA_KEY
from tests.support.faults.zone_mesh import scrape, wait_for
from tests.support.mesh import REPO_ROOT, Mesh, ServiceProcess
from tests.support.ports import free_port

SERVING = health_pb2.HealthCheckResponse.SERVING
TEXT = "Only callers with a key are spoken to."


@dataclass
class Door:
    """A gateway with TLS on its public port and API keys, and what its clients need."""

    gateway: ServiceProcess
    public: MeshTls
    """Its public certificate is `public.worker_cert` (names 127.0.0.1); clients trust `public.ca`."""
    keys_file: Path
    health_port: int
    http_port: int
    keys: dict[str, str] = field(default_factory=dict)
    """Plain keys by id, as clients hold them."""
    lines: dict[str, StoredKey] = field(default_factory=dict)

    @property
    def address(self) -> str:
        return self.gateway.address

    def channel(self) -> grpc.Channel:
        """A TLS channel that verifies the gateway's certificate."""
        return grpc.secure_channel(self.address, grpc.ssl_channel_credentials(root_certificates=self.public.ca.read_bytes()))

    def write_keys(self, *ids: str) -> None:
        self.keys_file.write_text("".join(self.lines[key_id].line() + "\n" for key_id in ids), encoding="utf-8")


def _bearer(key: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {key}"),)


@pytest.fixture(scope="module")
def door(mesh: Mesh, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Door]:
    assert mesh.secrets is not None
    directory = tmp_path_factory.mktemp("door")
    public = make_mesh_tls(directory / "public")
    limits = {
        "calm": {},
        "hammer": {"rate_per_s": 0.1, "burst": 2},
        "single": {"max_streams": 1},
        "http-hammer": {"rate_per_s": 0.1, "burst": 1},
        "late": {},
    }
    plain = {key_id: mint_key() for key_id in limits}
    lines = {key_id: StoredKey(key_id, hash_key(plain[key_id]), **limit) for key_id, limit in limits.items()}  # type: ignore[arg-type]
    port, metrics_port, health_port, http_port = free_port(), free_port(), free_port(), free_port()
    log_path = directory / "gateway.log"
    door = Door(None, public, directory / "api-keys.jsonl", health_port, http_port, plain, lines)  # type: ignore[arg-type]
    door.write_keys("calm", "hammer", "single", "http-hammer")
    args = [
        "--host", "127.0.0.1", "--port", str(port), "--metrics-port", str(metrics_port),
        "--health-port", str(health_port), "--http-port", str(http_port),
        "--acoustic", f"local={mesh.services['acoustic'].address}", "--vocoder", f"local={mesh.services['vocoder'].address}",
        "--redis-url", "none", *mesh.secrets.tls.gateway_args(),
        "--tls-cert", str(public.worker_cert), "--tls-key", str(public.worker_key),
        "--api-keys-file", str(door.keys_file), "--api-keys-reload-s", "0.2",
    ]  # fmt: skip
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            service_command("gateway", args), cwd=REPO_ROOT, env={**os.environ, **mesh.env}, stdout=log, stderr=subprocess.STDOUT
        )
    door.gateway = ServiceProcess("gateway", port, metrics_port, log_path, process)
    try:
        # Health over TLS, with no key: what a probe that speaks TLS does.
        credentials = grpc.ssl_channel_credentials(root_certificates=public.ca.read_bytes())
        wait_until_serving(door.address, process, time.monotonic() + 120, credentials=credentials)
    except (RuntimeError, TimeoutError) as error:
        stop_processes([process])
        raise RuntimeError(f"{error}\n{door.gateway.log_tail()}") from None
    yield door
    stop_processes([process])


def _error(call) -> grpc.RpcError:  # type: ignore[no-untyped-def]
    with pytest.raises(grpc.RpcError) as caught:
        for _ in call:
            pass
    return caught.value


def _audio(stub: tts_pb2_grpc.TextToSpeechStub, key: str, text: str = TEXT) -> bytes:
    return b"".join(r.audio for r in stub.Synthesize(tts_pb2.SynthesizeRequest(text=text), metadata=_bearer(key), timeout=120))


def _refusals(door: Door) -> dict[str, float]:
    prefix = 'tts_gateway_auth_refusals_total{reason="'
    return {key[len(prefix) : -2]: value for key, value in scrape(door.gateway.metrics_port).items() if key.startswith(prefix)}


def test_the_public_port_speaks_tls_to_a_client_that_verifies_it_and_to_no_other(door: Door, tmp_path: Path) -> None:
    with door.channel() as channel:
        assert len(_audio(tts_pb2_grpc.TextToSpeechStub(channel), door.keys["calm"])) > 22050
    stranger = make_mesh_tls(tmp_path / "stranger")
    untrusting = grpc.ssl_channel_credentials(root_certificates=stranger.ca.read_bytes())
    for channel in (grpc.insecure_channel(door.address), grpc.secure_channel(door.address, untrusting)):
        with channel:
            request = tts_pb2.SynthesizeRequest(text=TEXT)
            error = _error(tts_pb2_grpc.TextToSpeechStub(channel).Synthesize(request, metadata=_bearer(door.keys["calm"]), timeout=10))
            assert error.code() == grpc.StatusCode.UNAVAILABLE
    log = door.gateway.log_path.read_text(errors="replace")
    assert f"listening on port {door.gateway.port}, TLS" in log


def test_health_needs_no_key_and_the_health_port_serves_health_only_in_plaintext(door: Door) -> None:
    with door.channel() as channel:
        assert health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=10).status == SERVING
    with grpc.insecure_channel(f"127.0.0.1:{door.health_port}") as channel:
        request = health_pb2.HealthCheckRequest(service="tts.v1.TextToSpeech")
        assert health_pb2_grpc.HealthStub(channel).Check(request, timeout=10).status == SERVING
        with pytest.raises(grpc.RpcError) as caught:
            tts_pb2_grpc.TextToSpeechStub(channel).ListVoices(tts_pb2.ListVoicesRequest(), metadata=_bearer(door.keys["calm"]), timeout=10)
        assert caught.value.code() == grpc.StatusCode.UNIMPLEMENTED


def test_callers_without_a_valid_key_are_unauthenticated_and_told_how_to_send_one(door: Door) -> None:
    before = _refusals(door)
    wrong = mint_key()
    with door.channel() as channel:
        stub = tts_pb2_grpc.TextToSpeechStub(channel)
        missing = _error(stub.Synthesize(tts_pb2.SynthesizeRequest(text=TEXT), timeout=10))
        unknown = _error(stub.Synthesize(tts_pb2.SynthesizeRequest(text=TEXT), metadata=_bearer(wrong), timeout=10))
        streaming = _error(stub.StreamingSynthesize(iter([tts_pb2.StreamingSynthesizeRequest()]), timeout=10))
        with pytest.raises(grpc.RpcError) as voices:
            stub.ListVoices(tts_pb2.ListVoicesRequest(), timeout=10)
    for error in (missing, unknown, streaming, voices.value):
        assert error.code() == grpc.StatusCode.UNAUTHENTICATED
    assert "authorization: Bearer <key>" in missing.details()
    assert "not valid" in unknown.details() and wrong not in unknown.details()
    after = _refusals(door)
    assert after.get("missing_key", 0) - before.get("missing_key", 0) == 3
    assert after.get("unknown_key", 0) - before.get("unknown_key", 0) == 1


def test_a_key_hammering_past_its_rate_is_refused_with_a_retry_hint_while_another_key_is_served(door: Door) -> None:
    before = _refusals(door).get("rate_limited", 0)
    refusals: list[grpc.RpcError] = []
    served = threading.Event()
    calm_audio: list[bytes] = []

    def calm() -> None:
        with door.channel() as channel:
            calm_audio.append(_audio(tts_pb2_grpc.TextToSpeechStub(channel), door.keys["calm"]))
        served.set()

    thread = threading.Thread(target=calm)
    thread.start()
    calls = 0
    with door.channel() as channel:
        stub = tts_pb2_grpc.TextToSpeechStub(channel)
        while calls < 20 or not served.is_set():  # hammer for as long as the other key's request runs
            calls += 1
            try:
                stub.ListVoices(tts_pb2.ListVoicesRequest(), metadata=_bearer(door.keys["hammer"]), timeout=10)
            except grpc.RpcError as error:
                refusals.append(error)
    thread.join(timeout=180)
    assert calm_audio and len(calm_audio[0]) > 22050, "the other key's request was not served"
    # 0.1 requests/s with a burst of 2: at most 2 plus one per 10 s got through.
    assert len(refusals) >= calls - 10
    for error in refusals:
        assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "API key hammer is over its rate of 0.1 requests/s (burst 2); retry in" in error.details()
        pushback_ms = dict(error.trailing_metadata())[PUSHBACK_METADATA_KEY]
        assert 0 < int(pushback_ms) <= 10_000
    assert _refusals(door)["rate_limited"] - before == len(refusals)


def test_a_key_at_its_stream_limit_is_refused_until_its_stream_ends_and_other_keys_are_not(door: Door) -> None:
    pieces: queue.Queue[str | None] = queue.Queue()

    def held_requests() -> Iterator[tts_pb2.StreamingSynthesizeRequest]:
        yield tts_pb2.StreamingSynthesizeRequest(config=tts_pb2.StreamingSynthesizeConfig())
        while (piece := pieces.get()) is not None:
            yield tts_pb2.StreamingSynthesizeRequest(text=piece)

    with door.channel() as channel:
        stub = tts_pb2_grpc.TextToSpeechStub(channel)
        held = stub.StreamingSynthesize(held_requests(), metadata=_bearer(door.keys["single"]), timeout=120)
        inflight = "tts_gateway_inflight_streams"
        wait_for(lambda: scrape(door.gateway.metrics_port).get(inflight) == 1, timeout_s=60, what="the held stream is open")
        second = _error(stub.Synthesize(tts_pb2.SynthesizeRequest(text=TEXT), metadata=_bearer(door.keys["single"]), timeout=30))
        assert second.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "API key single has 1 streams open, its limit; retry when one ends" in second.details()
        assert dict(second.trailing_metadata())[PUSHBACK_METADATA_KEY] == "1000"
        assert len(_audio(stub, door.keys["calm"])) > 22050  # another key is not held back
        pieces.put("The held stream ends now.")
        pieces.put(None)
        assert sum(len(response.audio) for response in held) > 0
        assert len(_audio(stub, door.keys["single"])) > 22050  # its stream came back


def test_keys_added_to_or_removed_from_the_file_apply_without_a_restart(door: Door) -> None:
    def voices_with(key_id: str) -> grpc.StatusCode:
        with door.channel() as channel:
            try:
                tts_pb2_grpc.TextToSpeechStub(channel).ListVoices(tts_pb2.ListVoicesRequest(), metadata=_bearer(door.keys[key_id]), timeout=10)
                return grpc.StatusCode.OK
            except grpc.RpcError as error:
                return error.code()

    assert voices_with("late") == grpc.StatusCode.UNAUTHENTICATED
    door.write_keys("calm", "hammer", "single", "http-hammer", "late")
    wait_for(lambda: voices_with("late") == grpc.StatusCode.OK, timeout_s=60, what="the added key is accepted")
    door.write_keys("calm", "hammer", "single", "http-hammer")
    wait_for(lambda: voices_with("late") == grpc.StatusCode.UNAUTHENTICATED, timeout_s=60, what="the removed key is refused")
    assert voices_with("calm") == grpc.StatusCode.OK
    assert door.gateway.process.poll() is None


def test_the_http_door_speaks_tls_with_the_public_certificate_and_no_plaintext(door: Door) -> None:
    url = f"https://127.0.0.1:{door.http_port}/v1/models"
    with httpx.Client(timeout=30, verify=ssl.create_default_context(cafile=str(door.public.ca))) as client:
        assert client.get(url, headers={"Authorization": f"Bearer {door.keys['calm']}"}).status_code == 200
    with httpx.Client(timeout=30) as client, pytest.raises(httpx.HTTPError):
        client.get(f"http://127.0.0.1:{door.http_port}/v1/models")
    assert f"HTTP API listening on port {door.http_port}, TLS" in door.gateway.log_path.read_text(errors="replace")


def test_the_http_door_asks_for_the_same_keys(door: Door) -> None:
    url = f"https://127.0.0.1:{door.http_port}/v1/models"
    with httpx.Client(timeout=30, verify=ssl.create_default_context(cafile=str(door.public.ca))) as client:
        anonymous = client.get(url)
        assert anonymous.status_code == 401 and anonymous.headers["www-authenticate"] == "Bearer"
        assert anonymous.json()["error"]["type"] == "authentication_error"
        assert client.get(url, headers={"Authorization": f"Bearer {door.keys['calm']}"}).status_code == 200
        # Only the API asks: the web page's static files (or the 404 where none is built) are public.
        assert client.get(f"https://127.0.0.1:{door.http_port}/").status_code in (200, 404)
        statuses = [client.get(url, headers={"Authorization": f"Bearer {door.keys['http-hammer']}"}) for _ in range(5)]
    limited = [response for response in statuses if response.status_code == 429]
    assert len(limited) >= 3
    assert all(int(response.headers["retry-after"]) >= 1 and response.json()["error"]["code"] == "rate_limited" for response in limited)
