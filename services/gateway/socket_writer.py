"""Sending a WebSocket door's messages in order: audio waits for room, so a client that does not
read stops its contexts (backpressure); events do not wait, and are bounded in number instead."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections import deque
from dataclasses import dataclass
from typing import Any, Final

from starlette.websockets import WebSocket

AUDIO_MESSAGES_AHEAD: Final = 8
"""Audio messages that may wait to be sent; past them a context waits (backpressure)."""
EVENTS_AHEAD: Final = 1024
"""Other events that may wait to be sent (each answers a client message); past them the client is
not reading at all and the socket is closed."""


class SocketOverflow(Exception):
    """The client left too many events unread."""


class SocketGone(Exception):
    """The socket stopped sending (the client went away): its contexts have no one to speak to."""


@dataclass
class _Outgoing:
    context_id: str | None
    message: dict[str, Any] | None
    data: bytes | None = None
    audio: bool = False


class SocketWriter:
    """Sends a socket's messages in order, one at a time: audio waits for room (backpressure),
    events do not (they are bounded in number instead)."""

    def __init__(self, websocket: WebSocket) -> None:
        self._websocket = websocket
        self._queue: deque[_Outgoing] = deque()
        self._ready = asyncio.Event()
        self._room = asyncio.Condition()
        self._audio_queued = 0
        self._sent_all = asyncio.Event()
        self._sent_all.set()
        self.closed = False

    async def audio(self, context_id: str, message: dict[str, Any] | None, data: bytes | None) -> None:
        """Queue a chunk of audio once there is room."""
        async with self._room:
            await self._room.wait_for(lambda: self._audio_queued < AUDIO_MESSAGES_AHEAD or self.closed)
        if self.closed:
            raise SocketGone()
        self._audio_queued += 1
        self._put(_Outgoing(context_id, message, data, audio=True))

    def event(self, context_id: str | None, message: dict[str, Any] | None) -> None:
        """Queue an event at once (SocketOverflow when the client reads nothing)."""
        if message is None:
            return
        if len(self._queue) - self._audio_queued >= EVENTS_AHEAD:
            raise SocketOverflow()
        self._put(_Outgoing(context_id, message))

    def drop(self, context_id: str) -> None:
        """Forget the context's audio that has not been sent yet."""
        kept = deque(item for item in self._queue if not (item.audio and item.context_id == context_id))
        self._audio_queued -= len(self._queue) - len(kept)
        self._queue = kept
        if not kept:
            self._sent_all.set()
        asyncio.get_running_loop().create_task(self._notify())

    def _put(self, item: _Outgoing) -> None:
        self._queue.append(item)
        self._sent_all.clear()
        self._ready.set()

    async def _notify(self) -> None:
        async with self._room:
            self._room.notify_all()

    async def run(self) -> None:
        """Send until cancelled or the client goes."""
        try:
            while True:
                await self._ready.wait()
                while self._queue:
                    item = self._queue.popleft()
                    if item.audio:
                        self._audio_queued -= 1
                        await self._notify()
                    if item.message is not None:
                        await self._websocket.send_text(json.dumps(item.message, separators=(",", ":")))
                    if item.data is not None:
                        await self._websocket.send_bytes(item.data)
                self._ready.clear()
                self._sent_all.set()
        finally:
            self.closed = True
            self._sent_all.set()
            await self._notify()

    async def drain(self, timeout_s: float) -> None:
        """Wait (at most `timeout_s`) until everything queued has been sent."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                await self._sent_all.wait()
