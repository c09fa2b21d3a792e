"""The layout of the cache's values: a sentence's mel entry and its audio head (see libs.cache.keys).

Mel entry = 24-byte header + int32 phoneme durations + float16 frames (frame-major):

    magic  "TMEL"    4 bytes
    format_version   uint16   (FORMAT_VERSION)
    dtype            uint8    (1 = float16)
    reserved         uint8
    n_mels           uint16
    reserved         uint16
    frame_count      uint32
    alignment_count  uint32   (number of int32 phoneme durations that follow the header)
    crc32            uint32   (of everything after the header)

Audio head (the first `head_ms` of a sentence's samples, as one vocoder model made them, kept so a
cache hit speaks before the vocoder's first step) = 20-byte header + model version (UTF-8) +
float32 samples:

    magic  "THED"    4 bytes
    format_version   uint16   (FORMAT_VERSION)
    version_length   uint16   (bytes of the model version that follow the header)
    sample_rate_hz   uint32
    sample_count     uint32
    crc32            uint32   (of everything after the header)

All little-endian. A value that fails any check is treated as a miss, never as audio: besides sizes
and checksums, every mel value and sample must be finite, and a head's rate and length plausible (a
CRC only catches accidents; a cache key, libs.cache.sealing, is what stops a forged value).
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

import numpy as np

from libs.cache.keys import FORMAT_VERSION
from libs.cache.settings import MAX_HEAD_MS

_MEL_MAGIC: Final = b"TMEL"
_HEAD_MAGIC: Final = b"THED"
_DTYPE_FLOAT16: Final = 1
_MEL_HEADER: Final = struct.Struct("<4sHBBHHIII")
_HEAD_HEADER: Final = struct.Struct("<4sHHIII")
MIN_HEAD_RATE_HZ: Final = 8000
MAX_HEAD_RATE_HZ: Final = 192000
"""Rates a vocoder could have made a head at; anything else is not a head."""


class CacheFormatError(ValueError):
    """A cached value that is not a valid entry (wrong magic, version, sizes or checksum)."""


@dataclass(frozen=True)
class AudioHead:
    """A sentence's first samples, as one vocoder model made them."""

    model_version: str
    """Model version of the vocoder that made the samples."""
    sample_rate_hz: int
    """Rate of `samples`."""
    samples: np.ndarray
    """float32 mono samples from the start of the sentence."""


@dataclass(frozen=True)
class CachedMel:
    """A sentence's mel as stored in the cache."""

    mel: np.ndarray
    """Log-mel, float32 [n_mels, frame_count] (values were stored as float16)."""
    phoneme_frames: tuple[int, ...]
    """Frames per phoneme id (may be empty)."""
    head: AudioHead | None = None
    """The sentence's first samples, when the cache had them too."""

    @property
    def frame_count(self) -> int:
        """Number of frames."""
        return int(self.mel.shape[1])


def encode_mel(mel: np.ndarray, phoneme_frames: Sequence[int] = ()) -> bytes:
    """Serialise a sentence mel [n_mels, frames] (stored as float16) and its phoneme durations."""
    n_mels, frame_count = mel.shape
    body = np.asarray(phoneme_frames, dtype="<i4").tobytes() + np.ascontiguousarray(mel.T, dtype="<f2").tobytes()
    header = _MEL_HEADER.pack(
        _MEL_MAGIC, FORMAT_VERSION, _DTYPE_FLOAT16, 0, n_mels, 0, frame_count, len(phoneme_frames), zlib.crc32(body)
    )
    return header + body


def decode_mel(value: bytes) -> CachedMel:
    """Parse a value written by `encode_mel`; CacheFormatError if anything is off."""
    if len(value) < _MEL_HEADER.size:
        raise CacheFormatError(f"value is {len(value)} bytes, shorter than the {_MEL_HEADER.size}-byte header")
    magic, version, dtype, _, n_mels, _, frame_count, alignment_count, checksum = _MEL_HEADER.unpack_from(value)
    if magic != _MEL_MAGIC or version != FORMAT_VERSION or dtype != _DTYPE_FLOAT16:
        raise CacheFormatError(f"not a version-{FORMAT_VERSION} float16 mel entry (magic {magic!r}, version {version})")
    body = memoryview(value)[_MEL_HEADER.size :]
    expected = alignment_count * 4 + n_mels * frame_count * 2
    if len(body) != expected:
        raise CacheFormatError(f"body is {len(body)} bytes; the header promises {expected}")
    if zlib.crc32(body) != checksum:
        raise CacheFormatError("checksum mismatch")
    alignment = np.frombuffer(body[: alignment_count * 4], dtype="<i4")
    frames = np.frombuffer(body[alignment_count * 4 :], dtype="<f2").reshape(frame_count, n_mels)
    if not np.isfinite(frames).all():
        raise CacheFormatError("mel holds values that are not finite")
    return CachedMel(mel=frames.T.astype(np.float32), phoneme_frames=tuple(int(x) for x in alignment))


def encode_head(head: AudioHead) -> bytes:
    """Serialise `head`."""
    version = head.model_version.encode("utf-8")
    body = version + np.ascontiguousarray(head.samples, dtype="<f4").tobytes()
    header = _HEAD_HEADER.pack(_HEAD_MAGIC, FORMAT_VERSION, len(version), head.sample_rate_hz, len(head.samples), zlib.crc32(body))
    return header + body


def decode_head(value: bytes) -> AudioHead:
    """Parse a value written by `encode_head`; CacheFormatError if anything is off."""
    if len(value) < _HEAD_HEADER.size:
        raise CacheFormatError(f"head value is {len(value)} bytes, shorter than the {_HEAD_HEADER.size}-byte header")
    magic, version, version_length, sample_rate_hz, sample_count, checksum = _HEAD_HEADER.unpack_from(value)
    if magic != _HEAD_MAGIC or version != FORMAT_VERSION:
        raise CacheFormatError(f"not a version-{FORMAT_VERSION} audio head (magic {magic!r}, version {version})")
    if not MIN_HEAD_RATE_HZ <= sample_rate_hz <= MAX_HEAD_RATE_HZ:
        raise CacheFormatError(f"head rate {sample_rate_hz} Hz is outside {MIN_HEAD_RATE_HZ}-{MAX_HEAD_RATE_HZ} Hz")
    if sample_count > sample_rate_hz * MAX_HEAD_MS / 1000.0:
        raise CacheFormatError(f"head of {sample_count} samples is longer than {MAX_HEAD_MS:g} ms")
    body = memoryview(value)[_HEAD_HEADER.size :]
    if len(body) != version_length + 4 * sample_count:
        raise CacheFormatError(f"head body is {len(body)} bytes; the header promises {version_length + 4 * sample_count}")
    if zlib.crc32(body) != checksum:
        raise CacheFormatError("head checksum mismatch")
    try:
        model_version = bytes(body[:version_length]).decode("utf-8")
    except UnicodeDecodeError as error:
        raise CacheFormatError(f"head model version is not UTF-8: {error}") from None
    samples = np.frombuffer(body[version_length:], dtype="<f4").astype(np.float32)
    if not np.isfinite(samples).all():
        raise CacheFormatError("head holds samples that are not finite")
    return AudioHead(model_version, int(sample_rate_hz), samples)
