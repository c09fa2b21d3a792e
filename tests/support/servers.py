"""gRPC servers of the tests, each on a port of its own (`OWN_PORT_OPTION`, as the services have it).

Two servers that ask for port 0 at once (two test processes) could otherwise be given the same port and
share its connections: a client of one reaches the other, and sees its calls fail or that server's
shutdown ("Cancelling all calls").
"""

from __future__ import annotations

from concurrent.futures import Executor
from typing import Any

import grpc

from libs.serving.tls import OWN_PORT_OPTION


def aio_server(**kwargs: Any) -> grpc.aio.Server:
    """`grpc.aio.server(**kwargs)` on a port of its own."""
    return grpc.aio.server(options=[OWN_PORT_OPTION, *kwargs.pop("options", ())], **kwargs)


def sync_server(executor: Executor, **kwargs: Any) -> grpc.Server:
    """`grpc.server(executor, **kwargs)` on a port of its own."""
    return grpc.server(executor, options=[OWN_PORT_OPTION, *kwargs.pop("options", ())], **kwargs)
