"""Which worker pods stand behind each configured name, kept fresh while pods come and go.

The gateway is configured with `ZONE=NAME:PORT` targets. Every address NAME stands for is one worker
(a pod), and the gateway opens one channel and one health Watch per address. A source publishes,
per target, a `Snapshot`: the addresses that may take new streams (`live`) and those that are going
away but may still finish their streams (`draining`). Two sources exist:

- `DnsDiscovery` (any environment): resolves each NAME again every `interval_s`. An address that no
  longer resolves drains. A failed lookup keeps the last answer (a DNS hiccup must not drain the
  fleet); the health Watch still decides whether a kept address is routable.
- `libs.routing.kubernetes.EndpointSliceDiscovery`: watches the Service's EndpointSlices, with
  each pod's zone and its ready / serving / terminating conditions.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Final, Protocol

from libs.routing.endpoints import Endpoint

_log = logging.getLogger(__name__)

DISCOVERY_MODES: Final = ("dns", "kubernetes")
DEFAULT_DISCOVERY_INTERVAL_S: Final = 2.0
"""DNS re-resolution period. With the cluster DNS's 5 s TTL on headless Services, a new ready pod is
dialled within about 7 s, inside the 10 s the routing promises."""

Resolver = Callable[[str, int], Awaitable[Sequence[str]]]
"""`resolve(host, port)`: every IP address of `host`, in the order the resolver gave them."""


@dataclass(frozen=True)
class Snapshot:
    """The pods behind one target at one instant."""

    live: frozenset[Endpoint] = field(default_factory=frozenset)
    """Pods that may take new streams."""
    draining: frozenset[Endpoint] = field(default_factory=frozenset)
    """Pods going away (terminating, or not ready): no new streams, their own ones finish."""


Publish = Callable[[Endpoint, Snapshot], None]
"""`publish(target, snapshot)`: called whenever a target's pods change (and on every first answer)."""


class DiscoverySource(Protocol):
    """Something that publishes the pods behind each target until cancelled."""

    async def run(self) -> None:
        """Publish changes until cancelled."""


def is_ip_literal(host: str) -> bool:
    """Whether `host` is an IPv4 or IPv6 address (nothing to resolve)."""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def pod_endpoint(target: Endpoint, ip: str, port: int | None = None, zone: str | None = None) -> Endpoint:
    """The endpoint of one pod address behind `target` (the target's zone and port unless given)."""
    port = target.port if port is None else port
    address = f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"
    return Endpoint(zone=zone or target.zone, address=address, kind=target.kind)


async def system_resolver(host: str, port: int) -> list[str]:
    """Every address of `host` from the system resolver (getaddrinfo), duplicates removed."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


class DnsDiscovery:
    """Re-resolves every target's name each `interval_s` and publishes the addresses it stands for."""

    def __init__(
        self,
        targets: Iterable[Endpoint],
        publish: Publish,
        interval_s: float = DEFAULT_DISCOVERY_INTERVAL_S,
        resolver: Resolver = system_resolver,
    ) -> None:
        self._targets = tuple(targets)
        self._publish = publish
        self._interval_s = interval_s
        self._resolver = resolver
        self._last: dict[Endpoint, frozenset[Endpoint]] = {}
        self._failing: set[Endpoint] = set()

    async def refresh(self) -> None:
        """Resolve every target once and publish what changed."""
        await asyncio.gather(*(self._refresh(target) for target in self._targets))

    async def run(self) -> None:
        """Refresh forever (cancel to stop)."""
        while True:
            await self.refresh()
            await asyncio.sleep(self._interval_s)

    async def _refresh(self, target: Endpoint) -> None:
        try:
            ips = await self._resolver(target.host, target.port)
        except (TimeoutError, OSError) as error:
            if target not in self._failing:
                _log.warning("resolving %s failed (%s); keeping its %d known workers", target, error, len(self._last.get(target, ())))
                self._failing.add(target)
            return
        if target in self._failing:
            _log.info("resolving %s works again", target)
            self._failing.discard(target)
        live = frozenset(pod_endpoint(target, ip) for ip in ips)
        if self._last.get(target) == live:
            return
        self._last[target] = live
        _log.info("%s stands for %d workers: %s", target, len(live), ", ".join(sorted(e.address for e in live)))
        self._publish(target, Snapshot(live=live))
