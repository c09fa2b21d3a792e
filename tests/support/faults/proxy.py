"""A TCP proxy for tests whose behaviour can be switched while connections are open.

Modes (`FaultMode`): PASS forwards bytes; DELAY adds latency to every chunk in each direction
without cutting throughput; BLACKHOLE accepts connections but forwards nothing, so calls hang
(bytes already sent are held, and flow again if the mode returns to PASS, like a healed
partition); REFUSE stops listening, so new connections are refused while open ones carry on.
`cut()` resets every open connection on both sides at once, like a crashed peer; `crash()` is
`cut()` plus REFUSE.

The proxy connects only to loopback targets: tests must never reach beyond this machine.
`FaultProxy` runs on the caller's event loop; `ThreadedFaultProxy` runs one on a background
thread for sync code and for grpc.aio code on another loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import ipaddress
import logging
import socket
import struct
import threading
from typing import Final

_log = logging.getLogger(__name__)

_CHUNK_BYTES: Final = 65536
_QUEUED_CHUNKS: Final = 256  # per direction; past this the proxy stops reading (TCP backpressure)


class FaultMode(enum.Enum):
    """What the proxy does with traffic."""

    PASS = "pass"
    DELAY = "delay"
    BLACKHOLE = "blackhole"
    REFUSE = "refuse"


class NonLoopbackTargetError(ValueError):
    """The proxy was pointed at something other than this machine's loopback interface."""


def _require_loopback(host: str, what: str) -> None:
    if host == "localhost":
        return
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        raise NonLoopbackTargetError(f"{what} {host!r} must be a loopback IP literal or 'localhost'") from None
    if not address.is_loopback:
        raise NonLoopbackTargetError(f"{what} {host!r} is not a loopback address; the test proxy only reaches this machine")


def _split_target(target: str) -> tuple[str, int]:
    host, colon, port = target.rpartition(":")
    if not colon or not port.isdigit():
        raise ValueError(f"target {target!r} must be HOST:PORT")
    return host.strip("[]"), int(port)


class _Connection:
    """One proxied client connection and its upstream side."""

    def __init__(self, client_writer: asyncio.StreamWriter, task: asyncio.Task[None]) -> None:
        self.client_writer = client_writer
        self.upstream_writer: asyncio.StreamWriter | None = None
        self.task = task

    def reset(self) -> None:
        """Close both sockets with RST and end the connection's task."""
        self.abort_sockets()
        self.task.cancel()

    def abort_sockets(self) -> None:
        """Close both sockets with RST (SO_LINGER 0), the way a crashed process's sockets go."""
        for writer in (self.client_writer, self.upstream_writer):
            if writer is None:
                continue
            sock = writer.get_extra_info("socket")
            if sock is not None:
                with contextlib.suppress(OSError):  # already closed
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()


class FaultProxy:
    """An asyncio TCP proxy from 127.0.0.1:<free port> to a loopback target; use on one event loop."""

    def __init__(self, target: str, listen_host: str = "127.0.0.1") -> None:
        self._target_host, self._target_port = _split_target(target)
        _require_loopback(self._target_host, "target")
        _require_loopback(listen_host, "listen host")
        self._listen_host = listen_host
        self._port = 0
        self._server: asyncio.Server | None = None
        self._connections: set[_Connection] = set()
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._delay_s = 0.0
        self._mode = FaultMode.PASS

    @property
    def port(self) -> int:
        """The port the proxy listens on (stable across REFUSE and back)."""
        if self._port == 0:
            raise RuntimeError("proxy not started")
        return self._port

    @property
    def address(self) -> str:
        """"host:port" to dial instead of the target."""
        return f"{self._listen_host}:{self.port}"

    @property
    def mode(self) -> FaultMode:
        """The current mode."""
        return self._mode

    @property
    def open_connections(self) -> int:
        """Client connections currently being proxied (or held)."""
        return len(self._connections)

    async def start(self) -> str:
        """Start listening on a free port; returns the proxy's address."""
        await self._listen()
        return self.address

    async def stop(self) -> None:
        """Stop listening and reset every open connection."""
        self._close_listener()
        await self.cut()

    async def pass_through(self) -> None:
        """Forward traffic unchanged (also heals BLACKHOLE and REFUSE)."""
        await self._set(FaultMode.PASS, delay_s=0.0)

    async def delay(self, delay_s: float) -> None:
        """Add `delay_s` of latency to every chunk, in each direction (a round trip gains 2 x delay_s)."""
        if delay_s < 0:
            raise ValueError("delay_s must not be negative")
        await self._set(FaultMode.DELAY, delay_s=delay_s)

    async def blackhole(self) -> None:
        """Accept connections but forward nothing in either direction: calls hang."""
        await self._set(FaultMode.BLACKHOLE, delay_s=0.0)

    async def refuse(self) -> None:
        """Stop listening: new connections are refused; open ones carry on."""
        await self._set(FaultMode.REFUSE, delay_s=0.0)

    async def cut(self) -> None:
        """Reset every open connection on both sides at once; the mode is unchanged."""
        connections, self._connections = list(self._connections), set()
        for connection in connections:
            connection.reset()
        await asyncio.gather(*(connection.task for connection in connections), return_exceptions=True)

    async def crash(self) -> None:
        """Like a crashed server: reset every connection and refuse new ones."""
        await self.refuse()
        await self.cut()

    async def _set(self, mode: FaultMode, delay_s: float) -> None:
        self._mode = mode
        self._delay_s = delay_s
        if mode is FaultMode.BLACKHOLE:
            self._flowing.clear()
        else:
            self._flowing.set()
        if mode is FaultMode.REFUSE:
            self._close_listener()
        elif self._server is None:
            await self._listen()

    async def _listen(self) -> None:
        self._server = await asyncio.start_server(
            self._serve, host=self._listen_host, port=self._port, reuse_address=True
        )
        self._port = self._server.sockets[0].getsockname()[1]

    def _close_listener(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None

    async def _serve(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        connection = _Connection(client_writer, task)
        self._connections.add(connection)
        try:
            await self._flowing.wait()  # a blackholed connection is accepted but never dialled through
            upstream_reader, upstream_writer = await asyncio.open_connection(self._target_host, self._target_port)
            connection.upstream_writer = upstream_writer
            peer_host = upstream_writer.get_extra_info("peername")[0]
            _require_loopback(peer_host, "resolved target")
            async with asyncio.TaskGroup() as group:
                group.create_task(self._pump(client_reader, upstream_writer))
                group.create_task(self._pump(upstream_reader, client_writer))
        except asyncio.CancelledError:
            pass  # cut() or stop(): the sockets are already reset
        except Exception as error:  # a reset from either side ends the connection; tests see it there
            _log.debug("proxy connection ended: %r", error)
            connection.abort_sockets()
        finally:
            self._connections.discard(connection)
            for writer in (client_writer, connection.upstream_writer):
                if writer is not None and not writer.is_closing():
                    writer.close()

    async def _pump(self, source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        """Copy one direction, chunk by chunk, each delivered `delay` after it was read."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue(maxsize=_QUEUED_CHUNKS)

        async def read_side() -> None:
            while True:
                data = await source.read(_CHUNK_BYTES)
                await queue.put((loop.time() + self._delay_s, data))
                if not data:
                    return

        async def write_side() -> None:
            while True:
                deliver_at, data = await queue.get()
                wait_s = deliver_at - loop.time()
                if wait_s > 0:
                    await asyncio.sleep(wait_s)
                await self._flowing.wait()
                if not data:
                    if sink.can_write_eof():
                        sink.write_eof()  # pass the half-close on
                    return
                sink.write(data)
                await sink.drain()

        async with asyncio.TaskGroup() as group:
            group.create_task(read_side())
            group.create_task(write_side())


class ThreadedFaultProxy:
    """A FaultProxy on its own event loop in a background thread, driven by blocking calls."""

    def __init__(self, target: str, listen_host: str = "127.0.0.1", call_timeout_s: float = 10.0) -> None:
        # Validate here, in the caller's thread, so a bad target fails the test at once.
        _require_loopback(_split_target(target)[0], "target")
        self._target = target
        self._listen_host = listen_host
        self._call_timeout_s = call_timeout_s
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._proxy: FaultProxy | None = None

    @property
    def address(self) -> str:
        """"host:port" to dial instead of the target."""
        return self._require_proxy().address

    @property
    def port(self) -> int:
        """The port the proxy listens on."""
        return self._require_proxy().port

    @property
    def open_connections(self) -> int:
        """Client connections currently being proxied (or held)."""
        return self._call(self._count_connections())

    def start(self) -> str:
        """Start the loop thread and the proxy; returns the proxy's address."""
        if self._thread is not None:
            raise RuntimeError("proxy already started")
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="fault-proxy", daemon=True)
        self._thread.start()
        self._proxy = self._call(self._create())
        return self._call(self._proxy.start())

    def stop(self) -> None:
        """Reset all connections, stop the proxy and join its thread."""
        if self._loop is None or self._thread is None:
            return
        if self._proxy is not None:
            self._call(self._proxy.stop())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=self._call_timeout_s)
        self._loop.close()
        self._loop, self._thread, self._proxy = None, None, None

    def __enter__(self) -> ThreadedFaultProxy:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def pass_through(self) -> None:
        """Forward traffic unchanged (also heals BLACKHOLE and REFUSE)."""
        self._call(self._require_proxy().pass_through())

    def delay(self, delay_s: float) -> None:
        """Add `delay_s` of latency to every chunk, in each direction."""
        self._call(self._require_proxy().delay(delay_s))

    def blackhole(self) -> None:
        """Accept connections but forward nothing: calls hang."""
        self._call(self._require_proxy().blackhole())

    def refuse(self) -> None:
        """Stop listening: new connections are refused; open ones carry on."""
        self._call(self._require_proxy().refuse())

    def cut(self) -> None:
        """Reset every open connection on both sides."""
        self._call(self._require_proxy().cut())

    def crash(self) -> None:
        """Reset every connection and refuse new ones."""
        self._call(self._require_proxy().crash())

    async def _create(self) -> FaultProxy:
        # The proxy's asyncio.Event must be created on the loop it will run on.
        return FaultProxy(self._target, self._listen_host)

    async def _count_connections(self) -> int:
        return self._require_proxy().open_connections

    def _require_proxy(self) -> FaultProxy:
        if self._proxy is None:
            raise RuntimeError("proxy not started")
        return self._proxy

    def _call(self, coroutine):  # type: ignore[no-untyped-def]
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout=self._call_timeout_s)
