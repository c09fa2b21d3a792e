"""API keys: how one is made, and the file of their hashes a gateway reads (libs.serving.auth checks them).

A key is "tts_" followed by 43 URL-safe characters (32 random bytes), shown once when it is made.
Only its SHA-256 is stored: a fast hash is enough for 256 random bits, which no one can guess or
search, and it lets a check cost one hash and one dictionary lookup.

The keys file holds one key per line, as a JSON object; blank lines and `#` comments are ignored:

    {"id": "app1", "sha256": "<64 hex digits>", "rate_per_s": 5, "burst": 10, "max_streams": 4, "tier": "auto"}

`id` names the key in logs, metrics and messages; the limits are optional (the gateway's
`--api-key-*` defaults apply); `tier` (optional: quality, fast or auto) is the voice tier its requests
that name none are spoken in (libs.voice.tiers). A gateway re-reads the file when it changes, without a restart.

    python -m libs.serving.keys new --name app1 [--rate-per-s 5] [--burst 10] [--max-streams 4] [--append FILE]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import math
import re
import secrets
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from libs.serving.tls import file_signature
from libs.settings.files import SettingFileError
from libs.voice.tiers import NAMES as TIER_NAMES

_log = logging.getLogger(__name__)

KEY_PREFIX: Final = "tts_"
KEY_RANDOM_BYTES: Final = 32
MAX_KEY_CHARS: Final = 256
"""A presented key longer than this is refused before it is hashed."""
MAX_FILE_BYTES: Final = 4 * 1024 * 1024
"""A keys file beyond this is refused (about 20 thousand keys)."""
_ID_PATTERN: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_HASH_PATTERN: Final = re.compile(r"^[0-9a-f]{64}$")
_FIELDS: Final = {"id", "sha256", "rate_per_s", "burst", "max_streams", "tier"}


class KeysFileError(SettingFileError):
    """A keys file that cannot be used; the message names the file and line and says what to fix."""


@dataclass(frozen=True)
class StoredKey:
    """One line of the keys file: a key's id, its hash and its own limits (None: the gateway's default)."""

    key_id: str
    """Name of the key in logs, metrics and messages."""
    sha256: str
    """SHA-256 of the key, 64 lower-case hex digits."""
    rate_per_s: float | None = None
    """Requests per second it may make on average."""
    burst: float | None = None
    """Requests it may make at once after a quiet spell (the bucket's size)."""
    max_streams: int | None = None
    """Synthesis streams it may hold open at once."""
    tier: str | None = None
    """The tier its requests that name none are spoken in (None: quality)."""

    def line(self) -> str:
        """The key as a keys file line."""
        fields: dict[str, Any] = {"id": self.key_id, "sha256": self.sha256}
        for name in ("rate_per_s", "burst", "max_streams", "tier"):
            if getattr(self, name) is not None:
                fields[name] = getattr(self, name)
        return json.dumps(fields)


def hash_key(key: str) -> str:
    """The stored form of a key."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def mint_key() -> str:
    """A new random key."""
    return KEY_PREFIX + secrets.token_urlsafe(KEY_RANDOM_BYTES)


def parse_keys(text: str) -> dict[str, StoredKey]:
    """The keys of a keys file's text, by hash; KeysFileError naming the first bad line."""
    keys: dict[str, StoredKey] = {}
    ids: set[str] = set()
    for number, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        try:
            key = _stored_key(line)
        except KeysFileError as error:
            raise KeysFileError(f"line {number}: {error}") from None
        if key.sha256 in keys:
            raise KeysFileError(f"line {number}: the same key is listed twice ({keys[key.sha256].key_id} and {key.key_id})")
        if key.key_id in ids:
            raise KeysFileError(f"line {number}: id {key.key_id} is used twice; give each key its own id")
        keys[key.sha256] = key
        ids.add(key.key_id)
    return keys


def _stored_key(line: str) -> StoredKey:
    try:
        fields = json.loads(line)
    except json.JSONDecodeError:
        raise KeysFileError('not a JSON object; expected {"id": ..., "sha256": ...} (see `python -m libs.serving.keys new`)') from None
    if not isinstance(fields, dict):
        raise KeysFileError('not a JSON object; expected {"id": ..., "sha256": ...}')
    unknown = set(fields) - _FIELDS
    if unknown:
        raise KeysFileError(f"unknown fields {', '.join(sorted(unknown))}; allowed: {', '.join(sorted(_FIELDS))}")
    key_id, digest = fields.get("id"), fields.get("sha256")
    if not isinstance(key_id, str) or not _ID_PATTERN.match(key_id):
        raise KeysFileError("id must be 1 to 64 letters, digits, '.', '_' or '-', starting with a letter or digit")
    if not isinstance(digest, str) or not _HASH_PATTERN.match(digest):
        raise KeysFileError(f"{key_id}: sha256 must be 64 lower-case hex digits (the hash, never the key itself)")
    rate_per_s = _limit(fields, "rate_per_s", key_id, minimum=0.001)
    burst = _limit(fields, "burst", key_id, minimum=1)
    max_streams = _limit(fields, "max_streams", key_id, minimum=1)
    if max_streams is not None and max_streams != int(max_streams):
        raise KeysFileError(f"{key_id}: max_streams must be a whole number")
    tier = fields.get("tier")
    if tier is not None and tier not in TIER_NAMES:
        raise KeysFileError(f"{key_id}: tier must be one of {', '.join(TIER_NAMES)}")
    return StoredKey(key_id, digest, rate_per_s, burst, None if max_streams is None else int(max_streams), tier)


def _limit(fields: Mapping[str, Any], name: str, key_id: str, minimum: float) -> float | None:
    value = fields.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < minimum:
        raise KeysFileError(f"{key_id}: {name} must be a number of at least {minimum:g}")
    return float(value)


class KeysFile:
    """The keys file, re-read when it changes (looked at no more than every `reload_s`, when asked).

    A change that does not parse is logged and the keys read before stay in force, so a typo locks
    no one out; the file must parse at start-up.
    """

    def __init__(self, path: str, reload_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._path = Path(path)
        self._reload_s = reload_s
        self._clock = clock
        self._signature = file_signature(path)
        self._keys = self._read()
        self._checked_s = clock()
        _log.info("%d API keys from %s", len(self._keys), path)

    def _read(self) -> dict[str, StoredKey]:
        try:
            with self._path.open("rb") as file:
                data = file.read(MAX_FILE_BYTES + 1)
        except OSError as error:
            raise KeysFileError(f"--api-keys-file {self._path}: cannot read it ({error.strerror or error})") from None
        if len(data) > MAX_FILE_BYTES:
            raise KeysFileError(f"--api-keys-file {self._path} is larger than {MAX_FILE_BYTES} bytes")
        try:
            return parse_keys(data.decode("utf-8"))
        except UnicodeDecodeError:
            raise KeysFileError(f"--api-keys-file {self._path} is not UTF-8") from None
        except KeysFileError as error:
            raise KeysFileError(f"--api-keys-file {self._path}: {error}") from None

    def keys(self) -> Mapping[str, StoredKey]:
        """The keys in force, by hash (re-read first when the file changed)."""
        now_s = self._clock()
        if now_s - self._checked_s >= self._reload_s:
            self._checked_s = now_s
            signature = file_signature(str(self._path))
            if signature != self._signature:
                self._signature = signature
                try:
                    self._keys = self._read()
                    _log.info("API keys reloaded: %d keys", len(self._keys))
                except KeysFileError as error:
                    _log.error("keeping the %d API keys read before: %s", len(self._keys), error)
        return self._keys


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="API keys of the gateway.")
    commands = parser.add_subparsers(dest="command", required=True)
    new = commands.add_parser("new", help="make a key; print it once and print its keys file line")
    new.add_argument("--name", required=True, help="the key's id (who it belongs to, e.g. app1)")
    new.add_argument("--rate-per-s", type=float, help="its requests per second (default: the gateway's --api-key-rate-per-s)")
    new.add_argument("--burst", type=float, help="its burst (default: the gateway's --api-key-burst)")
    new.add_argument("--max-streams", type=int, help="its open streams (default: the gateway's --api-key-max-streams)")
    new.add_argument("--tier", choices=TIER_NAMES, help="the tier its requests that name none are spoken in (default: quality)")
    new.add_argument("--append", type=Path, help="also append the line to this keys file")
    args = parser.parse_args(argv)
    key = mint_key()
    stored = StoredKey(args.name, hash_key(key), args.rate_per_s, args.burst, args.max_streams, args.tier)
    try:
        _stored_key(stored.line())  # the same checks a gateway makes
    except KeysFileError as error:
        parser.error(str(error))
    if args.append is not None:
        with args.append.open("a", encoding="utf-8") as file:
            file.write(stored.line() + "\n")
    print(f"API key of {args.name} (shown only now; the client sends it as `authorization: Bearer <key>`):")
    print(key)
    print("Keys file line" + (f" (appended to {args.append}):" if args.append else ":"))
    print(stored.line())
    return 0


if __name__ == "__main__":
    sys.exit(main())
