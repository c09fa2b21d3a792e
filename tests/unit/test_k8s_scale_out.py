"""The manifests scale out: per-pod discovery rights, placement, drains, Pod Security, digests, and
autoscaling and alerts as code that agree with the metrics the services export.

Rendered with kustomize as `kubectl apply -k` would; PromQL is parsed offline (scripts/k8s_monitoring.py).
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from scripts import k8s_monitoring
from scripts.k8s_validate import overlays, render, validate
from tests.integration.test_k8s_manifests import (
    DOWNWARD_ZONE,
    _by_kind,
    _container,
    _environment,
    _service_deployments,
    load_settings,
)
from tests.unit.test_telemetry_dashboard import DASHBOARD, load_catalog, metric_names

ROOT = Path(__file__).resolve().parents[2]
MONITORING = ROOT / "k8s" / "components" / "monitoring"
SPEECH_CHARS_PER_S = 16.0
"""Characters of text per second of speech at speed 1 (about 160 words a minute): what turns the
text limit into the longest stream."""


@pytest.fixture(scope="module")
def prod() -> list[dict[str, Any]]:
    return render(next(path for path in overlays() if path.name == "prod"))


@pytest.fixture(scope="module", params=[path.name for path in overlays()])
def any_overlay(request: pytest.FixtureRequest) -> tuple[str, list[dict[str, Any]]]:
    return request.param, render(next(path for path in overlays() if path.name == request.param))


def _pods(resources: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    workloads = {**_by_kind(resources, "Deployment"), **_by_kind(resources, "StatefulSet")}
    return {name: workload["spec"]["template"]["spec"] for name, workload in workloads.items()}


def test_prod_gateways_watch_endpointslices_with_a_role_that_may_only_list_and_watch_them(prod) -> None:
    config_maps = _by_kind(prod, "ConfigMap")
    gateway = _by_kind(prod, "Deployment")["gateway"]
    pod = gateway["spec"]["template"]["spec"]
    environ = _environment(_container(gateway), config_maps)
    assert environ["TTS_DISCOVERY"] == "kubernetes"
    assert load_settings("gateway", [], environ).upstream.discovery == "kubernetes"
    assert pod["serviceAccountName"] == "gateway" and pod["automountServiceAccountToken"] is True
    role = _by_kind(prod, "Role")["gateway-discovery"]
    assert role["rules"] == [{"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list", "watch"]}]
    binding = _by_kind(prod, "RoleBinding")["gateway-discovery"]
    assert binding["roleRef"]["name"] == "gateway-discovery"
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "gateway", "namespace": "tts"}]
    # No other pod gets a token.
    for name, other in _pods(prod).items():
        if name != "gateway":
            assert other.get("automountServiceAccountToken") is False, name


def test_prod_spreads_gateways_and_workers_over_zones_strictly(prod) -> None:
    for name in ("gateway", "acoustic", "vocoder"):
        constraints = _pods(prod)[name]["topologySpreadConstraints"]
        zone = next(c for c in constraints if c["topologyKey"] == "topology.kubernetes.io/zone")
        assert zone["whenUnsatisfiable"] == "DoNotSchedule", name


def test_prod_service_containers_get_the_cpu_they_are_sized_on(prod) -> None:
    for name, deployment in _service_deployments(prod).items():
        resources = _container(deployment)["resources"]
        assert resources["requests"]["cpu"] == resources["limits"]["cpu"], name
        assert resources["requests"]["memory"] == resources["limits"]["memory"], name


def test_gateway_drains_for_as_long_as_the_longest_stream(any_overlay) -> None:
    _, resources = any_overlay
    gateway = _by_kind(resources, "Deployment")["gateway"]
    container = _container(gateway)
    settings = load_settings("gateway", container["args"][1:], _environment(container, _by_kind(resources, "ConfigMap")))
    longest_stream_s = settings.limits.max_text_chars / SPEECH_CHARS_PER_S
    assert settings.server.shutdown_grace_s >= longest_stream_s
    pre_stop_s = container["lifecycle"]["preStop"]["sleep"]["seconds"]
    assert gateway["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] >= pre_stop_s + settings.server.shutdown_grace_s


def _restricted_problems(name: str, pod: dict[str, Any]) -> list[str]:
    """What keeps a pod template out of Pod Security's "restricted" profile."""
    problems = []
    pod_context = pod.get("securityContext", {})
    if pod.get("hostNetwork") or pod.get("hostPID") or pod.get("hostIPC"):
        problems.append(f"{name}: host namespaces")
    if any("hostPath" in volume for volume in pod.get("volumes", [])):
        problems.append(f"{name}: hostPath volume")
    for container in pod.get("containers", []) + pod.get("initContainers", []):
        context = container.get("securityContext", {})
        where = f"{name}/{container['name']}"
        if context.get("privileged"):
            problems.append(f"{where}: privileged")
        if context.get("allowPrivilegeEscalation") is not False:
            problems.append(f"{where}: allowPrivilegeEscalation must be false")
        if context.get("capabilities", {}).get("drop") != ["ALL"] or set(context.get("capabilities", {}).get("add", [])) - {"NET_BIND_SERVICE"}:
            problems.append(f"{where}: must drop ALL capabilities")
        if not context.get("runAsNonRoot", pod_context.get("runAsNonRoot")):
            problems.append(f"{where}: runAsNonRoot")
        if context.get("runAsUser", pod_context.get("runAsUser")) == 0:
            problems.append(f"{where}: runs as root")
        seccomp = context.get("seccompProfile", pod_context.get("seccompProfile", {})).get("type")
        if seccomp not in ("RuntimeDefault", "Localhost"):
            problems.append(f"{where}: seccompProfile RuntimeDefault")
    return problems


def test_namespaces_enforce_the_restricted_pod_security_profile_and_every_pod_meets_it(any_overlay) -> None:
    _, resources = any_overlay
    (namespace,) = _by_kind(resources, "Namespace").values()
    labels = namespace["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "restricted"
    problems = [problem for name, pod in _pods(resources).items() for problem in _restricted_problems(name, pod)]
    assert problems == []
    # The check can fail: a root container is caught.
    broken = copy.deepcopy(_pods(resources)["gateway"])
    broken["containers"][0]["securityContext"]["allowPrivilegeEscalation"] = True
    assert _restricted_problems("gateway", broken)


def test_prod_runs_this_repositorys_images_by_digest_and_workers_on_the_gpu_image(prod) -> None:
    for name, pod in _pods(prod).items():
        for container in pod["containers"]:
            if "tts-mesh" in container["image"]:
                assert re.search(r"@sha256:[0-9a-f]{64}$", container["image"]), f"{name}: {container['image']}"
    for worker in ("acoustic", "vocoder"):
        assert "/tts-mesh-gpu@sha256:" in _container(_by_kind(prod, "Deployment")[worker])["image"]
    assert "/tts-mesh@sha256:" in _container(_by_kind(prod, "Deployment")["gateway"])["image"]


def test_the_gateway_scales_on_in_flight_streams_below_its_stream_limit(any_overlay) -> None:
    _, resources = any_overlay
    gateway = _by_kind(resources, "Deployment")["gateway"]
    container = _container(gateway)
    settings = load_settings("gateway", container["args"][1:], _environment(container, _by_kind(resources, "ConfigMap")))
    hpa = _by_kind(resources, "HorizontalPodAutoscaler")["gateway"]["spec"]
    (inflight,) = [m["pods"] for m in hpa["metrics"] if m["type"] == "Pods" and m["pods"]["metric"]["name"] == "tts_gateway_inflight_streams"]
    assert 0 < float(inflight["target"]["averageValue"]) < settings.limits.max_streams


def test_prod_gpu_workers_scale_out_at_a_full_batch_in_flight(prod) -> None:
    hpas = _by_kind(prod, "HorizontalPodAutoscaler")
    for worker in ("acoustic", "vocoder"):
        container = _container(_by_kind(prod, "Deployment")[worker])
        batch = int(next(variable["value"] for variable in container["env"] if variable["name"] == "TTS_MAX_BATCH"))
        target = next(m["pods"]["target"] for m in hpas[worker]["spec"]["metrics"] if m["type"] == "Pods" and m["pods"]["metric"]["name"] == f"tts_{worker}_inflight_streams")
        assert float(target["averageValue"]) == batch


def test_prometheus_adapter_serves_every_pod_metric_an_autoscaler_reads(prod) -> None:
    rules = yaml.safe_load((MONITORING / "adapter-rules.yaml").read_text())["rules"]
    served = [re.compile(rule["seriesQuery"].split('"')[1]) if "__name__" in rule["seriesQuery"] else re.compile(rule["name"]["as"]) for rule in rules]
    for name, hpa in _by_kind(prod, "HorizontalPodAutoscaler").items():
        for metric in hpa["spec"]["metrics"]:
            if metric["type"] == "Pods":
                metric_name = metric["pods"]["metric"]["name"]
                assert any(pattern.fullmatch(metric_name) for pattern in served), f"{name}: no adapter rule serves {metric_name}"


def test_rules_alert_on_each_slo_with_catalogued_metrics(prod) -> None:
    (rule,) = _by_kind(prod, "PrometheusRule").values()
    expressions = [item["expr"] for group in rule["spec"]["groups"] for item in group["rules"]]
    alerts = {item["alert"]: item for group in rule["spec"]["groups"] for item in group["rules"] if "alert" in item}
    assert {"TTSFirstAudioSlow", "TTSErrorBudgetFastBurn", "TTSErrorBudgetSlowBurn", "TTSRequestsShed", "TTSZoneWithoutWorkers", "TTSCacheHitRateLow"} <= set(alerts)
    catalog = load_catalog()
    for expression in expressions:
        for name in metric_names(expression):
            assert re.sub(r"_(bucket|sum|count)$", "", name) in catalog, f"{name} is not in CATALOG.md"
    assert validate([rule]) == []


def test_the_validator_rejects_a_rule_that_is_not_promql(prod) -> None:
    (rule,) = _by_kind(prod, "PrometheusRule").values()
    broken = copy.deepcopy(rule)
    broken["spec"]["groups"][1]["rules"][0]["expr"] = "histogram_quantile(0.95, sum by (le) (rate(x[5m]))"
    assert any("not PromQL" in problem for problem in validate([broken]))
    broken = copy.deepcopy(rule)
    broken["spec"]["groups"][1]["rules"][0]["for"] = "ten minutes"
    assert any("duration" in problem for problem in validate([broken]))
    monitor = copy.deepcopy(_by_kind(prod, "PodMonitor")["tts-services"])
    monitor["spec"]["podMetricsEndpoints"][0]["prot"] = "metrics"
    assert any("unknown field" in problem for problem in validate([monitor]))


def test_pod_monitors_scrape_ports_the_pods_have(prod) -> None:
    pods = _pods(prod)
    for monitor in _by_kind(prod, "PodMonitor").values():
        selector = monitor["spec"]["selector"]
        names = selector["matchExpressions"][0]["values"] if "matchExpressions" in selector else [selector["matchLabels"]["app.kubernetes.io/name"]]
        for endpoint in monitor["spec"]["podMetricsEndpoints"]:
            for name in names:
                ports = {port["name"] for container in pods[name]["containers"] for port in container.get("ports", [])}
                assert endpoint["port"] in ports, f"{name} has no port {endpoint['port']}"


def test_the_provisioned_dashboard_is_the_repositorys_and_every_query_parses(prod) -> None:
    assert (MONITORING / "dashboards" / "tts-mesh.json").read_text() == DASHBOARD.read_text()
    dashboards = _by_kind(prod, "ConfigMap")["tts-grafana-dashboards"]
    assert dashboards["metadata"]["labels"]["grafana_dashboard"] == "1"
    queries = k8s_monitoring.dashboard_queries(dashboards["data"]["tts-mesh.json"])
    assert queries and all(k8s_monitoring.parse_promql(query) is None for query in queries)
    assert any("by (pod)" in query and "inflight_streams" in query for query in queries), "no per-pod in-flight panel"


def test_placeholder_pods_hold_one_gpu_worker_per_zone_and_yield_to_any_real_pod(prod) -> None:
    priority = _by_kind(prod, "PriorityClass")["tts-headroom"]
    assert priority["value"] < 0 and priority["preemptionPolicy"] == "Never"
    headroom = _by_kind(prod, "Deployment")["headroom"]
    pod = headroom["spec"]["template"]["spec"]
    assert pod["priorityClassName"] == "tts-headroom"
    worker = _container(_by_kind(prod, "Deployment")["vocoder"])["resources"]["requests"]
    assert pod["containers"][0]["resources"]["requests"] == worker
    zones = {endpoint.split("=")[0] for endpoint in _environment(_container(_by_kind(prod, "Deployment")["gateway"]), _by_kind(prod, "ConfigMap"))["TTS_ACOUSTIC"].split(",")}
    assert headroom["spec"]["replicas"] == len(zones) and DOWNWARD_ZONE in zones


def test_prod_gateways_use_their_own_zones_redis_one_pod_per_zone(prod) -> None:
    config_maps = _by_kind(prod, "ConfigMap")
    environ = _environment(_container(_by_kind(prod, "Deployment")["gateway"]), config_maps)
    settings = load_settings("gateway", [], environ)
    zones = {endpoint.zone for endpoint in settings.upstream.acoustic}
    services = _by_kind(prod, "Service")
    redis = _by_kind(prod, "Deployment")["redis"]
    pod_labels = redis["spec"]["template"]["metadata"]["labels"]
    for zone in zones:
        host = settings.cache.url_for_zone(zone).split("//", 1)[1].split(":", 1)[0]
        selector = services[host]["spec"]["selector"]
        assert selector == {**{key: pod_labels[key] for key in ("app.kubernetes.io/name",)}, "topology.kubernetes.io/zone": zone}
    assert redis["spec"]["replicas"] == len(zones)
    spread = redis["spec"]["template"]["spec"]["topologySpreadConstraints"][0]
    assert (spread["topologyKey"], spread["whenUnsatisfiable"]) == ("topology.kubernetes.io/zone", "DoNotSchedule")
    assert _by_kind(prod, "PodDisruptionBudget")["redis"]["spec"]["maxUnavailable"] == 1
