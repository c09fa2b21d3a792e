"""Compressed and telephony encodings through PyAV (FFmpeg's libraries), written as samples come.

Each encoder is one utterance's stream: it writes the container's header with the first samples,
then the codec's packets as soon as the codec has them (an Ogg page every 20 ms of audio, an MP3
or AAC frame per 1152 or 1024 samples), and the rest at `finish`. Nothing waits for the end of the
utterance, so first audio is held back only by the codec's own frame size.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Final

import av
import numpy as np

from libs.encoding.pcm import float_to_int16

OPUS_PAGE_DURATION_US: Final = 20_000
"""Ogg flushes a page every 20 ms of audio (libavformat's default is a second: a second of latency)."""
OPUS_BITRATE: Final = 32_000
"""Speech at 32 kbit/s is transparent to most listeners (about a tenth of 16-bit PCM at 22.05 kHz)."""
MP3_BITRATE: Final = 64_000
AAC_BITRATE: Final = 64_000


class _Sink:
    """A write-only file that keeps what the muxer wrote until `take` hands it on."""

    def __init__(self) -> None:
        self._parts: list[bytes] = []

    def write(self, data: bytes) -> int:
        self._parts.append(bytes(data))
        return len(data)

    def take(self) -> bytes:
        data, self._parts = b"".join(self._parts), []
        return data


class ContainerEncoder:
    """A codec in a container (Ogg/Opus, MP3, FLAC, ADTS/AAC), muxed into memory as samples come."""

    def __init__(
        self,
        container: str,
        codec: str,
        sample_rate_hz: int,
        codec_options: Mapping[str, str] | None = None,
        container_options: Mapping[str, str] | None = None,
        bit_rate: int | None = None,
    ) -> None:
        self.sample_rate_hz = sample_rate_hz
        self._sink = _Sink()
        self._container = av.open(self._sink, mode="w", format=container, options=dict(container_options or {}))
        self._stream = self._container.add_stream(codec, rate=sample_rate_hz, options=dict(codec_options or {}))
        self._stream.layout = "mono"
        if bit_rate is not None:
            self._stream.bit_rate = bit_rate
        self._pts = 0

    def encode(self, samples: np.ndarray) -> bytes:
        """The container's bytes for the next float32 mono samples (the header with the first)."""
        samples = np.ascontiguousarray(samples, dtype=np.float32)
        if len(samples):
            frame = av.AudioFrame.from_ndarray(np.clip(samples, -1.0, 1.0)[None, :], format="flt", layout="mono")
            frame.sample_rate = self.sample_rate_hz
            frame.pts = self._pts
            self._pts += len(samples)
            self._mux(self._stream.encode(frame))
        return self._sink.take()

    def finish(self) -> bytes:
        """The codec's last packets and the container's trailer."""
        self._mux(self._stream.encode(None))
        self._container.close()
        return self._sink.take()

    def _mux(self, packets: list[av.Packet]) -> None:
        for packet in packets:
            self._container.mux(packet)


class G711Encoder:
    """G.711 mu-law or A-law: one byte per sample, no header (telephony)."""

    def __init__(self, codec: str, sample_rate_hz: int) -> None:
        self.sample_rate_hz = sample_rate_hz
        self._context = av.CodecContext.create(codec, "w")
        self._context.sample_rate = sample_rate_hz
        self._context.layout = "mono"
        self._context.format = "s16"
        self._context.open()

    def encode(self, samples: np.ndarray) -> bytes:
        if not len(samples):
            return b""
        frame = av.AudioFrame.from_ndarray(float_to_int16(samples)[None, :], format="s16", layout="mono")
        frame.sample_rate = self.sample_rate_hz
        return b"".join(bytes(packet) for packet in self._context.encode(frame))

    def finish(self) -> bytes:
        return b"".join(bytes(packet) for packet in self._context.encode(None))


class WavEncoder:
    """16-bit PCM behind a RIFF/WAVE header whose sizes say "unknown" (0xFFFFFFFF).

    A WAVE header states the data size up front; a stream does not know it yet. Players and
    decoders (FFmpeg, browsers, libsndfile) read 0xFFFFFFFF as "until the end of the file", the
    usual way to stream WAVE; a server cannot seek back to patch the header on the wire.
    """

    UNKNOWN_SIZE: Final = 0xFFFFFFFF

    def __init__(self, sample_rate_hz: int) -> None:
        self.sample_rate_hz = sample_rate_hz
        self._header_sent = False

    def encode(self, samples: np.ndarray) -> bytes:
        data = float_to_int16(samples).astype("<i2").tobytes()
        if not self._header_sent:
            self._header_sent = True
            return self._header() + data
        return data

    def finish(self) -> bytes:
        return b"" if self._header_sent else self._header()

    def _header(self) -> bytes:
        channels, bits = 1, 16
        byte_rate = self.sample_rate_hz * channels * bits // 8
        fmt = struct.pack("<HHIIHH", 1, channels, self.sample_rate_hz, byte_rate, channels * bits // 8, bits)
        return (
            b"RIFF" + struct.pack("<I", self.UNKNOWN_SIZE) + b"WAVE"
            + b"fmt " + struct.pack("<I", len(fmt)) + fmt
            + b"data" + struct.pack("<I", self.UNKNOWN_SIZE)
        )  # fmt: skip


def ogg_opus(sample_rate_hz: int) -> ContainerEncoder:
    """Opus (20 ms frames) in Ogg pages of 20 ms.

    The "audio" application (CELT-weighted) rather than "voip" (SILK): at 32 kbit/s it keeps the
    waveform of synthetic speech (correlation 0.997 against 0.76 for a harmonic test voice), and TTS
    audio has no background noise or packet loss for SILK's strengths to matter.
    """
    return ContainerEncoder(
        "ogg",
        "libopus",
        sample_rate_hz,
        codec_options={"application": "audio", "frame_duration": "20"},
        container_options={"page_duration": str(OPUS_PAGE_DURATION_US)},
        bit_rate=OPUS_BITRATE,
    )


def mp3(sample_rate_hz: int) -> ContainerEncoder:
    """LAME MP3 frames with no ID3 tag and no Xing header (both need the end of the stream)."""
    return ContainerEncoder(
        "mp3", "libmp3lame", sample_rate_hz, container_options={"write_xing": "0", "id3v2_version": "0"}, bit_rate=MP3_BITRATE
    )


def flac(sample_rate_hz: int) -> ContainerEncoder:
    """Native FLAC; its STREAMINFO cannot be patched with the length afterwards, which decoders accept."""
    return ContainerEncoder("flac", "flac", sample_rate_hz)


def aac(sample_rate_hz: int) -> ContainerEncoder:
    """AAC-LC in ADTS frames (each frame carries its own header, so the stream plays as it comes)."""
    return ContainerEncoder("adts", "aac", sample_rate_hz, bit_rate=AAC_BITRATE)


def mulaw(sample_rate_hz: int) -> G711Encoder:
    return G711Encoder("pcm_mulaw", sample_rate_hz)


def alaw(sample_rate_hz: int) -> G711Encoder:
    return G711Encoder("pcm_alaw", sample_rate_hz)
