"""What a container of the mesh runs with, read from the Kubernetes base (k8s/base), so the containers
and the pods cannot drift: the container's args, the settings of its ConfigMaps, its user, its
read-only root with the emptyDir folders writable, its memory limit and its termination grace.

Only what a pod gets from its node or the API (the zone label, the CPU limit as `TTS_THREADS`) is
left to the caller: there is no node here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import yaml

ROOT: Final = Path(__file__).resolve().parents[2]
BASE: Final = ROOT / "k8s" / "base"
MANIFEST_OF: Final = {
    "gateway": BASE / "gateway.yaml",
    "acoustic": BASE / "acoustic.yaml",
    "vocoder": BASE / "vocoder.yaml",
    "redis": BASE / "redis.yaml",
    "edge": BASE / "edge" / "edge.yaml",
}
EDGE_CONFIG: Final = BASE / "edge" / "envoy.yaml"
"""The edge's Envoy configuration as Kubernetes mounts it (libs/edge/envoy.py renders it)."""


@dataclass(frozen=True)
class PodContainer:
    """The first container of a Deployment in the base, as the container mesh runs it."""

    args: list[str]
    env: dict[str, str] = field(default_factory=dict)
    """Literal `env` values and those of the ConfigMaps it reads (values from the API left out)."""
    ports: dict[str, int] = field(default_factory=dict)
    """Port name -> container port."""
    user: str = ""
    """`uid:gid` from the pod's securityContext."""
    writable: list[str] = field(default_factory=list)
    """Mount paths of emptyDir volumes (everything else is read-only)."""
    memory_limit: str = ""
    """The memory limit in the engine's notation (1Gi -> 1g, 768Mi -> 768m)."""
    grace_s: int = 30
    """terminationGracePeriodSeconds."""
    read_only_root: bool = False
    run_as_non_root: bool = False
    drops_all_capabilities: bool = False
    no_privilege_escalation: bool = False


def config_maps() -> dict[str, dict[str, str]]:
    """The literals of the base's configMapGenerator, by ConfigMap name."""
    kustomization = yaml.safe_load((BASE / "kustomization.yaml").read_text(encoding="utf-8"))
    maps: dict[str, dict[str, str]] = {}
    for generator in kustomization.get("configMapGenerator", []):
        maps[generator["name"]] = dict(literal.split("=", 1) for literal in generator.get("literals", []))
    return maps


def pod_container(service: str) -> PodContainer:
    """The base's container of `service` (gateway, acoustic, vocoder, redis or edge)."""
    deployment = next(doc for doc in yaml.safe_load_all(MANIFEST_OF[service].read_text(encoding="utf-8")) if doc and doc["kind"] == "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    maps = config_maps()
    env: dict[str, str] = {}
    for source in container.get("envFrom", []):
        env.update(maps[source["configMapRef"]["name"]])
    for variable in container.get("env", []):
        if "value" in variable:
            env[variable["name"]] = str(variable["value"])
    empty_dirs = {volume["name"] for volume in pod.get("volumes", []) if "emptyDir" in volume}
    pod_security = pod.get("securityContext", {})
    security = container.get("securityContext", {})
    user = ""
    if "runAsUser" in pod_security:
        user = f"{pod_security['runAsUser']}:{pod_security.get('runAsGroup', pod_security['runAsUser'])}"
    return PodContainer(
        args=[str(arg) for arg in container.get("args", [])],
        env=env,
        ports={port["name"]: int(port["containerPort"]) for port in container.get("ports", [])},
        user=user,
        writable=[mount["mountPath"] for mount in container.get("volumeMounts", []) if mount["name"] in empty_dirs],
        memory_limit=_engine_quantity(container.get("resources", {}).get("limits", {}).get("memory", "")),
        grace_s=int(pod.get("terminationGracePeriodSeconds", 30)),
        read_only_root=bool(security.get("readOnlyRootFilesystem")),
        run_as_non_root=bool(pod_security.get("runAsNonRoot")),
        drops_all_capabilities=security.get("capabilities", {}).get("drop") == ["ALL"],
        no_privilege_escalation=security.get("allowPrivilegeEscalation") is False,
    )


def _engine_quantity(quantity: str) -> str:
    """A Kubernetes memory quantity as podman/docker write it (binary units only)."""
    units: Mapping[str, str] = {"Ki": "k", "Mi": "m", "Gi": "g"}
    for suffix, unit in units.items():
        if quantity.endswith(suffix):
            return quantity[: -len(suffix)] + unit
    return quantity
