"""Free TCP ports for test processes, chosen where nothing else will take them first.

A port handed out by the kernel (a bind to port 0) lies in its ephemeral range, and so does the
local port of every outgoing connection: between a test choosing such a port and its server binding
it, any connection on the host (a Redis client, a health check, another test) may be given it, and
the server then fails to start. Ports below the ephemeral range are never handed out that way. The
default ports of `make run` are left alone too: a mesh a developer runs on the same host keeps them.

A port is claimed when it is handed out (a file made exclusively in a folder every test process on
the host shares), and not handed out again while the claim is fresh: a service takes seconds to
bind the port it was given, and two test processes, or two services of one mesh, choosing in that
time would otherwise be given the same one.
"""

from __future__ import annotations

import functools
import os
import random
import socket
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from scripts.run_mesh import MeshPorts

LOWEST_PORT: Final = 10000
"""Below this lie the ports of common local services (databases, web servers, mail)."""
MAKE_RUN_PORTS: Final = frozenset(MeshPorts().all())
_ATTEMPTS: Final = 200
CLAIM_TTL_S: Final = 900.0
"""How long a port handed out stays claimed: longer than any test holds a port it never bound."""
CLAIMS_DIR: Final = Path(tempfile.gettempdir()) / "tts-mesh-test-ports"


@functools.cache
def ephemeral_floor() -> int:
    """The first port of the kernel's ephemeral range, 32768 where it cannot be read."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port(offsets: Sequence[int] = (0,)) -> int:
    """A port P below the ephemeral range such that P + each of `offsets` is free right now, claimed
    here, and none of them one of `make run`'s ports."""
    ceiling = max(ephemeral_floor() - max(offsets), LOWEST_PORT + 2000)
    rng = random.Random()
    for _ in range(_ATTEMPTS):
        port = rng.randrange(LOWEST_PORT, ceiling)
        candidates = [port + offset for offset in offsets]
        if MAKE_RUN_PORTS.isdisjoint(candidates) and all(map(_bindable, candidates)) and _claim(candidates):
            return port
    raise RuntimeError(f"no free port (with offsets {list(offsets)}) in {LOWEST_PORT}..{ceiling}")


def _bindable(port: int) -> bool:
    """Whether a server could listen on `port` on every address (as gRPC's [::] does; 0.0.0.0 on a
    host without IPv6)."""
    for family, host in ((socket.AF_INET6, "::"), (socket.AF_INET, "0.0.0.0")):
        try:
            sock = socket.socket(family)
        except OSError:
            continue  # no such address family here
        with sock:
            try:
                sock.bind((host, port))
            except OSError:
                return False
            return True
    return False


def _claim(ports: Sequence[int]) -> bool:
    """Claim every one of `ports` for this process, or none of them (False: one is claimed already)."""
    CLAIMS_DIR.mkdir(exist_ok=True)
    claimed: list[Path] = []
    for port in ports:
        path = CLAIMS_DIR / str(port)
        try:
            if time.time() - path.stat().st_mtime > CLAIM_TTL_S:
                path.unlink(missing_ok=True)  # a stale claim: its test has long ended
        except FileNotFoundError:
            pass
        try:
            os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
        except FileExistsError:
            for taken in claimed:
                taken.unlink(missing_ok=True)
            return False
        claimed.append(path)
    return True
