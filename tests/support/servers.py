"""gRPC servers of the tests, each on a port of its own.

gRPC servers set SO_REUSEPORT unless told not to, and two servers that ask for port 0 at once (two test
processes) may then be given the same port and share its connections: a client of one reaches the
other, and sees its calls fail or that server's shutdown ("Cancelling all calls"). The services turn
it off (libs/serving/server.py); the servers tests start themselves do the same through these.
"""

from __future__ import annotations

from concurrent.futures import Executor
from typing import Any

import grpc

OWN_PORT_OPTIONS = (("grpc.so_reuseport", 0),)
"""A port taken fails to bind instead of being shared."""


def aio_server(**kwargs: Any) -> grpc.aio.Server:
    """`grpc.aio.server(**kwargs)` on a port of its own."""
    return grpc.aio.server(options=[*OWN_PORT_OPTIONS, *kwargs.pop("options", ())], **kwargs)


def sync_server(executor: Executor, **kwargs: Any) -> grpc.Server:
    """`grpc.server(executor, **kwargs)` on a port of its own."""
    return grpc.server(executor, options=[*OWN_PORT_OPTIONS, *kwargs.pop("options", ())], **kwargs)
