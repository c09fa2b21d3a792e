"""The first samples of a cached sentence ("audio head"), kept next to its mel so a hit speaks at once.

A mel cache hit skips the acoustic worker, but its first audio still waits for the vocoder's first
step (about 10 ms of model work plus two hops). The gateway therefore also keeps the first
`head_ms` of each sentence's samples, as the vocoder made them from the cached mel. On a hit it sends
them to the client straight away and feeds the vocoder the whole mel as usual, dropping the samples
the client already has, exactly as a resumed vocoder stream does. A head is only used with the
vocoder model that made it (the worker names its model in the stream's headers).

Key = HEAD_KEY_PREFIX + the sentence's mel key digest. Value = 20-byte header + model version
(UTF-8) + float32 samples:

    magic  "THED"    4 bytes
    format_version   uint16   (HEAD_FORMAT_VERSION)
    version_length   uint16   (bytes of the model version that follow the header)
    sample_rate_hz   uint32
    sample_count     uint32
    crc32            uint32   (of everything after the header)

All little-endian. A value that fails any check is treated as absent, never as audio.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass
from typing import Final

import numpy as np

from libs.mesh.mel_codec import KEY_PREFIX, CacheFormatError

HEAD_FORMAT_VERSION: Final = 1
HEAD_KEY_PREFIX: Final = f"tts:head:v{HEAD_FORMAT_VERSION}:"
DEFAULT_HEAD_MS: Final = 200.0
"""More than the vocoder's first step gives (11 frames, 128 ms), so the vocoder's first two steps
(~25 ms of work on a cache hit) run while the client plays the head; small enough to add only ~17 KB
per sentence to Redis (the mel of a 2.5 s sentence is ~34 KB)."""
MAX_HEAD_MS: Final = 5000.0
"""A head is a start, not a copy of the sentence's audio."""
_MAGIC: Final = b"THED"
_HEADER: Final = struct.Struct("<4sHHIII")


@dataclass(frozen=True)
class AudioHead:
    """A sentence's first samples, as one vocoder model made them."""

    model_version: str
    """Model version of the vocoder that made the samples."""
    sample_rate_hz: int
    """Rate of `samples`."""
    samples: np.ndarray
    """float32 mono samples from the start of the sentence."""


def head_key(mel_key: str) -> str:
    """The Redis key of the audio head of the sentence whose mel is cached at `mel_key`."""
    if not mel_key.startswith(KEY_PREFIX):
        raise ValueError(f"{mel_key!r} is not a mel cache key")
    return HEAD_KEY_PREFIX + mel_key[len(KEY_PREFIX) :]


def encode_head(head: AudioHead) -> bytes:
    """Serialise `head`."""
    version = head.model_version.encode("utf-8")
    body = version + np.ascontiguousarray(head.samples, dtype="<f4").tobytes()
    header = _HEADER.pack(_MAGIC, HEAD_FORMAT_VERSION, len(version), head.sample_rate_hz, len(head.samples), zlib.crc32(body))
    return header + body


def decode_head(value: bytes) -> AudioHead:
    """Parse a value written by `encode_head`; CacheFormatError if anything is off."""
    if len(value) < _HEADER.size:
        raise CacheFormatError(f"head value is {len(value)} bytes, shorter than the {_HEADER.size}-byte header")
    magic, version, version_length, sample_rate_hz, sample_count, checksum = _HEADER.unpack_from(value)
    if magic != _MAGIC or version != HEAD_FORMAT_VERSION:
        raise CacheFormatError(f"not a version-{HEAD_FORMAT_VERSION} audio head (magic {magic!r}, version {version})")
    body = memoryview(value)[_HEADER.size :]
    if len(body) != version_length + 4 * sample_count:
        raise CacheFormatError(f"head body is {len(body)} bytes; the header promises {version_length + 4 * sample_count}")
    if zlib.crc32(body) != checksum:
        raise CacheFormatError("head checksum mismatch")
    try:
        model_version = bytes(body[:version_length]).decode("utf-8")
    except UnicodeDecodeError as error:
        raise CacheFormatError(f"head model version is not UTF-8: {error}") from None
    samples = np.frombuffer(body[version_length:], dtype="<f4").astype(np.float32)
    return AudioHead(model_version, int(sample_rate_hz), samples)


class HeadCollector:
    """Gathers the first `head_samples` of one sentence from the vocoder's pieces, in order."""

    def __init__(self, head_samples: int, sample_rate_hz: int, model_version: str) -> None:
        self._wanted = head_samples
        self._sample_rate_hz = sample_rate_hz
        self._model_version = model_version
        self._pieces: list[np.ndarray] = []
        self._count = 0
        self.spoiled = False
        """Set when pieces came from another model or rate (a failover): nothing is worth keeping."""

    def add(self, samples: np.ndarray, sample_rate_hz: int, model_version: str, is_last: bool) -> AudioHead | None:
        """Take the sentence's next samples; returns the head once it is complete (or the sentence ended)."""
        if self.spoiled or self._count >= self._wanted:
            return None
        if model_version != self._model_version or sample_rate_hz != self._sample_rate_hz or not model_version:
            self.spoiled = True
            return None
        take = samples[: self._wanted - self._count]
        self._pieces.append(np.asarray(take, dtype=np.float32))
        self._count += len(take)
        if self._count < self._wanted and not is_last:
            return None
        self._count = self._wanted  # complete: later pieces are ignored
        return AudioHead(self._model_version, self._sample_rate_hz, np.concatenate(self._pieces))
