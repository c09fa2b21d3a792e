"""The Kubernetes manifests render, validate against the schemas, and agree with what the services accept.

Each overlay is rendered with kustomize exactly as `kubectl apply -k` would. Every service container's
args and env are then parsed by the service's own loader (services.settings), so a renamed flag, a
removed env var or a changed default port fails here instead of in a cluster.
"""

from __future__ import annotations

import copy
import math
import re
from typing import Any

import pytest
import yaml

from libs.edge.envoy import edge_settings_for_k8s, render_yaml
from scripts.k8s_validate import KUBERNETES_VERSION, main, overlays, render, validate
from services.settings import SERVICES, known_env, load_gateway_settings, load_worker_settings
from tests.unit.test_telemetry_dashboard import load_catalog

OVERLAY_NAMES = [path.name for path in overlays()]


def load_settings(service: str, argv: list[str], environ: dict[str, str]) -> Any:
    """The settings `service` starts with from these args and this environment (SystemExit if it would not start)."""
    return load_gateway_settings(argv, environ) if service == "gateway" else load_worker_settings(service, argv, environ)


ZONE_LABEL = "topology.kubernetes.io/zone"
DOWNWARD_ZONE = "zone-a"  # stands for the zone label the downward API would read (one of the prod zones)


@pytest.fixture(scope="module", params=OVERLAY_NAMES)
def rendered(request: pytest.FixtureRequest) -> tuple[str, list[dict[str, Any]]]:
    overlay = next(path for path in overlays() if path.name == request.param)
    return request.param, render(overlay)


def _by_kind(resources: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {r["metadata"]["name"]: r for r in resources if r["kind"] == kind}


def _container(deployment: dict[str, Any]) -> dict[str, Any]:
    """The deployment's main container (named as the deployment; sidecars such as an exporter aside)."""
    containers = deployment["spec"]["template"]["spec"]["containers"]
    if len(containers) == 1:
        return containers[0]
    named = [container for container in containers if container["name"] == deployment["metadata"]["name"]]
    assert len(named) == 1
    return named[0]


def _cpu_cores(quantity: str) -> int:
    """A CPU quantity rounded up to whole cores, as resourceFieldRef with divisor 1 gives it."""
    return math.ceil(int(quantity[:-1]) / 1000) if quantity.endswith("m") else math.ceil(float(quantity))


def _environment(container: dict[str, Any], config_maps: dict[str, dict[str, Any]]) -> dict[str, str]:
    """The container's environment as the kubelet would build it (envFrom, then env)."""
    environ: dict[str, str] = {}
    for source in container.get("envFrom", []):
        environ.update(config_maps[source["configMapRef"]["name"]]["data"])
    for variable in container.get("env", []):
        if "value" in variable:
            environ[variable["name"]] = variable["value"]
            continue
        source = variable["valueFrom"]
        if "fieldRef" in source:
            assert source["fieldRef"]["fieldPath"] == f"metadata.labels['{ZONE_LABEL}']", variable
            environ[variable["name"]] = DOWNWARD_ZONE
        elif "resourceFieldRef" in source:
            ref = source["resourceFieldRef"]
            assert (ref["resource"], ref.get("divisor", "1")) == ("limits.cpu", "1"), variable
            environ[variable["name"]] = str(_cpu_cores(container["resources"]["limits"]["cpu"]))
        else:
            raise AssertionError(f"unexpected env source {variable}")
    return environ


def _service_deployments(resources: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    deployments = _by_kind(resources, "Deployment")
    assert set(SERVICES) <= set(deployments)
    return {name: deployments[name] for name in SERVICES}


def test_overlays_exist_and_the_validator_accepts_them(capsys: pytest.CaptureFixture[str]) -> None:
    assert {"dev", "prod"} <= set(OVERLAY_NAMES)
    assert main([]) == 0
    assert capsys.readouterr().out.count(f"valid against Kubernetes {KUBERNETES_VERSION}") == len(OVERLAY_NAMES)


def test_every_resource_matches_the_pinned_kubernetes_schemas(rendered) -> None:
    _, resources = rendered
    assert validate(resources) == []


def test_the_validator_rejects_a_misspelt_field(rendered) -> None:
    gateway = copy.deepcopy(_service_deployments(rendered[1])["gateway"])
    probe = _container(gateway)["readinessProbe"]
    probe["grcp"] = probe.pop("grpc")
    [message] = validate([gateway])
    assert "grcp" in message


def test_args_and_env_are_flags_the_services_accept(rendered) -> None:
    _, resources = rendered
    config_maps = _by_kind(resources, "ConfigMap")
    for service, deployment in _service_deployments(resources).items():
        container = _container(deployment)
        assert re.match(r"^tts-mesh(-gpu)?[:@]", container["image"].split("/")[-1]), container["image"]
        module, *argv = container["args"]
        assert module == f"services.{service}"
        environ = _environment(container, config_maps)
        unknown = {name for name in environ if name not in known_env(service) and not name.startswith("OTEL_")}
        assert not unknown, f"{service}: env vars the service does not read: {unknown}"
        # load_settings exits (SystemExit) on an unknown flag or a value it cannot parse.
        settings = load_settings(service, argv, environ)
        zone = "local" if environ["TTS_ZONE"] == "local" else DOWNWARD_ZONE
        assert settings.server.zone == zone
        if service != "gateway":  # the gateway runs no model
            assert settings.worker.threads == _cpu_cores(container["resources"]["limits"]["cpu"])


def test_container_probe_and_service_ports_are_the_ports_the_services_listen_on(rendered) -> None:
    _, resources = rendered
    config_maps = _by_kind(resources, "ConfigMap")
    services = _by_kind(resources, "Service")
    for service, deployment in _service_deployments(resources).items():
        container = _container(deployment)
        settings = load_settings(service, container["args"][1:], _environment(container, config_maps))
        server = settings.server
        ports = {port["name"]: port["containerPort"] for port in container["ports"]}
        expected = {"grpc": server.port, "metrics": server.metrics_port}
        if service == "gateway":
            expected["http"] = settings.http.http_port  # the HTTP API, reached through the edge
            if settings.wyoming.wyoming_port:
                expected["wyoming"] = settings.wyoming.wyoming_port  # Home Assistant's door (k8s/components/wyoming)
        if server.health_port:
            expected["health"] = server.health_port
        assert ports == expected
        # Kubernetes' gRPC probes speak plaintext: a TLS port is probed on the plaintext health port.
        probe_port = server.health_port if server.tls_cert else server.port
        assert probe_port, f"{service} serves TLS without a --health-port for its probes"
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            assert container[probe]["grpc"] == {"port": probe_port}, f"{service} {probe}"
        annotations = deployment["spec"]["template"]["metadata"]["annotations"]
        assert annotations["prometheus.io/port"] == str(server.metrics_port)
        grpc_port = next(p for p in services[service]["spec"]["ports"] if p["name"] == "grpc")
        assert (grpc_port["port"], grpc_port["targetPort"]) == (server.port, "grpc")


def test_gateway_worker_endpoints_resolve_to_services_of_that_kind_and_zone(rendered) -> None:
    name, resources = rendered
    config_maps = _by_kind(resources, "ConfigMap")
    services = _by_kind(resources, "Service")
    deployments = _service_deployments(resources)
    container = _container(deployments["gateway"])
    settings = load_settings("gateway", container["args"][1:], _environment(container, config_maps))
    zones_seen = set()
    for endpoint in settings.upstream.acoustic + settings.upstream.vocoder:
        service = services[endpoint.host]
        assert service["spec"]["clusterIP"] == "None", f"{endpoint.host} must be headless to reach every pod"
        selector = service["spec"]["selector"]
        assert selector["app.kubernetes.io/name"] == endpoint.kind
        assert endpoint.port in {p["port"] for p in service["spec"]["ports"]}
        worker = _container(deployments[endpoint.kind])
        worker_port = load_settings(endpoint.kind, worker["args"][1:], _environment(worker, config_maps)).server.port
        assert endpoint.port == worker_port
        if ZONE_LABEL in selector:
            assert selector[ZONE_LABEL] == endpoint.zone
        zones_seen.add(endpoint.zone)
    expected_zones = {"local"} if name == "dev" else {"zone-a", "zone-b", "zone-c"}
    assert zones_seen == expected_zones
    # The gateway's Redis is a Redis Service of this overlay (in prod its own zone's, "{zone}").
    host = "redis" if name == "dev" else "redis-{zone}"
    for zone in expected_zones:
        port = services[host.replace("{zone}", zone)]["spec"]["ports"][0]["port"]
        assert settings.cache.url_for_zone(zone) == f"redis://{host.replace('{zone}', zone)}:{port}/0"


def test_pods_spread_over_zones_and_shut_down_gracefully(rendered) -> None:
    _, resources = rendered
    config_maps = _by_kind(resources, "ConfigMap")
    for service, deployment in _service_deployments(resources).items():
        pod = deployment["spec"]["template"]["spec"]
        container = _container(deployment)
        assert ZONE_LABEL in {c["topologyKey"] for c in pod["topologySpreadConstraints"]}
        settings = load_settings(service, container["args"][1:], _environment(container, config_maps))
        pre_stop_s = container["lifecycle"]["preStop"]["sleep"]["seconds"]
        assert pod["terminationGracePeriodSeconds"] > pre_stop_s + settings.server.shutdown_grace_s
        startup = container["startupProbe"]
        startup_budget_s = startup["periodSeconds"] * startup["failureThreshold"]
        assert startup_budget_s >= (600 if service != "gateway" else 300), f"{service}: model loading needs time"
        assert pod["securityContext"]["runAsNonRoot"] is True


def test_workers_autoscale_on_in_flight_streams_with_cpu_fallback_and_90s_scale_up(rendered) -> None:
    _, resources = rendered
    hpas = _by_kind(resources, "HorizontalPodAutoscaler")
    for worker in ("acoustic", "vocoder"):
        hpa = hpas[worker]["spec"]
        assert hpa["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": worker}
        metrics = {m["type"]: m for m in hpa["metrics"]}
        pod_metrics = {m["pods"]["metric"]["name"] for m in hpa["metrics"] if m["type"] == "Pods"}
        assert f"tts_{worker}_inflight_streams" in pod_metrics
        assert pod_metrics - {"DCGM_FI_DEV_GPU_UTIL"} <= set(load_catalog()), "HPA metric missing from CATALOG.md"
        assert metrics["Resource"]["resource"]["name"] == "cpu"
        assert hpa["behavior"]["scaleUp"]["stabilizationWindowSeconds"] == 90
    budgets = _by_kind(resources, "PodDisruptionBudget")
    assert set(SERVICES) <= set(budgets)


def test_only_the_gateway_reaches_workers_and_redis(rendered) -> None:
    overlay, resources = rendered
    policies = _by_kind(resources, "NetworkPolicy")
    assert policies["default-deny-ingress"]["spec"] == {"podSelector": {}, "policyTypes": ["Ingress"]}
    gateway_only = [{"podSelector": {"matchLabels": {"app.kubernetes.io/name": "gateway"}}}]
    assert [rule["from"] for rule in policies["workers-from-gateway"]["spec"]["ingress"]] == [gateway_only]
    assert [rule["from"] for rule in policies["redis-from-gateway"]["spec"]["ingress"]] == [gateway_only]
    # The only rules without a source are the edge's port and, outside prod, the gateway's gRPC port.
    open_rules = [
        (policy["spec"]["podSelector"], rule["ports"])
        for policy in policies.values()
        for rule in policy["spec"].get("ingress", [])
        if "from" not in rule
    ]
    edge = ({"matchLabels": {"app.kubernetes.io/name": "edge"}}, [{"protocol": "TCP", "port": 8080}])
    direct = ({"matchLabels": {"app.kubernetes.io/name": "gateway"}}, [{"protocol": "TCP", "port": 50051}])
    assert open_rules == ([edge] if overlay == "prod" else [edge, direct])
    # Besides, the edge reaches the gateway's gRPC and HTTP ports.
    edge_only = [{"podSelector": {"matchLabels": {"app.kubernetes.io/name": "edge"}}}]
    assert [rule["from"] for rule in policies["gateway-from-edge"]["spec"]["ingress"]] == [edge_only]


def test_redis_evicts_least_recently_used_within_a_memory_cap(rendered) -> None:
    _, resources = rendered
    redis = _container(_by_kind(resources, "Deployment")["redis"])
    args = redis["args"]
    assert args[args.index("--maxmemory-policy") + 1] == "allkeys-lru"
    maxmemory_mb = int(args[args.index("--maxmemory") + 1].removesuffix("mb").removesuffix("gb")) * (
        1024 if args[args.index("--maxmemory") + 1].endswith("gb") else 1
    )
    limit = redis["resources"]["limits"]["memory"]
    limit_mb = int(limit[:-2]) * (1024 if limit.endswith("Gi") else 1)
    assert maxmemory_mb < limit_mb


def test_prod_workers_get_a_gpu_and_tolerate_gpu_nodes() -> None:
    prod = next(path for path in overlays() if path.name == "prod")
    deployments = _by_kind(render(prod), "Deployment")
    for worker in ("acoustic", "vocoder"):
        pod = deployments[worker]["spec"]["template"]["spec"]
        container = _container(deployments[worker])
        assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
        assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
        assert {"name": "TTS_DEVICE", "value": "cuda"} in container["env"]
        assert deployments[worker]["spec"]["replicas"] >= 3


def test_a_pod_without_a_zone_label_runs_in_zone_local() -> None:
    """Clusters before 1.35 leave the downward-API zone empty; the services must not take "" as a zone."""
    for service in SERVICES:
        assert load_settings(service, [], {"TTS_ZONE": ""}).server.zone == "local"


def _mounted_secret(deployment: dict[str, Any], path: str) -> str:
    """The Secret whose volume holds `path` in the deployment's container."""
    mounts = [mount for mount in _container(deployment).get("volumeMounts", []) if path.startswith(mount["mountPath"] + "/")]
    assert len(mounts) == 1, f"{path} is not in exactly one mounted volume"
    volume = next(v for v in deployment["spec"]["template"]["spec"]["volumes"] if v["name"] == mounts[0]["name"])
    assert "secret" in volume, f"{path} is not in a Secret volume"
    return volume["secret"]["secretName"]


def _secrets_used(pod: dict[str, Any]) -> set[str]:
    """Every Secret a pod mounts or reads into its environment."""
    names = {volume["secret"]["secretName"] for volume in pod.get("volumes", []) if "secret" in volume}
    for volume in pod.get("volumes", []):
        for source in volume.get("projected", {}).get("sources", []):
            if "secret" in source:
                names.add(source["secret"]["name"])
    for container in pod.get("containers", []) + pod.get("initContainers", []):
        names |= {source["secretRef"]["name"] for source in container.get("envFrom", []) if "secretRef" in source}
        names |= {
            v["valueFrom"]["secretKeyRef"]["name"] for v in container.get("env", []) if "secretKeyRef" in v.get("valueFrom", {})
        }
    return names


def test_every_secret_a_pod_uses_is_in_the_overlay_or_made_by_cert_manager(rendered) -> None:
    _, resources = rendered
    certificates = _by_kind(resources, "Certificate")
    made = set(_by_kind(resources, "Secret")) | {certificate["spec"]["secretName"] for certificate in certificates.values()}
    workloads = {**_by_kind(resources, "Deployment"), **_by_kind(resources, "StatefulSet")}
    for name, deployment in workloads.items():
        missing = _secrets_used(deployment["spec"]["template"]["spec"]) - made
        assert not missing, f"{name} uses Secrets nothing in the overlay makes: {missing}"
    # Each certificate comes from an Issuer of this overlay, or from a ClusterIssuer the cluster provides.
    issuers = set(_by_kind(resources, "Issuer"))
    for name, certificate in certificates.items():
        reference = certificate["spec"]["issuerRef"]
        assert reference.get("kind", "Issuer") == "ClusterIssuer" or reference["name"] in issuers, name


def test_egress_is_denied_but_for_what_each_service_calls(rendered) -> None:
    overlay, resources = rendered
    policies = _by_kind(resources, "NetworkPolicy")
    if overlay == "prod":
        # EndpointSlice discovery: the gateway, and only it, may reach the API server's HTTPS ports.
        apiserver = policies.pop("gateway-to-apiserver")["spec"]
        assert apiserver["podSelector"] == {"matchLabels": {"app.kubernetes.io/name": "gateway"}}
        assert [[set(peer) for peer in rule["to"]] for rule in apiserver["egress"]] == [[{"ipBlock"}]]
        assert {(port["protocol"], port["port"]) for port in apiserver["egress"][0]["ports"]} == {("TCP", 443), ("TCP", 6443)}
    assert policies["default-deny-egress"]["spec"] == {"podSelector": {}, "policyTypes": ["Egress"]}
    dns = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
           "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}}  # fmt: skip
    otlp = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
            "podSelector": {"matchLabels": {"app.kubernetes.io/name": "opentelemetry-collector"}}}  # fmt: skip
    workers = {
        "podSelector": {
            "matchExpressions": [{"key": "app.kubernetes.io/name", "operator": "In", "values": ["acoustic", "vocoder"]}]
        }
    }
    redis = {"podSelector": {"matchLabels": {"app.kubernetes.io/name": "redis"}}}
    redis_jobs = {"podSelector": {"matchLabels": {"app.kubernetes.io/name": "redis-jobs"}}}

    def allowed(policy: str) -> list[tuple[Any, set[tuple[str, int]]]]:
        rules = policies[policy]["spec"]["egress"]
        assert all(rule.get("to") for rule in rules), f"{policy} has a rule open to every destination"
        return [(peer, {(port["protocol"], port["port"]) for port in rule["ports"]}) for rule in rules for peer in rule["to"]]

    assert allowed("gateway-egress") == [
        (workers, {("TCP", 50052), ("TCP", 50053)}), (redis, {("TCP", 6379)}), (redis_jobs, {("TCP", 6379)}),
        (dns, {("UDP", 53), ("TCP", 53)}), (otlp, {("TCP", 4317)}),
    ]  # fmt: skip
    assert allowed("workers-egress") == [(dns, {("UDP", 53), ("TCP", 53)}), (otlp, {("TCP", 4317)})]
    gateway = {"podSelector": {"matchLabels": {"app.kubernetes.io/name": "gateway"}}}
    assert allowed("edge") == [(gateway, {("TCP", 50051), ("TCP", 8000)}), (dns, {("UDP", 53), ("TCP", 53)})]
    expected = [{}, {"matchLabels": {"app.kubernetes.io/name": "edge"}}, gateway["podSelector"], workers["podSelector"]]
    if overlay == "prod":  # job runners (component job-runners) call exactly what the gateway calls
        assert allowed("job-runner-egress") == allowed("gateway-egress")
        expected.append({"matchLabels": {"app.kubernetes.io/name": "job-runner"}})
    # Redis, and any pod not named above, sends nothing anywhere.
    egress_policies = [policy for policy in policies.values() if "Egress" in policy["spec"]["policyTypes"]]
    selected = sorted(str(policy["spec"]["podSelector"]) for policy in egress_policies)
    assert selected == sorted(str(selector) for selector in expected)
    assert not any(
        "ipBlock" in peer for policy in egress_policies for rule in policy["spec"].get("egress", []) for peer in rule["to"]
    )


def test_prod_gateway_serves_tls_asks_for_api_keys_seals_its_cache_and_dials_workers_with_mutual_tls() -> None:
    prod = next(path for path in overlays() if path.name == "prod")
    resources = render(prod)
    config_maps = _by_kind(resources, "ConfigMap")
    deployments = _service_deployments(resources)
    certificates = {certificate["spec"]["secretName"]: certificate for certificate in _by_kind(resources, "Certificate").values()}
    gateway = deployments["gateway"]
    container = _container(gateway)
    settings = load_settings("gateway", container["args"][1:], _environment(container, config_maps))
    assert settings.server.tls_cert and settings.server.tls_key and not settings.server.tls_client_ca
    # Only the edge is public: it shows the public certificate, and dials the gateway over TLS,
    # checking the gateway's certificate (for the name it dials) against the mesh CA.
    services = _by_kind(resources, "Service")
    assert services["edge"]["spec"]["type"] == "LoadBalancer" and services["edge"]["spec"]["ports"][0]["port"] == 443
    assert services["gateway"]["spec"]["type"] == "ClusterIP"
    edge = _by_kind(resources, "Deployment")["edge"]
    edge_envoy = yaml.safe_load(next(m for name, m in config_maps.items() if name.startswith("edge-envoy"))["data"]["envoy.yaml"])
    settings_edge = edge_settings_for_k8s(prod=True)
    assert edge_envoy == yaml.safe_load(render_yaml(settings_edge))
    edge_public = certificates[_mounted_secret(edge, settings_edge.tls_cert)]
    assert edge_public["spec"]["issuerRef"]["kind"] == "ClusterIssuer" and "server auth" in edge_public["spec"]["usages"]
    assert _mounted_secret(edge, settings_edge.upstream_tls_ca) == "tts-mesh-ca"
    internal = certificates[_mounted_secret(gateway, settings.server.tls_cert)]
    assert internal["spec"]["issuerRef"]["name"] == "tts-mesh-ca" and settings_edge.gateway_host in internal["spec"]["dnsNames"]
    assert settings.auth.enabled and _mounted_secret(gateway, settings.auth.api_keys_file) == "tts-api-keys"
    assert settings.cache.key_file and _mounted_secret(gateway, settings.cache.key_file) == "tts-cache-key"
    assert _mounted_secret(gateway, settings.cache.redis_password_file) == "tts-redis-auth"
    upstream = settings.upstream
    client = certificates[_mounted_secret(gateway, upstream.tls_cert)]
    assert "client auth" in client["spec"]["usages"]
    assert _mounted_secret(gateway, upstream.tls_ca) == _mounted_secret(gateway, upstream.tls_cert)  # ca.crt: the mesh CA
    for endpoint in upstream.acoustic + upstream.vocoder:
        worker = deployments[endpoint.kind]
        worker_container = _container(worker)
        server = load_settings(endpoint.kind, worker_container["args"][1:], _environment(worker_container, config_maps)).server
        served = certificates[_mounted_secret(worker, server.tls_cert)]
        # The worker asks for client certificates from the CA that issued the gateway's, and its own
        # certificate names the host the gateway dials.
        assert server.tls_client_ca and _mounted_secret(worker, server.tls_client_ca) == _mounted_secret(worker, server.tls_cert)
        assert served["spec"]["issuerRef"] == client["spec"]["issuerRef"]
        assert endpoint.host in served["spec"]["dnsNames"] and "server auth" in served["spec"]["usages"]
    redis = _container(_by_kind(resources, "Deployment")["redis"])
    assert redis["args"][-2:] == ["--requirepass", "$(REDIS_PASSWORD)"]
    assert {"name": "REDIS_PASSWORD", "valueFrom": {"secretKeyRef": {"name": "tts-redis-auth", "key": "password"}}} in redis[
        "env"
    ]


def _selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """Whether a label selector (matchLabels, matchExpressions with In) selects a pod with `labels`."""
    if any(labels.get(key) != value for key, value in selector.get("matchLabels", {}).items()):
        return False
    for expression in selector.get("matchExpressions", []):
        assert expression["operator"] == "In", expression
        if labels.get(expression["key"]) not in expression["values"]:
            return False
    return True


def _admitted_ports(policies: dict[str, dict[str, Any]], pod_labels: dict[str, str], caller_labels: dict[str, str]) -> set[int]:
    """The TCP ports of a pod with `pod_labels` that the NetworkPolicies open to a same-namespace pod with `caller_labels`."""
    ports: set[int] = set()
    for policy in policies.values():
        if "Ingress" not in policy["spec"]["policyTypes"] or not _selects(policy["spec"]["podSelector"], pod_labels):
            continue
        for rule in policy["spec"].get("ingress", []):
            peers = rule.get("from")
            if peers is None or any(
                "namespaceSelector" not in peer and _selects(peer["podSelector"], caller_labels) for peer in peers
            ):
                assert "ports" in rule, f"{policy['metadata']['name']} opens every port"
                ports |= {port["port"] for port in rule["ports"] if port["protocol"] == "TCP"}
    return ports


def test_prod_job_runners_dial_workers_and_redis_with_the_gateways_certificate_and_secrets() -> None:
    from scripts import k8s_monitoring

    prod = next(path for path in overlays() if path.name == "prod")
    resources = render(prod)
    config_maps = _by_kind(resources, "ConfigMap")
    deployments = _by_kind(resources, "Deployment")
    runner, gateway = deployments["job-runner"], deployments["gateway"]
    container = _container(runner)
    assert re.search(r"/tts-mesh@sha256:[0-9a-f]{64}$", container["image"]), container["image"]
    module, *argv = container["args"]
    assert module == "services.gateway"
    environ = _environment(container, config_maps)
    assert not {name for name in environ if name not in known_env("gateway") and not name.startswith("OTEL_")}
    settings = load_settings("gateway", argv, environ)
    gateway_container = _container(gateway)
    gateway_settings = load_settings("gateway", gateway_container["args"][1:], _environment(gateway_container, config_maps))
    assert settings.jobs.job_runners > 0 and settings.http.http_port == 0
    # Mutual TLS to the workers with the gateway's client certificate, trusting the same mesh CA.
    upstream = settings.upstream
    assert (upstream.tls_ca, upstream.tls_cert, upstream.tls_key) == (
        gateway_settings.upstream.tls_ca, gateway_settings.upstream.tls_cert, gateway_settings.upstream.tls_key,
    )  # fmt: skip
    assert _mounted_secret(runner, upstream.tls_cert) == _mounted_secret(gateway, gateway_settings.upstream.tls_cert)
    assert _mounted_secret(runner, upstream.tls_ca) == _mounted_secret(runner, upstream.tls_cert)
    assert _mounted_secret(runner, upstream.tls_key) == _mounted_secret(runner, upstream.tls_cert)
    assert (upstream.acoustic, upstream.vocoder) == (gateway_settings.upstream.acoustic, gateway_settings.upstream.vocoder)
    # The sealed cache's key and Redis's password, from the Secrets the gateway reads them from.
    assert settings.cache.key_file and _mounted_secret(runner, settings.cache.key_file) == "tts-cache-key"
    assert _mounted_secret(runner, settings.cache.redis_password_file) == "tts-redis-auth"
    assert settings.cache.url_for_zone(DOWNWARD_ZONE) == gateway_settings.cache.url_for_zone(DOWNWARD_ZONE)
    assert settings.auth.enabled and _mounted_secret(runner, settings.auth.api_keys_file) == "tts-api-keys"
    # Their gRPC port serves no one and speaks plaintext: probed there. They resolve workers by DNS,
    # holding no API token.
    assert not settings.server.tls_cert
    ports = {port["name"]: port["containerPort"] for port in container["ports"]}
    assert ports == {"grpc": settings.server.port, "metrics": settings.server.metrics_port}
    for probe in ("startupProbe", "livenessProbe"):
        assert container[probe]["grpc"] == {"port": settings.server.port}, probe
    pod = runner["spec"]["template"]["spec"]
    assert upstream.discovery == "dns" and pod["automountServiceAccountToken"] is False and "serviceAccountName" not in pod
    assert pod["securityContext"]["fsGroup"] == gateway["spec"]["template"]["spec"]["securityContext"]["fsGroup"]
    # A runner in every zone (a zone outage leaves runners on the one shared queue), spread strictly.
    zones = {endpoint.zone for endpoint in upstream.acoustic}
    hpa = _by_kind(resources, "HorizontalPodAutoscaler")["job-runner"]["spec"]
    assert runner["spec"]["replicas"] >= len(zones) and hpa["minReplicas"] >= len(zones)
    spread = next(c for c in pod["topologySpreadConstraints"] if c["topologyKey"] == ZONE_LABEL)
    assert spread["whenUnsatisfiable"] == "DoNotSchedule"
    # The autoscaler's external metric has an adapter rule, and its query is PromQL.
    adapter = yaml.safe_load(
        next(m for name, m in config_maps.items() if name.startswith("tts-prometheus-adapter-rules"))["data"][
            "adapter-rules.yaml"
        ]
    )
    served = {
        re.match(r"[a-zA-Z_:][a-zA-Z0-9_:]*", rule["seriesQuery"]).group(0): rule for rule in adapter.get("externalRules", [])
    }  # type: ignore[union-attr]
    for metric in hpa["metrics"]:
        assert metric["type"] == "External" and metric["external"]["metric"]["name"] in served, metric
    queries = k8s_monitoring.adapter_queries(yaml.safe_dump({"rules": list(served.values())}))
    assert queries and all(k8s_monitoring.parse_promql(query) is None for query in queries)


def test_worker_and_redis_ingress_admits_the_gateway_and_prod_job_runners_on_their_ports_only(rendered) -> None:
    overlay, resources = rendered
    policies = _by_kind(resources, "NetworkPolicy")
    deployments = _by_kind(resources, "Deployment")
    config_maps = _by_kind(resources, "ConfigMap")

    def labels(name: str) -> dict[str, str]:
        return deployments[name]["spec"]["template"]["metadata"]["labels"]

    callers = ["gateway", "job-runner"] if overlay == "prod" else ["gateway"]
    assert ("job-runner" in deployments) == (overlay == "prod")
    for worker in ("acoustic", "vocoder"):
        container = _container(deployments[worker])
        port = load_settings(worker, container["args"][1:], _environment(container, config_maps)).server.port
        for caller in callers:
            assert port in _admitted_ports(policies, labels(worker), labels(caller)), f"{worker} refuses the {caller}"
            assert _admitted_ports(policies, labels(worker), labels(caller)) <= {50052, 50053}, (
                f"{worker} opens more to the {caller}"
            )
        assert not _admitted_ports(policies, labels(worker), labels("edge")), f"{worker} takes calls from the edge"
    for caller in callers:
        assert _admitted_ports(policies, labels("redis"), labels(caller)) == {6379}, f"Redis and the {caller}"
    assert not _admitted_ports(policies, labels("redis"), labels("edge"))


def test_the_committed_api_keys_file_holds_hashes_only() -> None:
    from libs.serving.keys import parse_keys

    prod = next(path for path in overlays() if path.name == "prod")
    parse_keys((prod / "api-keys.jsonl").read_text(encoding="utf-8"))  # KeysFileError on anything but hashed lines


def _arg_value(args: list[str], flag: str) -> str:
    """The value after `flag` in a redis-server command line (the flag must be there exactly once)."""
    assert args.count(flag) == 1, f"{flag} in {args}"
    return args[args.index(flag) + 1]


def _memory_mb(quantity: str) -> int:
    """A Redis size (mb, gb) or a Kubernetes memory quantity (Mi, Gi) in MiB."""
    number, unit = re.fullmatch(r"(\d+)(mb|gb|Mi|Gi)", quantity).groups()  # type: ignore[union-attr]
    return int(number) * (1024 if unit in ("gb", "Gi") else 1)


def test_prod_job_redis_is_one_persistent_never_evicting_redis_asking_the_caches_password() -> None:
    from tests.unit.test_k8s_scale_out import _restricted_problems

    prod = next(path for path in overlays() if path.name == "prod")
    resources = render(prod)
    assert "redis-jobs" not in _by_kind(resources, "Deployment")
    stateful = _by_kind(resources, "StatefulSet")["redis-jobs"]
    spec = stateful["spec"]
    pod = spec["template"]["spec"]
    redis = _container(stateful)
    args = redis["args"]
    assert spec["replicas"] == 1 and args[0] == "redis-server"
    # Every write goes to an append-only file, fsynced every second, on a volume of its own.
    assert (_arg_value(args, "--appendonly"), _arg_value(args, "--appendfsync")) == ("yes", "everysec")
    [claim] = spec["volumeClaimTemplates"]
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"] and claim["spec"]["resources"]["requests"]["storage"]
    [data] = [mount for mount in redis["volumeMounts"] if mount["name"] == claim["metadata"]["name"]]
    assert data["mountPath"] == _arg_value(args, "--dir")
    assert not any(volume["name"] == claim["metadata"]["name"] for volume in pod.get("volumes", [])), "an emptyDir hides the claim"
    assert spec["persistentVolumeClaimRetentionPolicy"] == {"whenDeleted": "Retain", "whenScaled": "Retain"}
    # Full, it refuses writes instead of dropping jobs, and refuses before the kernel kills it.
    assert _arg_value(args, "--maxmemory-policy") == "noeviction"
    assert _memory_mb(_arg_value(args, "--maxmemory")) < _memory_mb(redis["resources"]["limits"]["memory"])
    # The caches' password, from the Secret the gateways' --redis-password-file holds.
    assert _arg_value(args, "--requirepass") == "$(REDIS_PASSWORD)"
    secret = {"secretKeyRef": {"name": "tts-redis-auth", "key": "password"}}
    assert {"name": "REDIS_PASSWORD", "valueFrom": secret} in redis["env"]
    assert {"name": "REDISCLI_AUTH", "valueFrom": secret} in redis["env"]  # for the probes' redis-cli
    cache = _container(_by_kind(resources, "Deployment")["redis"])
    assert next(v for v in cache["env"] if v["name"] == "REDIS_PASSWORD")["valueFrom"] == secret
    # Its Service is the StatefulSet's, selects its pod and serves its port; a budget covers it.
    labels = spec["template"]["metadata"]["labels"]
    service = _by_kind(resources, "Service")[spec["serviceName"]]["spec"]
    assert service["selector"] == {key: labels[key] for key in service["selector"]} == spec["selector"]["matchLabels"]
    assert [(port["port"], port["targetPort"]) for port in service["ports"]] == [(6379, "redis")]
    assert {port["name"]: port["containerPort"] for port in redis["ports"]} == {"redis": 6379}
    budget = _by_kind(resources, "PodDisruptionBudget")["redis-jobs"]["spec"]
    assert _selects(budget["selector"], labels) and budget["maxUnavailable"] == 1
    assert _restricted_problems("redis-jobs", pod) == []
    assert validate([stateful]) == []


def test_prod_gateways_and_job_runners_keep_jobs_in_the_job_redis_and_dev_in_the_cache(rendered) -> None:
    from services.gateway.background_work import job_redis_url

    overlay, resources = rendered
    config_maps = _by_kind(resources, "ConfigMap")
    deployments = _by_kind(resources, "Deployment")
    services = _by_kind(resources, "Service")
    for name in ("gateway", "job-runner") if overlay == "prod" else ("gateway",):
        container = _container(deployments[name])
        settings = load_settings("gateway", container["args"][1:], _environment(container, config_maps))
        if overlay != "prod":  # one Redis: the cache's holds the jobs too
            assert settings.jobs.jobs_redis_url == "" and job_redis_url(settings) == settings.cache.url_for_zone(DOWNWARD_ZONE)
            continue
        # Every zone's gateways and runners on one URL: the headless Service of the job Redis.
        assert job_redis_url(settings) == settings.jobs.jobs_redis_url == "redis://redis-jobs:6379/0", name
        assert "{zone}" not in settings.jobs.jobs_redis_url
        service = services["redis-jobs"]["spec"]
        assert service["clusterIP"] == "None" and 6379 in {port["port"] for port in service["ports"]}
        assert service["selector"] == {"app.kubernetes.io/name": "redis-jobs"}
        # The password file the job Redis's client reads is the Secret the job Redis asks for.
        assert _mounted_secret(deployments[name], settings.cache.redis_password_file) == "tts-redis-auth"


def test_prod_job_redis_admits_exactly_the_gateways_and_job_runners() -> None:
    prod = next(path for path in overlays() if path.name == "prod")
    resources = render(prod)
    policies = _by_kind(resources, "NetworkPolicy")
    workloads = {**_by_kind(resources, "Deployment"), **_by_kind(resources, "StatefulSet")}
    job_redis = workloads.pop("redis-jobs")["spec"]["template"]["metadata"]["labels"]
    admitted = {
        name: _admitted_ports(policies, job_redis, workload["spec"]["template"]["metadata"]["labels"])
        for name, workload in workloads.items()
    }
    assert {name: ports for name, ports in admitted.items() if ports} == {"gateway": {6379}, "job-runner": {6379}}
    assert set(admitted) >= {"gateway", "job-runner", "acoustic", "vocoder", "redis", "edge", "headroom"}
    # From another namespace only Prometheus, and only to the exporter beside it, never to Redis itself.
    for policy in policies.values():
        if _selects(policy["spec"]["podSelector"], job_redis) and "Ingress" in policy["spec"]["policyTypes"]:
            for rule in policy["spec"].get("ingress", []):
                if any("namespaceSelector" in peer for peer in rule.get("from", [{"namespaceSelector": {}}])):
                    assert rule.get("ports") == [{"protocol": "TCP", "port": 9121}], policy["metadata"]["name"]
    # And their egress lets them dial it.
    for name in ("gateway-egress", "job-runner-egress"):
        rules = policies[name]["spec"]["egress"]
        assert any(
            "podSelector" in peer and "namespaceSelector" not in peer and _selects(peer["podSelector"], job_redis)
            and {"protocol": "TCP", "port": 6379} in rule["ports"]
            for rule in rules for peer in rule["to"]
        ), name  # fmt: skip


def test_the_wyoming_component_listens_on_the_pod_network_for_labelled_namespaces_only_never_the_edge() -> None:
    dev = render(next(path for path in overlays() if path.name == "dev"))
    gateway = _container(_by_kind(dev, "Deployment")["gateway"])
    environ = _environment(gateway, _by_kind(dev, "ConfigMap"))
    settings = load_gateway_settings([], environ)
    assert (settings.wyoming.wyoming_port, settings.wyoming.wyoming_host) == (10200, "0.0.0.0")
    assert {"name": "wyoming", "containerPort": 10200} in gateway["ports"]
    service = _by_kind(dev, "Service")["gateway-wyoming"]
    assert service["spec"]["type"] == "ClusterIP" and [p["port"] for p in service["spec"]["ports"]] == [10200]
    policy = _by_kind(dev, "NetworkPolicy")["gateway-wyoming-from-clients"]
    (rule,) = policy["spec"]["ingress"]
    assert rule["from"] == [{"namespaceSelector": {"matchLabels": {"tts-mesh.io/wyoming-clients": "true"}}}]
    assert rule["ports"] == [{"protocol": "TCP", "port": 10200}]
    other_rules = [r for name, p in _by_kind(dev, "NetworkPolicy").items() if name != policy["metadata"]["name"] for r in p["spec"].get("ingress", [])]
    assert not any(port.get("port") == 10200 for r in other_rules for port in r.get("ports", []))
    edge_ports = {c["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"]["socket_address"]["port_value"]
                  for c in yaml.safe_load(render_yaml(edge_settings_for_k8s()).split("\n", 1)[1])["static_resources"]["clusters"]}  # fmt: skip
    assert 10200 not in edge_ports
    prod = render(next(path for path in overlays() if path.name == "prod"))
    assert "gateway-wyoming" not in _by_kind(prod, "Service")
