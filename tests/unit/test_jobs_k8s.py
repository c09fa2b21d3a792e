"""The job-runner manifests (k8s/components/job-runners/job-runner.yaml) match the pinned Kubernetes schemas, start
with settings the gateway accepts, and autoscale on a metric the gateway exports."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from prometheus_client import CollectorRegistry

from libs.jobs.metrics import JobMetrics
from scripts.k8s_validate import validate
from services.settings import known_env, load_gateway_settings

REPO = Path(__file__).resolve().parents[2]
MANIFEST = REPO / "k8s" / "components" / "job-runners" / "job-runner.yaml"


def resources() -> dict[str, dict[str, Any]]:
    return {doc["kind"]: doc for doc in yaml.safe_load_all(MANIFEST.read_text()) if doc and doc["kind"] != "NetworkPolicy"}


def base_config_maps() -> dict[str, str]:
    """The literals of the base's tts-common and tts-gateway ConfigMaps (the runner reads both)."""
    kustomization = yaml.safe_load((REPO / "k8s" / "base" / "kustomization.yaml").read_text())
    environ: dict[str, str] = {}
    for generator in kustomization["configMapGenerator"]:
        if generator["name"] in ("tts-common", "tts-gateway"):
            environ.update(literal.split("=", 1) for literal in generator.get("literals", []))
    return environ


def test_the_manifests_match_the_kubernetes_schemas() -> None:
    documents = [doc for doc in yaml.safe_load_all(MANIFEST.read_text()) if doc]
    assert validate(documents) == []


def test_the_runner_starts_as_a_gateway_with_two_runners_and_no_http_door() -> None:
    container = resources()["Deployment"]["spec"]["template"]["spec"]["containers"][0]
    module, *argv = container["args"]
    assert module == "services.gateway"
    environ = base_config_maps()
    environ.update({v["name"]: v.get("value", "zone-test") for v in container["env"]})
    unknown = {name for name in environ if name not in known_env("gateway") and not name.startswith("OTEL_")}
    assert not unknown
    settings = load_gateway_settings(argv, environ)
    assert (settings.jobs.job_runners, settings.http.http_port, settings.prewarm.promote_after) == (2, 0, 0)


def test_the_autoscaler_reads_the_queue_lag_the_gateway_exports() -> None:
    hpa = resources()["HorizontalPodAutoscaler"]["spec"]
    assert hpa["scaleTargetRef"]["name"] == "job-runner"
    registry = CollectorRegistry()
    JobMetrics(registry)
    names = {family.name for family in registry.collect()}
    assert [metric["external"]["metric"]["name"] for metric in hpa["metrics"]] == ["tts_jobs_queue_lag_seconds"]
    assert "tts_jobs_queue_lag_seconds" in names
