"""Who a caller is for per-client limits: the peer, or behind a trusted proxy (the edge) the address
it forwarded for; tested on its own and through the real Envoy in front of a real HTTP door."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from libs.edge.envoy import EdgeSettings
from libs.edge.process import EdgeProcess
from libs.serving.clients import ClientIdentity, ClientSettings
from libs.serving.http import HttpListener
from tests.support.ports import free_port


def test_a_trusted_proxy_is_seen_through_and_any_other_peer_is_the_client() -> None:
    identity = ClientIdentity("127.0.0.1, 10.0.0.0/8")
    assert identity.client("127.0.0.1", "203.0.113.9") == "ipv4:203.0.113.9"
    # Hops that are themselves trusted proxies are skipped, from the right.
    assert identity.client("10.1.2.3", "198.51.100.4, 203.0.113.9, 10.9.9.9") == "ipv4:203.0.113.9"
    # A peer that is not trusted cannot choose whom it is counted as.
    assert identity.client("192.0.2.1", "203.0.113.9") == "ipv4:192.0.2.1"
    # No header, or a malformed hop: the peer itself.
    assert identity.client("127.0.0.1", None) == "ipv4:127.0.0.1"
    assert identity.client("127.0.0.1", "not-an-address") == "ipv4:127.0.0.1"
    # Without trusted proxies nothing is seen through.
    assert ClientIdentity().client("127.0.0.1", "203.0.113.9") == "ipv4:127.0.0.1"


def test_grpc_peers_of_both_families_are_read_without_their_port() -> None:
    identity = ClientIdentity("::1")
    assert identity.of_grpc_peer("ipv4:10.0.0.7:51234", None) == "ipv4:10.0.0.7"
    assert identity.of_grpc_peer("ipv6:[::1]:51234", "2001:db8::5") == "ipv6:2001:db8::5"
    assert identity.of_grpc_peer("ipv6:[::ffff:10.0.0.7]:51234", None) == "ipv4:10.0.0.7"
    assert identity.of_grpc_peer("unix:/tmp/socket", "203.0.113.9") == "unix:/tmp/socket"


def test_a_bad_trusted_proxy_stops_the_service_naming_the_entry() -> None:
    with pytest.raises(ValueError, match=r"'10\.0\.0\.300'"):
        ClientSettings(trusted_proxies="127.0.0.1,10.0.0.300")


def _held_door(release: asyncio.Event, arrived: asyncio.Queue[None]) -> Starlette:
    async def speak(request: Request) -> PlainTextResponse:
        arrived.put_nowait(None)
        await release.wait()
        return PlainTextResponse("audio")

    return Starlette(routes=[Route("/v1/audio/speech", speak, methods=["POST"])])


@pytest.mark.parametrize("trusted", [True, False])
async def test_behind_the_edge_each_client_has_its_own_limit_only_when_the_edge_is_trusted(trusted: bool) -> None:
    release = asyncio.Event()
    arrived: asyncio.Queue[None] = asyncio.Queue()  # a request the door admitted reached its handler
    door_port = free_port()
    door = HttpListener(
        _held_door(release, arrived), "127.0.0.1", door_port, max_requests_per_client=1,
        clients=ClientIdentity("127.0.0.1" if trusted else ""),
    )  # fmt: skip
    await door.start()
    edge = EdgeSettings(port=free_port(), admin_port=free_port(), gateway_http_port=door_port, access_log=False)
    try:
        with EdgeProcess(edge):
            url = f"http://127.0.0.1:{edge.port}/v1/audio/speech"

            def client(source: str) -> httpx.AsyncClient:  # calls the edge from its own loopback address
                return httpx.AsyncClient(transport=httpx.AsyncHTTPTransport(local_address=source), timeout=30)

            async with client("127.0.0.2") as first, client("127.0.0.3") as second:
                held = asyncio.create_task(first.post(url, json={}))
                await asyncio.wait_for(arrived.get(), 30)  # the first client's request now holds its one slot
                again = await first.post(url, json={})
                assert again.status_code == 429  # its own limit, either way
                other = asyncio.create_task(second.post(url, json={}))
                if trusted:
                    await asyncio.wait_for(arrived.get(), 30)  # admitted: the edge said it is another client
                    assert not other.done()
                else:
                    assert (await asyncio.wait_for(other, 30)).status_code == 429  # the edge counts as one client
                    assert arrived.empty()
                release.set()
                assert (await held).status_code == 200
                await asyncio.gather(other)
    finally:
        release.set()
        await door.stop()
