"""Offline checks of the monitoring resources in the overlays: prometheus-operator's PodMonitor,
ServiceMonitor and PrometheusRule (monitoring.coreos.com/v1), the Prometheus Adapter rules and the
Grafana dashboard shipped as ConfigMaps.

The Kubernetes schemas of scripts/k8s_validate.py do not cover these kinds. Checked here, as
strictly: fields the operator does not define for the parts used are errors, required fields must
be there, `for` durations must parse, every rule group and record/alert name is unique, and every
PromQL expression (rules, adapter queries with their templates filled in, dashboard queries with
Grafana's variables filled in) is parsed with promql-parser, a full PromQL parser, so a typo in a
query fails `make k8s-validate` and the test suite instead of an alert that never fires.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any, Final

import yaml

API_VERSION: Final = "monitoring.coreos.com/v1"
KINDS: Final = ("PodMonitor", "ServiceMonitor", "PrometheusRule")
ADAPTER_RULES_KEY: Final = "adapter-rules.yaml"
DASHBOARD_LABEL: Final = "grafana_dashboard"
_DURATION: Final = re.compile(r"^(\d+(ms|s|m|h|d|w|y))+$")
_RECORD_NAME: Final = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
# Values that stand in for the adapter's Go templates and Grafana's variables when parsing.
_ADAPTER_TEMPLATES: Final = {
    "<<.Series>>": "tts_gateway_inflight_streams",
    "<<.LabelMatchers>>": 'namespace="tts",pod=~"gateway-.*"',
    "<<.GroupBy>>": "namespace, pod",
}
_GRAFANA_VARIABLES: Final = {"$__rate_interval": "1m", "$__interval": "1m", "$__range": "1h", "$namespace": "tts"}

_SELECTOR: Final = {"matchLabels": dict, "matchExpressions": [{"key": str, "operator": str, "values": [str]}]}
_ENDPOINT: Final = {
    "port": str, "path": str, "interval": str, "scrapeTimeout": str, "scheme": str, "honorLabels": bool,
    "relabelings": [dict], "metricRelabelings": [dict], "tlsConfig": dict,
}  # fmt: skip
_POD_MONITOR_SPEC: Final = {"selector": _SELECTOR, "namespaceSelector": dict, "podMetricsEndpoints": [_ENDPOINT], "jobLabel": str}
_SERVICE_MONITOR_SPEC: Final = {"selector": _SELECTOR, "namespaceSelector": dict, "endpoints": [_ENDPOINT], "jobLabel": str}
_RULE: Final = {"record": str, "alert": str, "expr": str, "for": str, "keep_firing_for": str, "labels": dict, "annotations": dict}
_RULE_SPEC: Final = {"groups": [{"name": str, "interval": str, "limit": int, "rules": [_RULE]}]}


def is_monitoring(resource: Mapping[str, Any]) -> bool:
    """Whether `resource` is one of prometheus-operator's kinds this module checks."""
    return resource.get("apiVersion") == API_VERSION


def parse_promql(expression: str) -> str | None:
    """None when `expression` is valid PromQL, else the parser's complaint."""
    import promql_parser  # imported here: only validation needs it

    try:
        promql_parser.parse(expression)
    except ValueError as error:
        return str(error)
    return None


def _check_shape(value: Any, rule: Any, path: str) -> list[str]:
    if isinstance(rule, dict):
        if not isinstance(value, dict):
            return [f"{path}: expected an object"]
        problems = [f"{path}.{key}: unknown field" for key in value if key not in rule]
        for key, sub_rule in rule.items():
            if key in value:
                problems += _check_shape(value[key], sub_rule, f"{path}.{key}")
        return problems
    if isinstance(rule, list):
        if not isinstance(value, list):
            return [f"{path}: expected a list"]
        return [problem for index, item in enumerate(value) for problem in _check_shape(item, rule[0], f"{path}[{index}]")]
    if rule is dict:
        return [] if isinstance(value, dict) else [f"{path}: expected an object"]
    if not isinstance(value, rule) or (rule is int and isinstance(value, bool)):
        return [f"{path}: expected {rule.__name__}, got {type(value).__name__}"]
    return []


def validate(resource: Mapping[str, Any]) -> list[str]:
    """Problems of one PodMonitor, ServiceMonitor or PrometheusRule (empty when valid)."""
    kind = resource.get("kind")
    spec = resource.get("spec")
    if kind not in KINDS:
        return [f"kind {kind!r} is not one of {', '.join(KINDS)}"]
    if not isinstance(spec, dict):
        return ["spec: missing"]
    if kind == "PodMonitor":
        problems = _check_shape(spec, _POD_MONITOR_SPEC, "spec")
        if not spec.get("podMetricsEndpoints"):
            problems.append("spec.podMetricsEndpoints: at least one endpoint is required")
        return problems + _durations(spec.get("podMetricsEndpoints", []), "spec.podMetricsEndpoints")
    if kind == "ServiceMonitor":
        problems = _check_shape(spec, _SERVICE_MONITOR_SPEC, "spec")
        return problems + _durations(spec.get("endpoints", []), "spec.endpoints")
    return _check_shape(spec, _RULE_SPEC, "spec") + _rule_problems(spec)


def _durations(endpoints: Iterable[Mapping[str, Any]], path: str) -> list[str]:
    return [
        f"{path}[{index}].{key}: {endpoint[key]!r} is not a Prometheus duration"
        for index, endpoint in enumerate(endpoints)
        for key in ("interval", "scrapeTimeout")
        if key in endpoint and not _DURATION.match(str(endpoint[key]))
    ]


def _rule_problems(spec: Mapping[str, Any]) -> list[str]:
    problems: list[str] = []
    group_names: set[str] = set()
    alert_names: set[str] = set()
    records: set[str] = set()
    for index, group in enumerate(spec.get("groups", [])):
        path = f"spec.groups[{index}]"
        name = group.get("name", "")
        if not name or name in group_names:
            problems.append(f"{path}.name: missing or repeated ({name!r})")
        group_names.add(name)
        if "interval" in group and not _DURATION.match(str(group["interval"])):
            problems.append(f"{path}.interval: {group['interval']!r} is not a Prometheus duration")
        for number, rule in enumerate(group.get("rules", [])):
            where = f"{path}.rules[{number}]"
            if ("record" in rule) == ("alert" in rule):
                problems.append(f"{where}: a rule is either a record or an alert")
                continue
            if "record" in rule:
                if not _RECORD_NAME.match(rule["record"]) or rule["record"] in records:
                    problems.append(f"{where}.record: {rule['record']!r} is not a valid metric name or is repeated")
                records.add(rule["record"])
                if "for" in rule or "annotations" in rule:
                    problems.append(f"{where}: a recording rule takes no `for` or `annotations`")
            else:
                if rule["alert"] in alert_names:
                    problems.append(f"{where}.alert: {rule['alert']!r} is repeated")
                alert_names.add(rule["alert"])
                if "severity" not in rule.get("labels", {}):
                    problems.append(f"{where}.labels: an alert needs a severity")
            if "for" in rule and not _DURATION.match(str(rule["for"])):
                problems.append(f"{where}.for: {rule['for']!r} is not a Prometheus duration")
            if "expr" not in rule:
                problems.append(f"{where}.expr: missing")
            elif (complaint := parse_promql(str(rule["expr"]))) is not None:
                problems.append(f"{where}.expr: not PromQL: {complaint}")
    return problems


def adapter_queries(rules_yaml: str) -> list[str]:
    """The PromQL of every Prometheus Adapter rule, with the adapter's templates filled in."""
    document = yaml.safe_load(rules_yaml) or {}
    queries = []
    for rule in document.get("rules", []):
        queries.append(rule["seriesQuery"])
        query = rule["metricsQuery"]
        for template, value in _ADAPTER_TEMPLATES.items():
            query = query.replace(template, value)
        queries.append(query)
    return queries


def dashboard_queries(dashboard_json: str) -> list[str]:
    """Every panel query of a Grafana dashboard, with Grafana's variables filled in."""
    dashboard = json.loads(dashboard_json)
    queries = []
    for panel in dashboard.get("panels", []):
        for target in panel.get("targets", []):
            query = target["expr"]
            for variable, value in _GRAFANA_VARIABLES.items():
                query = query.replace(variable, value)
            queries.append(query)
    return queries


def validate_config_map(resource: Mapping[str, Any]) -> list[str]:
    """Problems of a ConfigMap holding adapter rules or dashboards (none for any other ConfigMap)."""
    data = resource.get("data") or {}
    queries: list[str] = []
    if ADAPTER_RULES_KEY in data:
        queries += adapter_queries(data[ADAPTER_RULES_KEY])
    if DASHBOARD_LABEL in (resource.get("metadata", {}).get("labels") or {}):
        for text in data.values():
            queries += dashboard_queries(text)
    return [f"data: not PromQL: {query!r}: {complaint}" for query in queries if (complaint := parse_promql(query)) is not None]
