"""Audio leaves the mesh through one stateful encoder per utterance: float samples in, the bytes of
the client's encoding out.

An encoder sees every sample of the utterance in order, at the output rate, and may hold some back
(a codec fills its frames); `finish` gives what it still holds. Each encoding is one entry of
`ENCODINGS`: the class that makes it, the sample rates it can carry, and how files of it are named.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final, Protocol

import numpy as np

from libs.encoding import codecs
from libs.encoding.pcm import FloatPcmEncoder, LinearPcmEncoder
from libs.pb.tts.v1 import tts_pb2


class AudioEncoder(Protocol):
    """Encodes one utterance's samples as they come."""

    def encode(self, samples: np.ndarray) -> bytes:
        """The bytes for the next float32 mono samples in [-1, 1] (possibly none yet)."""
        ...

    def finish(self) -> bytes:
        """The bytes still held back, at the end of the utterance."""
        ...


MP3_RATES_HZ: Final = (8000, 11025, 12000, 16000, 22050, 24000, 32000, 44100, 48000)
AAC_RATES_HZ: Final = (8000, 11025, 12000, 16000, 22050, 24000, 32000, 44100, 48000)
OPUS_RATES_HZ: Final = (8000, 12000, 16000, 24000, 48000)


@dataclass(frozen=True)
class Encoding:
    """One audio encoding a client can ask for."""

    name: str
    """Lower-case name (`pcm`, `ogg_opus`, ...), as HTTP callers and file names use it."""
    make: Callable[[int], AudioEncoder]
    """A fresh encoder for one utterance at the given output rate."""
    mime_type: str
    """Content type of a response in this encoding."""
    extension: str
    """File extension, without the dot."""
    sample_rates_hz: tuple[int, ...] | None = None
    """The output rates it can carry; None: any rate the service resamples to."""
    default_rate_hz: int | None = None
    """The output rate when the client asks for none; None: the voice's own rate."""


ENCODINGS: Final[Mapping[int, Encoding]] = {
    tts_pb2.LINEAR_PCM: Encoding("pcm", LinearPcmEncoder, "audio/L16", "pcm"),
    tts_pb2.FLOAT_PCM: Encoding("float_pcm", FloatPcmEncoder, "application/octet-stream", "f32"),
    tts_pb2.OGG_OPUS: Encoding("ogg_opus", codecs.ogg_opus, "audio/ogg; codecs=opus", "opus", OPUS_RATES_HZ, 48000),
    tts_pb2.MP3: Encoding("mp3", codecs.mp3, "audio/mpeg", "mp3", MP3_RATES_HZ),
    tts_pb2.FLAC: Encoding("flac", codecs.flac, "audio/flac", "flac"),
    tts_pb2.WAV: Encoding("wav", codecs.WavEncoder, "audio/wav", "wav"),
    tts_pb2.MULAW: Encoding("mulaw", codecs.mulaw, "audio/basic", "ulaw", (8000,), 8000),
    tts_pb2.ALAW: Encoding("alaw", codecs.alaw, "audio/x-alaw-basic", "alaw", (8000,), 8000),
    tts_pb2.AAC: Encoding("aac", codecs.aac, "audio/aac", "aac", AAC_RATES_HZ),
}
"""Every supported AudioEncoding."""


def encoding_of(value: int) -> Encoding:
    """The encoding `value` (an AudioEncoding; UNSPECIFIED means LINEAR_PCM); ValueError if unsupported."""
    if value == tts_pb2.AUDIO_ENCODING_UNSPECIFIED:
        value = tts_pb2.LINEAR_PCM
    encoding = ENCODINGS.get(value)
    if encoding is None:
        raise ValueError(f"unsupported audio encoding {value}")
    return encoding


def encoder_for(value: int, sample_rate_hz: int) -> AudioEncoder:
    """A fresh encoder for one utterance in encoding `value` at `sample_rate_hz`."""
    return encoding_of(value).make(sample_rate_hz)
