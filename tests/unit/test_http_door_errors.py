"""Every refusal of the HTTP door is OpenAI's error shape with the status of the one table: a bad
body, a body over the limit, an unknown model, a route or method that does not exist; the request
metrics count each refusal by its gRPC code. The synthesizer is never reached by a refused request."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import grpc
import pytest
from starlette.testclient import TestClient

from libs.serving.status import HTTP_STATUS, http_status_for
from libs.telemetry.metrics import GatewayMetrics
from libs.voice.registry import default_registry
from services.gateway.http_api import METHOD, SpeechApi

MAX_BODY_BYTES = 4096


class _NoSynthesis:
    """Stands in for the synthesizer of requests that must be refused before any synthesis."""

    async def synthesize(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a refused request reached the synthesizer")


@pytest.fixture()
def door() -> tuple[TestClient, GatewayMetrics]:
    metrics = GatewayMetrics()
    api = SpeechApi(_NoSynthesis(), default_registry(), metrics, MAX_BODY_BYTES)  # type: ignore[arg-type]
    return TestClient(api.app()), metrics


def openai_error(response: Any) -> dict[str, Any]:
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}
    assert body["error"]["message"]
    return body["error"]


def refused_total(metrics: GatewayMetrics, code: str) -> float:
    return metrics.registry.get_sample_value("tts_gateway_requests_total", {"method": METHOD, "code": code}) or 0.0


def test_a_bad_body_is_refused_with_its_param_and_counted(door: tuple[TestClient, GatewayMetrics]) -> None:
    client, metrics = door
    response = client.post("/v1/audio/speech", json={"model": "tts-1", "voice": "alloy", "input": "Hi.", "speed": "fast"})
    assert response.status_code == 400
    assert openai_error(response) | {"message": ""} == {"message": "", "type": "invalid_request_error", "param": "speed", "code": "invalid_type"}
    assert refused_total(metrics, "INVALID_ARGUMENT") == 1


def test_an_unknown_model_or_voice_is_404_naming_it(door: tuple[TestClient, GatewayMetrics]) -> None:
    client, metrics = door
    model = client.post("/v1/audio/speech", json={"model": "whisper-1", "voice": "alloy", "input": "Hi."})
    voice = client.post("/v1/audio/speech/captioned", json={"model": "tts-1", "voice": "nobody", "input": "Hi."})
    listed = client.get("/v1/models/whisper-1")
    assert model.status_code == voice.status_code == listed.status_code == 404
    assert (openai_error(model)["param"], openai_error(model)["code"]) == ("model", "model_not_found")
    assert (openai_error(voice)["param"], openai_error(voice)["code"]) == ("voice", "not_found")
    assert openai_error(listed)["code"] == "model_not_found"
    assert refused_total(metrics, "NOT_FOUND") == 1  # the speech route's own count


def test_a_body_that_is_not_json_or_over_the_limit_is_refused(door: tuple[TestClient, GatewayMetrics]) -> None:
    client, _ = door
    not_json = client.post("/v1/audio/speech", content=b"{input: hi}")
    too_big = client.post("/v1/audio/speech", content=b"{" + b" " * MAX_BODY_BYTES + b"}")
    assert not_json.status_code == 400 and openai_error(not_json)["code"] == "invalid_json"
    assert too_big.status_code == 413 and openai_error(too_big)["code"] == "request_too_large"
    assert "send a shorter `input`" in openai_error(too_big)["message"]


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (b"[" * 2_000 + b"]" * 2_000, "too deeply"),
        (b'{"input": ' + b"[" * 1_900 + b"]" * 1_900 + b"}", "too deeply"),
        (b'{"input": "caf\xe9"}', "not UTF-8"),
    ],
    ids=["deep arrays", "deep in a field", "latin-1"],
)
def test_json_nested_too_deep_or_not_utf8_is_400_saying_so(door: tuple[TestClient, GatewayMetrics], body: bytes, says: str) -> None:
    client, metrics = door
    response = client.post("/v1/audio/speech", content=body, headers={"Content-Type": "application/json"})
    assert response.status_code == 400
    error = openai_error(response)
    assert error["code"] == "invalid_json" and says in error["message"]
    assert refused_total(metrics, "INVALID_ARGUMENT") == 1


def test_an_unknown_route_or_method_is_answered_in_the_same_shape(door: tuple[TestClient, GatewayMetrics]) -> None:
    client, _ = door
    missing = client.post("/v1/audio/transcriptions", json={})
    wrong_method = client.get("/v1/audio/speech")
    assert missing.status_code == 404 and openai_error(missing)["code"] == "not_found"
    assert "/v1/audio/transcriptions" in openai_error(missing)["message"]
    assert wrong_method.status_code == 405 and openai_error(wrong_method)["code"] == "method_not_allowed"
    assert wrong_method.headers["allow"] == "POST"
    assert "it takes POST" in openai_error(wrong_method)["message"]


@pytest.mark.parametrize(
    ("code", "status", "kind"),
    [
        (grpc.StatusCode.INVALID_ARGUMENT, 400, "invalid_request_error"),
        (grpc.StatusCode.NOT_FOUND, 404, "invalid_request_error"),
        (grpc.StatusCode.FAILED_PRECONDITION, 409, "invalid_request_error"),
        (grpc.StatusCode.UNAUTHENTICATED, 401, "authentication_error"),
        (grpc.StatusCode.PERMISSION_DENIED, 403, "permission_error"),
        (grpc.StatusCode.RESOURCE_EXHAUSTED, 429, "rate_limit_error"),
        (grpc.StatusCode.UNAVAILABLE, 503, "service_unavailable"),
        (grpc.StatusCode.DEADLINE_EXCEEDED, 504, "timeout"),
        (grpc.StatusCode.INTERNAL, 500, "server_error"),
        (grpc.StatusCode.DATA_LOSS, 500, "server_error"),
    ],
)
def test_one_table_gives_each_grpc_code_its_http_status(code: grpc.StatusCode, status: int, kind: str) -> None:
    assert http_status_for(code) == (status, kind)
    assert all(400 <= status < 600 for status, _ in HTTP_STATUS.values())


def test_with_the_web_page_at_the_root_api_paths_are_still_routes_not_files(tmp_path: Path) -> None:
    (tmp_path / "index.html").write_text("<!doctype html><title>page</title>", encoding="utf-8")
    api = SpeechApi(_NoSynthesis(), default_registry(), GatewayMetrics(), MAX_BODY_BYTES, tmp_path)  # type: ignore[arg-type]
    client = TestClient(api.app())
    assert client.get("/").text.startswith("<!doctype html>")
    wrong_method = client.get("/v1/audio/speech")
    assert wrong_method.status_code == 405 and wrong_method.headers["allow"] == "POST"
    assert openai_error(wrong_method)["code"] == "method_not_allowed"
    missing = client.post("/v1/audio/transcriptions", json={})
    assert missing.status_code == 404 and openai_error(missing)["code"] == "not_found"
    assert client.get("/missing.js").status_code == 404
