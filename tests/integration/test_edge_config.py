"""The edge's configuration is written once (libs/edge/envoy.py): the Kubernetes rendering is that
code's output, and the real Envoy accepts it."""

from __future__ import annotations

import dataclasses
import subprocess

from libs.edge.envoy import K8S_PROD_RENDERING, K8S_RENDERING, EdgeSettings, edge_settings_for_k8s, envoy_config, render_yaml
from libs.edge.process import envoy_binary
from libs.pb.tts.v1 import jobs_pb2, tts_pb2


def test_the_kubernetes_renderings_are_up_to_date() -> None:
    for path, prod in ((K8S_RENDERING, False), (K8S_PROD_RENDERING, True)):
        assert path.read_text(encoding="utf-8") == render_yaml(edge_settings_for_k8s(prod)), (
            f"{path} is stale: run python -m libs.edge.envoy --target k8s"
        )


def test_envoy_accepts_every_rendering(tmp_path) -> None:  # type: ignore[no-untyped-def]
    cert, key = tmp_path / "edge.crt", tmp_path / "edge.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=edge", "-days", "1",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    for name, settings in {
        "local": EdgeSettings(),
        "k8s": edge_settings_for_k8s(),
        "tls": EdgeSettings(tls_cert=str(cert), tls_key=str(key)),
        # prod's, with this test's files where the pod mounts its Secrets
        "k8s-prod": dataclasses.replace(
            edge_settings_for_k8s(prod=True), tls_cert=str(cert), tls_key=str(key), upstream_tls_ca=str(cert)
        ),
    }.items():
        config = tmp_path / f"{name}.yaml"
        config.write_text(render_yaml(settings), encoding="utf-8")
        result = subprocess.run([str(envoy_binary()), "--mode", "validate", "-c", str(config)], capture_output=True, text=True)
        assert result.returncode == 0, f"{name}: {result.stdout[-2000:]}{result.stderr[-2000:]}"


def test_every_public_grpc_service_is_routed_to_the_gateways_grpc_port() -> None:
    services = {service.full_name for module in (tts_pb2, jobs_pb2) for service in module.DESCRIPTOR.services_by_name.values()}
    assert {"tts.v1.TextToSpeech", "tts.v1.LongFormSynthesis"} <= services
    for settings in (EdgeSettings(), edge_settings_for_k8s(), edge_settings_for_k8s(prod=True)):
        (listener,) = envoy_config(settings)["static_resources"]["listeners"]
        (virtual_host,) = listener["filter_chains"][0]["filters"][0]["typed_config"]["route_config"]["virtual_hosts"]
        routes = {route["match"].get("prefix"): route.get("route", {}).get("cluster") for route in virtual_host["routes"]}
        unrouted = {service for service in services if routes.get(f"/{service}/") != "gateway_grpc"}
        assert not unrouted, f"the edge does not route {unrouted} to the gateway's gRPC port"
        assert routes["/"] == "gateway_http"  # /v1/... (jobs included) and the web page
