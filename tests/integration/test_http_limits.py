"""The HTTP door's own armour: a cap on the requests one client has open at once (429 past it, other
clients unaffected, the slot freed when the response ends), and TLS when it is given a certificate
(plaintext otherwise), served by a real uvicorn on a real port; a WebSocket shows its API key in its
handshake (or ElevenLabs' `xi-api-key`) and counts against its client's and its key's limits."""

from __future__ import annotations

import asyncio
import json
import ssl
from pathlib import Path

import httpx
import pytest
import websockets
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket
from websockets.exceptions import InvalidStatus

from libs.devmesh.certs import make_mesh_tls
from libs.serving.auth import ApiKeyGate, AuthSettings
from libs.serving.http import HttpListener, HttpTls
from libs.serving.http_auth import ApiKeyAsgi
from libs.serving.http_limits import ClientRequestLimit
from libs.serving.keys import KeysFile, StoredKey, hash_key, mint_key
from tests.support.ports import free_port


def _held_app(release: asyncio.Event) -> Starlette:
    async def speak(request: Request) -> PlainTextResponse:
        await release.wait()
        return PlainTextResponse("audio")

    return Starlette(routes=[Route("/v1/audio/speech", speak, methods=["POST"])])


async def _post_all(app: ClientRequestLimit, client: str, count: int) -> list[asyncio.Task[httpx.Response]]:
    transport = httpx.ASGITransport(app=app, client=(client, 40000))
    http = httpx.AsyncClient(transport=transport, base_url="http://door")
    return [asyncio.create_task(http.post("/v1/audio/speech", json={})) for _ in range(count)]


async def test_one_client_past_its_limit_gets_429_while_another_client_is_served() -> None:
    release = asyncio.Event()
    limited = ClientRequestLimit(_held_app(release), max_per_client=3)
    greedy = await _post_all(limited, "10.0.0.7", 5)
    await asyncio.sleep(0.2)
    refused = [task.result() for task in greedy if task.done()]
    waiting = [task for task in greedy if not task.done()]
    assert [response.status_code for response in refused] == [429, 429]
    assert refused[0].headers["retry-after"] == "1" and refused[0].json()["error"]["code"] == "client_limit"
    assert limited.open_requests("ipv4:10.0.0.7") == 3
    other = await _post_all(limited, "10.0.0.8", 1)
    await asyncio.sleep(0.1)
    assert limited.open_requests("ipv4:10.0.0.8") == 1  # admitted, not refused
    release.set()
    served = await asyncio.gather(*waiting, *other)
    assert [response.status_code for response in served] == [200] * 4
    assert limited.open_requests("ipv4:10.0.0.7") == 0 and limited.open_requests("ipv4:10.0.0.8") == 0


async def test_a_freed_slot_admits_the_next_request() -> None:
    release = asyncio.Event()
    release.set()
    limited = ClientRequestLimit(_held_app(release), max_per_client=1)
    for _ in range(3):  # one at a time: never over the limit
        (task,) = await _post_all(limited, "10.0.0.9", 1)
        assert (await task).status_code == 200


async def _speak_over(listener: HttpListener, url: str, **client_options: object) -> httpx.Response:
    await listener.start()
    try:
        async with httpx.AsyncClient(timeout=10, **client_options) as client:  # type: ignore[arg-type]
            return await client.post(url, json={})
    finally:
        await listener.stop()


async def test_the_door_speaks_plain_http_without_a_certificate() -> None:
    release = asyncio.Event()
    release.set()
    port = free_port()
    listener = HttpListener(_held_app(release), "127.0.0.1", port, max_requests_per_client=2)
    assert listener.scheme == "http"
    response = await _speak_over(listener, f"http://127.0.0.1:{port}/v1/audio/speech")
    assert response.status_code == 200 and response.text == "audio"


async def test_the_door_speaks_only_tls_with_a_certificate(tmp_path: Path) -> None:
    release = asyncio.Event()
    release.set()
    public = make_mesh_tls(tmp_path / "public")  # its worker certificate names 127.0.0.1
    tls = HttpTls(str(public.worker_cert), str(public.worker_key))
    port = free_port()
    listener = HttpListener(_held_app(release), "127.0.0.1", port, tls=tls)
    assert listener.scheme == "https"
    await listener.start()
    try:
        trusting = ssl.create_default_context(cafile=str(public.ca))
        async with httpx.AsyncClient(timeout=10, verify=trusting) as client:
            response = await client.post(f"https://127.0.0.1:{port}/v1/audio/speech", json={})
        assert response.status_code == 200 and response.text == "audio"
        async with httpx.AsyncClient(timeout=10) as client:
            with pytest.raises(httpx.HTTPError):  # plaintext to a TLS port: no HTTP answer
                await client.post(f"http://127.0.0.1:{port}/v1/audio/speech", json={})
            with pytest.raises(httpx.ConnectError):  # a client that does not trust the door's CA
                await client.post(f"https://127.0.0.1:{port}/v1/audio/speech", json={})
    finally:
        await listener.stop()


def _socket_app() -> Starlette:
    async def echo(websocket: WebSocket) -> None:
        await websocket.accept()
        await websocket.send_text(await websocket.receive_text())
        await websocket.receive()  # held open until the client closes

    return Starlette(routes=[WebSocketRoute("/v1/audio/speech/stream", echo)])


async def test_websockets_show_their_key_in_the_handshake_and_count_against_client_and_key_limits(tmp_path: Path) -> None:
    key = mint_key()
    keys_file = tmp_path / "keys.jsonl"
    keys_file.write_text(StoredKey("agent", hash_key(key), max_streams=2).line() + "\n", encoding="utf-8")
    settings = AuthSettings(api_keys_file=str(keys_file))
    gate = ApiKeyGate(KeysFile(str(keys_file), settings.api_keys_reload_s), settings)
    port = free_port()
    listener = HttpListener(ApiKeyAsgi(_socket_app(), gate, guarded_prefixes=("/v1/",)), "127.0.0.1", port, max_requests_per_client=3)
    url = f"ws://127.0.0.1:{port}/v1/audio/speech/stream"
    await listener.start()
    try:
        with pytest.raises(InvalidStatus) as missing:
            await websockets.connect(url)
        assert missing.value.response.status_code == 401
        assert json.loads(missing.value.response.body or b"{}")["error"]["code"] == "missing_key"
        by_header = await websockets.connect(url, additional_headers={"Authorization": f"Bearer {key}"})
        by_xi = await websockets.connect(url, additional_headers={"xi-api-key": key})  # as ElevenLabs' clients send it
        await by_xi.send("hello")
        assert await by_xi.recv() == "hello"
        with pytest.raises(InvalidStatus) as over_key:  # an open socket holds one of its key's two streams
            await websockets.connect(url, additional_headers={"xi-api-key": key})
        assert over_key.value.response.status_code == 429
        await by_header.close()
        await asyncio.sleep(0.1)
        again = await websockets.connect(url, additional_headers={"xi-api-key": key})  # a closed socket gave its stream back
        await again.close()
        await by_xi.close()
    finally:
        await listener.stop()


async def test_one_client_past_its_limit_of_open_sockets_is_refused_429_in_the_handshake() -> None:
    port = free_port()
    listener = HttpListener(_socket_app(), "127.0.0.1", port, max_requests_per_client=2)
    url = f"ws://127.0.0.1:{port}/v1/audio/speech/stream"
    await listener.start()
    try:
        held = [await websockets.connect(url) for _ in range(2)]
        with pytest.raises(InvalidStatus) as refused:
            await websockets.connect(url)
        assert refused.value.response.status_code == 429
        assert json.loads(refused.value.response.body or b"{}")["error"]["code"] == "client_limit"
        for socket in held:
            await socket.close()
    finally:
        await listener.stop()


async def _closed_within(reader: asyncio.StreamReader, seconds: float) -> bool:
    """Whether the server closed the connection within `seconds` (it sent EOF)."""
    try:
        return await asyncio.wait_for(reader.read(), seconds) is not None
    except TimeoutError:
        return False


async def test_a_connection_that_does_not_send_its_headers_in_time_is_closed() -> None:
    """uvicorn has no deadline on request headers: a connection that sent nothing, or half a header,
    was held for good. One that is slow in its headers is closed; a slow response is not cut, and a
    keep-alive connection gets the deadline again for its next request."""
    release = asyncio.Event()
    port = free_port()
    listener = HttpListener(_held_app(release), "127.0.0.1", port, header_timeout_s=0.5)
    await listener.start()
    try:
        silent_reader, silent = await asyncio.open_connection("127.0.0.1", port)
        half_reader, half = await asyncio.open_connection("127.0.0.1", port)
        half.write(b"POST /v1/audio/speech HTTP/1.1\r\nHost: door\r\n")  # and never the blank line
        await half.drain()
        assert await _closed_within(silent_reader, 3.0) and await _closed_within(half_reader, 3.0)
        async with httpx.AsyncClient(timeout=10) as client:
            held = asyncio.create_task(client.post(f"http://127.0.0.1:{port}/v1/audio/speech", json={}))
            await asyncio.sleep(1.2)  # the response takes longer than the header deadline
            assert not held.done()
            release.set()
            response = await held
        assert response.status_code == 200 and response.text == "audio"
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"POST /v1/audio/speech HTTP/1.1\r\nHost: door\r\nContent-Length: 0\r\n\r\n")
        await writer.drain()
        assert (await reader.readuntil(b"audio")).startswith(b"HTTP/1.1 200")
        writer.write(b"POST /v1/audio/speech HTTP/1.1\r\n")  # the next request, half sent
        await writer.drain()
        assert await _closed_within(reader, 3.0)
        for stream in (silent, half, writer):
            stream.close()
    finally:
        await listener.stop()
