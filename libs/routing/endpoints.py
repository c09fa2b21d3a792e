"""Worker endpoints: a zone, a "host:port" address and a kind, parsed from `ZONE=HOST:PORT` lists."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

ENDPOINT_KINDS: Final[tuple[str, ...]] = ("acoustic", "vocoder")

# Zone names as Kubernetes topology labels write them (e.g. "eu-west-1a"): letters, digits, ".", "_", "-".
_ZONE_PATTERN: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_HOST_PATTERN: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.-]*$")


class EndpointParseError(ValueError):
    """An endpoint spec could not be parsed; the message says which part is wrong and what is expected."""


@dataclass(frozen=True, order=True)
class Endpoint:
    """One worker process the gateway can open streams to."""

    zone: str
    """Availability zone the worker runs in, e.g. "zone-a"."""
    address: str
    """gRPC target as "host:port" ("[::1]:port" for IPv6 literals)."""
    kind: str
    """What the worker serves: "acoustic" or "vocoder"."""

    @property
    def host(self) -> str:
        """The host part of `address`, without IPv6 brackets."""
        host, _ = _split_host_port(self.address)
        return host

    @property
    def port(self) -> int:
        """The port part of `address`."""
        _, port = _split_host_port(self.address)
        return port

    @property
    def spec(self) -> str:
        """The endpoint as `parse_endpoint` reads it: ZONE=HOST:PORT."""
        return f"{self.zone}={self.address}"

    def __str__(self) -> str:
        return f"{self.kind}:{self.spec}"


def parse_endpoint(spec: str, kind: str) -> Endpoint:
    """Parse one `ZONE=HOST:PORT` spec (surrounding spaces ignored) into an Endpoint of `kind`."""
    if kind not in ENDPOINT_KINDS:
        raise EndpointParseError(f"unknown endpoint kind {kind!r}; expected one of {', '.join(ENDPOINT_KINDS)}")
    text = spec.strip()
    zone, sep, address = text.partition("=")
    if not sep:
        raise EndpointParseError(f"endpoint {spec!r} has no zone; write it as ZONE=HOST:PORT, e.g. zone-a=10.0.0.7:50051")
    zone = zone.strip()
    address = address.strip()
    if not _ZONE_PATTERN.match(zone):
        raise EndpointParseError(
            f"endpoint {spec!r}: zone {zone!r} must start with a letter or digit and hold only letters, digits, '.', '_', '-'"
        )
    host, port = _split_host_port(address, context=spec)
    canonical = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    return Endpoint(zone=zone, address=canonical, kind=kind)


def _split_host_port(address: str, context: str | None = None) -> tuple[str, int]:
    where = f"endpoint {context!r}" if context is not None else f"address {address!r}"
    if address.startswith("["):
        host, bracket, rest = address[1:].partition("]")
        if not bracket or not rest.startswith(":"):
            raise EndpointParseError(f"{where}: IPv6 addresses are written [HOST]:PORT, e.g. [::1]:50051")
        port_text = rest[1:]
        if not host:
            raise EndpointParseError(f"{where}: empty host inside []")
    else:
        host, colon, port_text = address.rpartition(":")
        if not colon:
            raise EndpointParseError(f"{where}: address {address!r} has no port; write HOST:PORT")
        if not host:
            raise EndpointParseError(f"{where}: address {address!r} has no host; write HOST:PORT")
        if ":" in host:
            raise EndpointParseError(f"{where}: put IPv6 hosts in brackets, e.g. [::1]:50051")
        if not _HOST_PATTERN.match(host):
            raise EndpointParseError(f"{where}: host {host!r} is not a valid host name or IPv4 address")
    if not port_text.isdecimal():
        raise EndpointParseError(f"{where}: port {port_text!r} is not a number")
    port = int(port_text)
    if not 1 <= port <= 65535:
        raise EndpointParseError(f"{where}: port {port} is outside 1..65535")
    return host, port
