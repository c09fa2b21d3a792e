"""Who a caller is, for the limits that count per client: the peer's address, or, when the peer is a
proxy this gateway trusts (the edge), the address that proxy says it forwarded for.

Behind the edge every request comes from the edge's own address, so a per-client limit would be one
limit for all clients together. The edge appends the address it was called from to
`x-forwarded-for` (Envoy's `use_remote_address`); when the peer is in `--trusted-proxies`, the
client is the rightmost address of that header that is not itself a trusted proxy. A header from
any other peer is ignored: a client cannot choose whom it is counted as.

A client is written as gRPC writes peers, without the port: "ipv4:10.0.0.7", "ipv6:::1". With API
keys on, a call's key is its client instead ("key:ID", `key_client`).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Final

from libs.settings.fields import setting

FORWARDED_FOR: Final = "x-forwarded-for"
_Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True)
class ClientSettings:
    """How the gateway tells its clients apart."""

    trusted_proxies: str = setting(
        "", env="TTS_TRUSTED_PROXIES", unit="addresses or CIDRs, comma-separated",
        doc="proxies (the edge) whose x-forwarded-for names the client for per-client limits; empty: the peer is the client",
    )  # fmt: skip

    def __post_init__(self) -> None:
        parse_networks(self.trusted_proxies)  # a bad entry stops the service at start-up


def parse_networks(text: str) -> tuple[_Network, ...]:
    """The networks of a comma-separated list of addresses and CIDRs; ValueError names a bad one."""
    networks = []
    for entry in (part.strip() for part in text.split(",")):
        if not entry:
            continue
        try:
            networks.append(ipaddress.ip_network(entry, strict=False))
        except ValueError:
            raise ValueError(f"{entry!r} in --trusted-proxies is not an IP address or CIDR network") from None
    return tuple(networks)


def key_client(key_id: str) -> str:
    """The client an API key's calls count as: one client, wherever they come from (an internal
    service with many users behind one address has one key, and many services behind one proxy
    each their own)."""
    return f"key:{key_id}"


class ClientIdentity:
    """Turns a peer and its `x-forwarded-for` header into the client a limit counts."""

    def __init__(self, trusted_proxies: str = "") -> None:
        self._trusted = parse_networks(trusted_proxies)

    def client(self, peer_host: str, forwarded_for: str | None) -> str:
        """The client behind `peer_host` (an IP address, "" when unknown)."""
        peer = _address(peer_host)
        if peer is None:
            return peer_host
        if forwarded_for and self._is_trusted(peer):
            for entry in reversed(forwarded_for.split(",")):
                address = _address(entry.strip())
                if address is None:
                    break  # a malformed hop: count the last trusted peer rather than guess
                if not self._is_trusted(address):
                    return _written(address)
        return _written(peer)

    def of_grpc_peer(self, peer: str, forwarded_for: str | None) -> str:
        """As `client`, for a gRPC peer string ("ipv4:10.0.0.7:51234", "ipv6:[::1]:51234")."""
        kind, _, rest = peer.partition(":")
        if kind not in ("ipv4", "ipv6") or ":" not in rest:
            return peer
        return self.client(rest.rsplit(":", 1)[0].strip("[]"), forwarded_for)

    def _is_trusted(self, address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
        return any(address in network for network in self._trusted if network.version == address.version)


def _address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        address = ipaddress.ip_address(text.strip("[]"))
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def _written(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str:
    return f"ipv{address.version}:{address}"
