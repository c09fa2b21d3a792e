"""The fault-injecting TCP proxy: each mode proven against a tiny echo server on loopback."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator

import pytest

from tests.support.faults.proxy import FaultMode, FaultProxy, NonLoopbackTargetError, ThreadedFaultProxy


class EchoServer:
    """Echoes every byte back; records how each server-side connection ended."""

    def __init__(self) -> None:
        self.endings: list[str] = []
        self.ended = asyncio.Event()
        self.server: asyncio.Server | None = None

    async def start(self) -> str:
        self.server = await asyncio.start_server(self._handle, host="127.0.0.1", port=0)
        return f"127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def stop(self) -> None:
        assert self.server is not None
        self.server.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(4096):
                writer.write(data)
                await writer.drain()
            self.endings.append("eof")
        except ConnectionResetError:
            self.endings.append("reset")
        finally:
            writer.close()
            self.ended.set()


@pytest.fixture
async def echo() -> AsyncIterator[tuple[EchoServer, str]]:
    server = EchoServer()
    address = await server.start()
    yield server, address
    await server.stop()


@pytest.fixture
async def proxy(echo: tuple[EchoServer, str]) -> AsyncIterator[FaultProxy]:
    fault_proxy = FaultProxy(echo[1])
    await fault_proxy.start()
    yield fault_proxy
    await fault_proxy.stop()


async def _connect(proxy: FaultProxy) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", proxy.port)


async def _round_trip_s(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, payload: bytes) -> float:
    started = time.monotonic()
    writer.write(payload)
    await writer.drain()
    assert await asyncio.wait_for(reader.readexactly(len(payload)), timeout=5.0) == payload
    return time.monotonic() - started


async def test_pass_mode_echoes_bytes_unchanged(proxy: FaultProxy) -> None:
    reader, writer = await _connect(proxy)
    payload = bytes(range(256)) * 1024  # 256 KiB, several chunks
    writer.write(payload)
    await writer.drain()
    echoed = await asyncio.wait_for(reader.readexactly(len(payload)), timeout=5.0)
    assert echoed == payload
    writer.close()


async def test_delay_adds_latency_in_each_direction_and_pass_removes_it(proxy: FaultProxy) -> None:
    reader, writer = await _connect(proxy)
    await proxy.delay(0.15)
    assert proxy.mode is FaultMode.DELAY
    delayed_s = await _round_trip_s(reader, writer, b"ping")
    assert 0.30 <= delayed_s < 1.5
    await proxy.pass_through()
    assert await _round_trip_s(reader, writer, b"pong") < 0.15
    writer.close()


async def test_delay_keeps_throughput_by_pipelining_chunks(proxy: FaultProxy) -> None:
    reader, writer = await _connect(proxy)
    await proxy.delay(0.2)
    started = time.monotonic()
    for index in range(5):  # five messages 50 ms apart: serialised delays would take 5 x 0.4 s
        writer.write(b"m%d" % index)
        await writer.drain()
        await asyncio.sleep(0.05)
    echoed = await asyncio.wait_for(reader.readexactly(10), timeout=5.0)
    assert echoed == b"m0m1m2m3m4"
    assert time.monotonic() - started < 1.2
    writer.close()


async def test_cut_resets_both_client_and_server_connections(echo: tuple[EchoServer, str], proxy: FaultProxy) -> None:
    server, _ = echo
    reader, writer = await _connect(proxy)
    assert await _round_trip_s(reader, writer, b"before") < 1.0
    await proxy.cut()
    with pytest.raises((ConnectionResetError, asyncio.IncompleteReadError)):
        await asyncio.wait_for(reader.readexactly(1), timeout=2.0)
    await asyncio.wait_for(server.ended.wait(), timeout=2.0)
    assert server.endings == ["reset"]
    assert proxy.open_connections == 0
    # The mode is unchanged: a new connection works at once.
    reader2, writer2 = await _connect(proxy)
    assert await _round_trip_s(reader2, writer2, b"after") < 1.0
    writer2.close()


async def test_blackhole_hangs_traffic_then_pass_delivers_held_bytes(proxy: FaultProxy) -> None:
    reader, writer = await _connect(proxy)
    await proxy.blackhole()
    writer.write(b"held")
    await writer.drain()
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(reader.readexactly(4), timeout=0.3)
    # New connections are accepted but get no answer either.
    new_reader, new_writer = await asyncio.wait_for(_connect(proxy), timeout=1.0)
    new_writer.write(b"new")
    await new_writer.drain()
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(new_reader.readexactly(3), timeout=0.3)
    await proxy.pass_through()
    assert await asyncio.wait_for(reader.readexactly(4), timeout=2.0) == b"held"
    assert await asyncio.wait_for(new_reader.readexactly(3), timeout=2.0) == b"new"
    writer.close()
    new_writer.close()


async def test_refuse_rejects_new_connections_but_keeps_open_ones(proxy: FaultProxy) -> None:
    reader, writer = await _connect(proxy)
    port = proxy.port
    await proxy.refuse()
    with pytest.raises(ConnectionRefusedError):
        await _connect(proxy)
    assert await _round_trip_s(reader, writer, b"still open") < 1.0
    await proxy.pass_through()
    assert proxy.port == port
    reader2, writer2 = await _connect(proxy)
    assert await _round_trip_s(reader2, writer2, b"listening again") < 1.0
    writer.close()
    writer2.close()


async def test_crash_resets_open_connections_and_refuses_new_ones(echo: tuple[EchoServer, str], proxy: FaultProxy) -> None:
    reader, writer = await _connect(proxy)
    assert await _round_trip_s(reader, writer, b"x") < 1.0
    await proxy.crash()
    with pytest.raises((ConnectionResetError, asyncio.IncompleteReadError)):
        await asyncio.wait_for(reader.readexactly(1), timeout=2.0)
    with pytest.raises(ConnectionRefusedError):
        await _connect(proxy)


@pytest.mark.parametrize("target", ["10.0.0.7:50051", "192.168.1.1:80", "example.com:443", "0.0.0.0:80"])
def test_proxy_refuses_non_loopback_targets(target: str) -> None:
    with pytest.raises(NonLoopbackTargetError):
        FaultProxy(target)
    with pytest.raises(NonLoopbackTargetError):
        ThreadedFaultProxy(target)


def test_proxy_accepts_ipv6_loopback_and_localhost_targets() -> None:
    assert FaultProxy("[::1]:50051").mode is FaultMode.PASS
    assert FaultProxy("localhost:50051").mode is FaultMode.PASS


def _blocking_echo_server() -> tuple[socket.socket, int]:
    listener = socket.create_server(("127.0.0.1", 0))
    return listener, listener.getsockname()[1]


def test_threaded_proxy_serves_blocking_sockets_and_cuts_them() -> None:
    listener, port = _blocking_echo_server()
    listener.settimeout(5.0)
    with listener, ThreadedFaultProxy(f"127.0.0.1:{port}") as fault_proxy:
        client = socket.create_connection(("127.0.0.1", fault_proxy.port), timeout=5.0)
        upstream, _ = listener.accept()
        upstream.settimeout(5.0)
        client.sendall(b"hello")
        assert upstream.recv(5) == b"hello"
        upstream.sendall(b"world")
        assert client.recv(5) == b"world"
        assert fault_proxy.open_connections == 1
        fault_proxy.cut()
        for side in (client, upstream):
            with pytest.raises(ConnectionResetError):
                data = side.recv(1)
                if data == b"":  # an orderly close would also end the read, but a crash must reset
                    raise AssertionError("connection closed cleanly instead of being reset")
            side.close()
        fault_proxy.refuse()
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", fault_proxy.port), timeout=2.0)
