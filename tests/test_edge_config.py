"""The edge's configuration is written once (libs/edge/envoy.py): the Kubernetes rendering is that
code's output, and the real Envoy accepts it."""

from __future__ import annotations

import subprocess

import dataclasses

from libs.edge.envoy import K8S_PROD_RENDERING, K8S_RENDERING, EdgeSettings, edge_settings_for_k8s, render_yaml
from libs.edge.process import envoy_binary


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
        "k8s-prod": dataclasses.replace(edge_settings_for_k8s(prod=True), tls_cert=str(cert), tls_key=str(key), upstream_tls_ca=str(cert)),
    }.items():
        config = tmp_path / f"{name}.yaml"
        config.write_text(render_yaml(settings), encoding="utf-8")
        result = subprocess.run([str(envoy_binary()), "--mode", "validate", "-c", str(config)], capture_output=True, text=True)
        assert result.returncode == 0, f"{name}: {result.stdout[-2000:]}{result.stderr[-2000:]}"
