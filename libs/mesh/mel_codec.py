"""Cache key and value layout of a sentence's mel (DESIGN §6).

Value = 24-byte header + int32 phoneme durations + float16 frames (frame-major):

    magic  "TMEL"    4 bytes
    format_version   uint16   (FORMAT_VERSION)
    dtype            uint8    (1 = float16)
    reserved         uint8
    n_mels           uint16
    reserved         uint16
    frame_count      uint32
    alignment_count  uint32   (number of int32 phoneme durations that follow the header)
    crc32            uint32   (of everything after the header)

All little-endian. A value that fails any check is treated as a miss, never as audio.
"""

from __future__ import annotations

import hashlib
import struct
import zlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Sequence

import numpy as np

if TYPE_CHECKING:
    from libs.mesh.audio_head import AudioHead

FORMAT_VERSION: Final = 1
KEY_PREFIX: Final = f"tts:mel:v{FORMAT_VERSION}:"
_MAGIC: Final = b"TMEL"
_DTYPE_FLOAT16: Final = 1
_HEADER: Final = struct.Struct("<4sHBBHHIII")


class CacheFormatError(ValueError):
    """A cached value that is not a valid mel entry (wrong magic, version, sizes or checksum)."""


@dataclass(frozen=True)
class CachedMel:
    """A sentence's mel as stored in the cache."""

    mel: np.ndarray
    """Log-mel, float32 [n_mels, frame_count] (values were stored as float16)."""
    phoneme_frames: tuple[int, ...]
    """Frames per phoneme id (may be empty)."""
    head: "AudioHead | None" = None
    """The sentence's first samples, when the cache had them too (libs.mesh.audio_head)."""

    @property
    def frame_count(self) -> int:
        """Number of frames."""
        return int(self.mel.shape[1])


def cache_key(
    *,
    model_version: str,
    voice: str,
    speaker_id: int,
    speed: float,
    noise_scale: float,
    noise_w: float,
    phoneme_ids: Sequence[int],
) -> str:
    """The Redis key of one sentence: a hash of exactly the inputs synthesis depends on (DESIGN §4)."""
    digest = hashlib.sha256()
    # Length-prefixed fields, floats as float32 bits (what travels in the proto), so no two inputs collide.
    for text in (model_version, voice):
        raw = text.encode("utf-8")
        digest.update(struct.pack("<I", len(raw)) + raw)
    digest.update(struct.pack("<ifff", speaker_id, speed, noise_scale, noise_w))
    digest.update(struct.pack("<I", len(phoneme_ids)))
    digest.update(np.asarray(phoneme_ids, dtype="<i4").tobytes())
    return KEY_PREFIX + digest.hexdigest()


def encode_mel(mel: np.ndarray, phoneme_frames: Sequence[int] = ()) -> bytes:
    """Serialise a sentence mel [n_mels, frames] (stored as float16) and its phoneme durations."""
    n_mels, frame_count = mel.shape
    body = np.asarray(phoneme_frames, dtype="<i4").tobytes() + np.ascontiguousarray(mel.T, dtype="<f2").tobytes()
    header = _HEADER.pack(
        _MAGIC, FORMAT_VERSION, _DTYPE_FLOAT16, 0, n_mels, 0, frame_count, len(phoneme_frames), zlib.crc32(body)
    )
    return header + body


def decode_mel(value: bytes) -> CachedMel:
    """Parse a value written by `encode_mel`; CacheFormatError if anything is off."""
    if len(value) < _HEADER.size:
        raise CacheFormatError(f"value is {len(value)} bytes, shorter than the {_HEADER.size}-byte header")
    magic, version, dtype, _, n_mels, _, frame_count, alignment_count, checksum = _HEADER.unpack_from(value)
    if magic != _MAGIC or version != FORMAT_VERSION or dtype != _DTYPE_FLOAT16:
        raise CacheFormatError(f"not a version-{FORMAT_VERSION} float16 mel entry (magic {magic!r}, version {version})")
    body = memoryview(value)[_HEADER.size :]
    expected = alignment_count * 4 + n_mels * frame_count * 2
    if len(body) != expected:
        raise CacheFormatError(f"body is {len(body)} bytes; the header promises {expected}")
    if zlib.crc32(body) != checksum:
        raise CacheFormatError("checksum mismatch")
    alignment = np.frombuffer(body[: alignment_count * 4], dtype="<i4")
    frames = np.frombuffer(body[alignment_count * 4 :], dtype="<f2").reshape(frame_count, n_mels)
    return CachedMel(mel=frames.T.astype(np.float32), phoneme_frames=tuple(int(x) for x in alignment))
