"""Free TCP ports for test processes, chosen where nothing else will take them first.

A port handed out by the kernel (a bind to port 0) lies in its ephemeral range, and so does the
local port of every outgoing connection: between a test choosing such a port and its server binding
it, any connection on the host (a Redis client, a health check, another test) may be given it, and
the server then fails to start. Ports below the ephemeral range are never handed out that way. The
default ports of `make run` are left alone too: a mesh a developer runs on the same host keeps them.
"""

from __future__ import annotations

import random
import socket
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from libs.devmesh.embedded_redis import DEFAULT_REDIS_PORT
from libs.edge.envoy import DEFAULT_ADMIN_PORT, DEFAULT_EDGE_PORT
from libs.serving.http import DEFAULT_HTTP_PORT
from libs.serving.server import DEFAULT_METRICS_PORTS, DEFAULT_PORTS
from libs.serving.wyoming import DEFAULT_WYOMING_PORT_CONVENTION

LOWEST_PORT: Final = 10000
"""Below this lie the ports of common local services (databases, web servers, mail)."""
MAKE_RUN_PORTS: Final = frozenset(
    {DEFAULT_REDIS_PORT, DEFAULT_EDGE_PORT, DEFAULT_ADMIN_PORT, DEFAULT_HTTP_PORT, DEFAULT_WYOMING_PORT_CONVENTION,
     *DEFAULT_PORTS.values(), *DEFAULT_METRICS_PORTS.values()}
)  # fmt: skip
_ATTEMPTS: Final = 200


def ephemeral_floor() -> int:
    """The first port of the kernel's ephemeral range, 32768 where it cannot be read."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port(offsets: Sequence[int] = (0,), taken: frozenset[int] | set[int] = frozenset()) -> int:
    """A port P below the ephemeral range such that P + each of `offsets` is free right now, none of
    them one of `taken` or of `make run`'s ports."""
    ceiling = max(ephemeral_floor() - max(offsets), LOWEST_PORT + 2000)
    rng = random.Random()
    for _ in range(_ATTEMPTS):
        port = rng.randrange(LOWEST_PORT, ceiling)
        candidates = [port + offset for offset in offsets]
        if any(candidate in taken or candidate in MAKE_RUN_PORTS for candidate in candidates):
            continue
        if all(_bindable(candidate) for candidate in candidates):
            return port
    raise RuntimeError(f"no free port (with offsets {list(offsets)}) in {LOWEST_PORT}..{ceiling}")


def _bindable(port: int) -> bool:
    """Whether a server could listen on `port` on every address (as gRPC's [::] does)."""
    family, host = (socket.AF_INET6, "::") if socket.has_ipv6 else (socket.AF_INET, "0.0.0.0")
    try:
        with socket.socket(family) as sock:
            sock.bind((host, port))
    except OSError:
        return False
    return True
