"""JSON from clients, parsed so that no text a client can send ends in an internal error.

`json.loads` raises three kinds of error for what a client can send: `JSONDecodeError` for text that
is not JSON, `UnicodeDecodeError` for bytes that are not UTF-8, and `RecursionError` for arrays or
objects nested deeper than the interpreter's stack (a 64 KiB body of `[` is enough). Every door
that takes JSON (HTTP bodies, WebSocket messages, Wyoming events) reads it here and gets one error,
`ClientJsonError`, whose message says what to fix; the door words it in its own protocol.
"""

from __future__ import annotations

import json
from typing import Any


class ClientJsonError(ValueError):
    """What a client sent is not JSON this service can read; the message says why."""


def parse_client_json(data: bytes | bytearray | str) -> Any:
    """The JSON value of `data`, or ClientJsonError saying why it is none."""
    try:
        return json.loads(data)
    except UnicodeDecodeError as error:
        raise ClientJsonError(f"is not UTF-8 (byte {error.start} is not): send JSON as UTF-8 text") from None
    except json.JSONDecodeError as error:
        raise ClientJsonError(f"is not JSON: {error}") from None
    except RecursionError:
        raise ClientJsonError("nests arrays or objects too deeply to read; send a flat JSON object") from None
