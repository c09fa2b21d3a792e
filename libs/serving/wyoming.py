"""Wyoming, the protocol Home Assistant speaks to its voice services: the gateway's settings for it,
and reading its events with a bound on everything a client sends.

An event is a JSON header line, then optionally `data_length` bytes of more JSON data and
`payload_length` bytes of payload. The `wyoming` package's own reader trusts both lengths (a client
that claims a gigabyte gets a gigabyte read); this one refuses a line, data or payload over its
bounds before reading it, and a connection that sends nothing for `idle_timeout_s`.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from typing import Any, Final

from wyoming.event import Event

from libs.settings.fields import setting
from libs.wire.json_text import ClientJsonError, parse_client_json

DEFAULT_WYOMING_PORT_CONVENTION: Final = 10200
"""The port Wyoming services listen on by convention (`make run` uses it); the gateway's default is 0, off."""
MAX_LINE_BYTES: Final = 64 * 1024
"""The longest header line (StreamReader's limit)."""
MAX_DATA_BYTES: Final = 64 * 1024
"""The most extra JSON data one event may carry: a synthesize event's text is at most a request's
5,000 characters (20 KB of UTF-8) plus a few fields."""
MAX_PAYLOAD_BYTES: Final = 64 * 1024
"""The most payload an event may carry: a text-to-speech service takes none, so this only bounds
what a wrong client may make it read and throw away."""
LINGER_S: Final = 2.0
"""After refusing a connection's input, how long what it still sends is read and thrown away before
the door closes (`linger_before_close`)."""
LINGER_BYTES: Final = 16 * 1024 * 1024
"""And how much of it, at most."""


@dataclass(frozen=True)
class WyomingSettings:
    """The gateway's Wyoming door (Home Assistant). Wyoming has no authentication: keep it on a
    trusted network, never behind the public edge."""

    wyoming_port: int = setting(
        0, env="TTS_WYOMING_PORT", unit="TCP port", minimum=0, maximum=65535,
        doc=f"TCP port of the Wyoming door (Home Assistant; {DEFAULT_WYOMING_PORT_CONVENTION} by convention); 0 keeps it off",
    )  # fmt: skip
    wyoming_host: str = setting(
        "127.0.0.1", env="TTS_WYOMING_HOST",
        doc="address the Wyoming door listens on (it has no authentication: this host only unless the network is trusted)",
    )  # fmt: skip
    wyoming_zeroconf: bool = setting(
        False, env="TTS_WYOMING_ZEROCONF", doc="announce the Wyoming door over mDNS (_wyoming._tcp) for Home Assistant to find"
    )


class WyomingProtocolError(Exception):
    """The client sent something that is not a Wyoming event within the bounds."""


async def read_event(reader: asyncio.StreamReader) -> Event | None:
    """The next event (None when the client closed), or WyomingProtocolError."""
    try:
        line = await reader.readline()
    except (ValueError, asyncio.LimitOverrunError):
        raise WyomingProtocolError(f"an event's header line is over {MAX_LINE_BYTES} bytes") from None
    if not line:
        return None
    header = _json_object(line, "an event's header")
    kind = header.get("type")
    if not isinstance(kind, str):
        raise WyomingProtocolError("an event's header has no `type`")
    data = header.get("data") or {}
    if not isinstance(data, dict):
        raise WyomingProtocolError("an event's `data` is not an object")
    data_length = _length(header, "data_length", MAX_DATA_BYTES)
    payload_length = _length(header, "payload_length", MAX_PAYLOAD_BYTES)
    try:
        if data_length:
            data.update(_json_object(await reader.readexactly(data_length), "an event's data"))
        payload = await reader.readexactly(payload_length) if payload_length else None
    except asyncio.IncompleteReadError:
        return None
    return Event(type=kind, data=data, payload=payload)


def _length(header: dict[str, Any], name: str, limit: int) -> int:
    value = header.get(name) or 0
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise WyomingProtocolError(f"`{name}` must be a count of bytes")
    if value > limit:
        raise WyomingProtocolError(f"`{name}` {value} is over the {limit} bytes this service takes")
    return value


def _json_object(data: bytes, what: str) -> dict[str, Any]:
    try:
        value = parse_client_json(data)
    except ClientJsonError as error:
        raise WyomingProtocolError(f"{what} {error}") from None
    if not isinstance(value, dict):
        raise WyomingProtocolError(f"{what} is not a JSON object")
    return value


async def linger_before_close(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Shut the door's side of a connection whose input it refused, and read what the client still
    sends until it closes too (at most LINGER_BYTES, for LINGER_S). Closing a TCP connection with
    input unread sends a reset, and a reset makes the client's system throw away what it had not read
    yet: the error event just written, so the client would see only a broken connection."""
    with contextlib.suppress(OSError):  # the client may be gone already
        if writer.can_write_eof():
            writer.write_eof()
    discarded = 0
    with contextlib.suppress(TimeoutError, OSError):
        async with asyncio.timeout(LINGER_S):
            while discarded < LINGER_BYTES and (chunk := await reader.read(64 * 1024)):
                discarded += len(chunk)
