"""Offline checks of the cert-manager resources in the overlays (Issuer, Certificate of
cert-manager.io/v1), which the Kubernetes schemas of scripts/k8s_validate.py do not cover.

Strict as that validation is: a field cert-manager does not define for these kinds (of those the
overlays may use) is an error, and so are missing required fields, values outside cert-manager's
enums and durations it would not parse. Cross-references (an issuer that exists, a Secret a pod
mounts) are checked by tests/integration/test_k8s_manifests.py.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

API_VERSION: Final = "cert-manager.io/v1"
KINDS: Final = ("Issuer", "ClusterIssuer", "Certificate")
KEY_USAGES: Final = frozenset({
    "signing", "digital signature", "content commitment", "key encipherment", "key agreement", "data encipherment",
    "cert sign", "crl sign", "encipher only", "decipher only", "any", "server auth", "client auth", "code signing",
    "email protection", "s/mime", "ipsec end system", "ipsec tunnel", "ipsec user", "timestamping", "ocsp signing",
    "microsoft sgc", "netscape sgc",
})  # fmt: skip
_DURATION: Final = re.compile(r"^(\d+(\.\d+)?(h|m|s|ms))+$")

# A field's rule: a Python type, a nested {field: rule} mapping (an object), or a list of one rule.
_ISSUER_REF: Final = {"name": str, "kind": str, "group": str}
_PRIVATE_KEY: Final = {"algorithm": str, "size": int, "encoding": str, "rotationPolicy": str}
_CERTIFICATE_SPEC: Final = {
    "secretName": str, "issuerRef": _ISSUER_REF, "commonName": str, "dnsNames": [str], "ipAddresses": [str],
    "uris": [str], "emailAddresses": [str], "duration": str, "renewBefore": str, "isCA": bool, "usages": [str],
    "privateKey": _PRIVATE_KEY, "subject": {"organizations": [str], "organizationalUnits": [str], "countries": [str]},
    "secretTemplate": {"labels": dict, "annotations": dict},
}  # fmt: skip
_ISSUER_SPEC: Final = {"selfSigned": {"crlDistributionPoints": [str]}, "ca": {"secretName": str, "crlDistributionPoints": [str]}}


def is_cert_manager(resource: Mapping[str, Any]) -> bool:
    """Whether `resource` is one of cert-manager's kinds this module checks."""
    return resource.get("apiVersion") == API_VERSION


def validate(resource: Mapping[str, Any]) -> list[str]:
    """Problems with a cert-manager resource (empty when it is valid)."""
    kind = resource.get("kind")
    if kind not in KINDS:
        return [f"{API_VERSION} {kind} is not checked offline; add it to scripts/k8s_cert_manager.py"]
    problems = _unknown(resource, {"apiVersion": str, "kind": str, "metadata": dict, "spec": dict}, "")
    spec = resource.get("spec")
    if not isinstance(spec, dict):
        return [*problems, "spec: required"]
    if kind == "Certificate":
        problems += _unknown(spec, _CERTIFICATE_SPEC, "spec")
        problems += _certificate(spec)
    else:
        problems += _unknown(spec, _ISSUER_SPEC, "spec")
        if sum(name in spec for name in _ISSUER_SPEC) != 1:
            problems.append("spec: exactly one of selfSigned, ca")
    return problems


def _unknown(value: Mapping[str, Any], rules: Mapping[str, Any], path: str) -> list[str]:
    problems = []
    for name, item in value.items():
        where = f"{path}.{name}" if path else name
        if name not in rules:
            problems.append(f"{where}: not a field cert-manager defines here")
        else:
            problems += _typed(item, rules[name], where)
    return problems


def _typed(value: Any, rule: Any, path: str) -> list[str]:
    if isinstance(rule, list):
        if not isinstance(value, list):
            return [f"{path}: must be a list"]
        return [problem for index, item in enumerate(value) for problem in _typed(item, rule[0], f"{path}[{index}]")]
    if isinstance(rule, dict):
        return _unknown(value, rule, path) if isinstance(value, dict) else [f"{path}: must be an object"]
    if (rule is int and isinstance(value, bool)) or not isinstance(value, rule):
        return [f"{path}: must be {rule.__name__}"]
    return []


def _certificate(spec: Mapping[str, Any]) -> list[str]:
    problems = []
    if not spec.get("secretName"):
        problems.append("spec.secretName: required")
    ref = spec.get("issuerRef")
    if not isinstance(ref, dict) or not ref.get("name"):
        problems.append("spec.issuerRef.name: required")
    elif ref.get("kind", "Issuer") not in ("Issuer", "ClusterIssuer") or ref.get("group", "cert-manager.io") != "cert-manager.io":
        problems.append("spec.issuerRef: kind Issuer or ClusterIssuer of group cert-manager.io")
    if not any(spec.get(name) for name in ("commonName", "dnsNames", "ipAddresses", "uris", "emailAddresses")):
        problems.append("spec: one of commonName, dnsNames, ipAddresses, uris, emailAddresses is required")
    for name in ("duration", "renewBefore"):
        if name in spec and not _DURATION.match(str(spec[name])):
            problems.append(f"spec.{name}: {spec[name]!r} is not a duration such as 2160h")
    problems += [f"spec.usages: unknown usage {usage!r}" for usage in spec.get("usages", []) if usage not in KEY_USAGES]
    key = spec.get("privateKey", {})
    if key.get("algorithm", "RSA") not in ("RSA", "ECDSA", "Ed25519"):
        problems.append("spec.privateKey.algorithm: RSA, ECDSA or Ed25519")
    if key.get("rotationPolicy", "Never") not in ("Never", "Always"):
        problems.append("spec.privateKey.rotationPolicy: Never or Always")
    if key.get("algorithm") == "ECDSA" and key.get("size", 256) not in (256, 384, 521):
        problems.append("spec.privateKey.size: 256, 384 or 521 for ECDSA")
    return problems
