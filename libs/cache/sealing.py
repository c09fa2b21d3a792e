"""Cache values sealed with AES-256-GCM, so whoever can write to Redis cannot make the gateway play
audio it did not make, and whoever can read Redis learns nothing from the values.

A sealed value (little-endian):

    magic  "TSEA"    4 bytes
    version          uint8    (SEAL_VERSION)
    key_id_length    uint8
    key_id           ASCII, key_id_length bytes (which key sealed it)
    nonce            12 random bytes
    ciphertext       the plain value (libs.cache.codec), then the 16-byte GCM tag

The associated data is the header (magic to key id) followed by the Redis key the value is stored
under, so a value copied under another key, or given another key id, fails authentication.

Keys come from a key file (`--cache-key-file`): one `KEY_ID:BASE64` line per key, 32 bytes each,
`#` comments and blank lines ignored. The first key seals every new value; all of them open values,
so a key is rotated by putting a new one first and dropping the old one once its values have expired
(`--cache-ttl-s`). Nonces are random: a key should seal fewer than 2^32 values (the cache's
`written` and `head_written` outcomes count them), so rotate it well before.

    python -m libs.cache.sealing new-key --id 2025-06     # prints a new key line
"""

from __future__ import annotations

import argparse
import base64
import binascii
import hashlib
import hmac
import os
import re
import struct
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from libs.settings.files import SettingFileError

SEAL_MAGIC: Final = b"TSEA"
SEAL_VERSION: Final = 1
KEY_BYTES: Final = 32
"""AES-256."""
NONCE_BYTES: Final = 12
TAG_BYTES: Final = 16
_PREFIX: Final = struct.Struct("<4sBB")
_KEY_ID_PATTERN: Final = re.compile(r"^[A-Za-z0-9._-]{1,64}$")


class SealError(ValueError):
    """A value that is not sealed, was sealed with a key this gateway does not have, or fails authentication."""


class KeyFileError(SettingFileError):
    """A cache key file that cannot be used; the message says what to fix (it never contains a key)."""


@dataclass(frozen=True)
class CacheKey:
    """One AES-256 key with its id."""

    key_id: str
    """Short name written into every value it seals (letters, digits, ".", "_", "-"; at most 64)."""
    secret: bytes = field(repr=False)
    """The 32 key bytes."""

    def __post_init__(self) -> None:
        if not _KEY_ID_PATTERN.match(self.key_id):
            raise KeyFileError("a key id is 1 to 64 letters, digits, '.', '_' or '-'")
        if len(self.secret) != KEY_BYTES:
            raise KeyFileError(f"key {self.key_id!r} is {len(self.secret)} bytes; AES-256 needs {KEY_BYTES}")


class KeyRing:
    """The cache keys of a gateway: seals with the first, opens with any."""

    def __init__(self, keys: Sequence[CacheKey]) -> None:
        if not keys:
            raise KeyFileError("no cache key given")
        ids = [key.key_id for key in keys]
        if len(set(ids)) != len(ids):
            raise KeyFileError(f"key ids must be unique, got {', '.join(ids)}")
        self._current = keys[0]
        self._ciphers = {key.key_id: AESGCM(key.secret) for key in keys}
        # A key of its own for digests, derived from each cache key: one key, one purpose.
        self._digest_keys = {key.key_id: hmac.new(key.secret, _DIGEST_KEY_LABEL, hashlib.sha256).digest() for key in keys}

    @property
    def current_id(self) -> str:
        """The id of the key new values are sealed with."""
        return self._current.key_id

    @classmethod
    def from_file(cls, path: str | Path) -> KeyRing:
        """The keys of a key file (see the module docstring); KeyFileError naming the line if it is malformed."""
        try:
            text = Path(path).read_text(encoding="ascii")
        except (OSError, UnicodeDecodeError) as error:
            raise KeyFileError(f"cache key file {path}: cannot read it ({getattr(error, 'strerror', None) or error})") from None
        try:
            return cls.parse(text)
        except KeyFileError as error:
            raise KeyFileError(f"cache key file {path}: {error}") from None

    @classmethod
    def parse(cls, text: str) -> KeyRing:
        """The keys of a key file's text."""
        keys = []
        for number, line in enumerate(text.splitlines(), start=1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            key_id, separator, encoded = line.partition(":")
            if not separator:
                raise KeyFileError(f"line {number} is not KEY_ID:BASE64 (make one with `python -m libs.cache.sealing new-key`)")
            try:
                secret = base64.b64decode(encoded.strip(), validate=True)
            except (binascii.Error, ValueError):
                raise KeyFileError(f"line {number}: the key after ':' is not base64") from None
            try:
                keys.append(CacheKey(key_id.strip(), secret))
            except KeyFileError as error:
                raise KeyFileError(f"line {number}: {error}") from None
        if not keys:
            raise KeyFileError("holds no key (make one with `python -m libs.cache.sealing new-key`)")
        return cls(keys)

    def seal(self, redis_key: str, plain: bytes) -> bytes:
        """`plain` sealed with the current key, bound to `redis_key`."""
        header = _header(self._current.key_id)
        nonce = os.urandom(NONCE_BYTES)
        return header + nonce + self._ciphers[self._current.key_id].encrypt(nonce, plain, header + redis_key.encode())

    def digest(self, data: bytes, key_id: str | None = None) -> str | None:
        """A keyed digest of `data` as "KEY_ID:HEX" (HMAC-SHA256 under a key derived from cache key
        `key_id`, the current one by default); None if this ring lacks `key_id`. Whoever reads it
        without the key learns nothing of `data`, not even whether it equals a guess."""
        key_id = self._current.key_id if key_id is None else key_id
        key = self._digest_keys.get(key_id)
        if key is None:
            return None
        return f"{key_id}:{hmac.new(key, data, hashlib.sha256).hexdigest()}"

    def unseal(self, redis_key: str, value: bytes) -> bytes:
        """The plain value sealed under `redis_key`; SealError if it is not one this key ring sealed for that key."""
        if len(value) < _PREFIX.size:
            raise SealError(f"value is {len(value)} bytes, shorter than a sealed value's header")
        magic, version, id_length = _PREFIX.unpack_from(value)
        if magic != SEAL_MAGIC or version != SEAL_VERSION:
            raise SealError(f"not a version-{SEAL_VERSION} sealed value (magic {magic!r}, version {version})")
        header_end = _PREFIX.size + id_length
        if len(value) < header_end + NONCE_BYTES + TAG_BYTES:
            raise SealError(f"value is {len(value)} bytes, shorter than its header, nonce and tag")
        key_id = value[_PREFIX.size : header_end].decode("ascii", "replace")
        cipher = self._ciphers.get(key_id)
        if cipher is None:
            raise SealError(f"sealed with key {key_id[:64]!r}, which this gateway does not have")
        header, nonce = value[:header_end], value[header_end : header_end + NONCE_BYTES]
        try:
            return cipher.decrypt(nonce, value[header_end + NONCE_BYTES :], header + redis_key.encode())
        except InvalidTag:
            raise SealError(f"fails authentication with key {key_id!r} (altered, or stored under another key)") from None


_DIGEST_KEY_LABEL: Final = b"tts-mesh request digest v1"


def _header(key_id: str) -> bytes:
    encoded = key_id.encode("ascii")
    return _PREFIX.pack(SEAL_MAGIC, SEAL_VERSION, len(encoded)) + encoded


def new_key_line(key_id: str) -> str:
    """A key file line with a new random key."""
    key = CacheKey(key_id, os.urandom(KEY_BYTES))
    return f"{key.key_id}:{base64.b64encode(key.secret).decode('ascii')}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Cache keys: `new-key` prints a key file line with a new random key.")
    commands = parser.add_subparsers(dest="command", required=True)
    new = commands.add_parser("new-key", help="print a new KEY_ID:BASE64 line (put it first in the key file to seal with it)")
    new.add_argument("--id", default="k1", help="the key's id, written into every value it seals (default k1)")
    args = parser.parse_args(argv)
    try:
        print(new_key_line(args.id))
    except KeyFileError as error:
        parser.error(str(error))
    return 0


if __name__ == "__main__":
    sys.exit(main())
