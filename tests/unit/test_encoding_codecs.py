"""Every encoding, written a chunk at a time as the pipeline writes it, decodes back to the samples it
was given: the same length to within one codec frame, and the same waveform (exactly for the lossless
ones; highly correlated, after the codec's delay, for the lossy ones)."""

from __future__ import annotations

import io

import av
import numpy as np
import pytest

from libs.encoding.encoders import ENCODINGS, encoder_for, encoding_of
from libs.pb.tts.v1 import tts_pb2

# Lossy codecs: how closely the decoded waveform must follow the input (Pearson correlation after
# aligning for the codec's delay), and the codec frame that bounds the length difference (samples).
LOSSY = {
    tts_pb2.OGG_OPUS: (0.95, 960),
    tts_pb2.MP3: (0.95, 1152 * 2),  # no Xing/LAME tag on a stream: the decoder keeps LAME's encoder delay
    tts_pb2.AAC: (0.95, 1024 * 2),
    tts_pb2.MULAW: (0.999, 1),
    tts_pb2.ALAW: (0.999, 1),
}
CONTAINERS = {tts_pb2.OGG_OPUS: "ogg", tts_pb2.MP3: "mp3", tts_pb2.AAC: "aac", tts_pb2.FLAC: "flac", tts_pb2.WAV: "wav"}
RAW_CODECS = {tts_pb2.MULAW: "pcm_mulaw", tts_pb2.ALAW: "pcm_alaw"}


def speech_like(rate_hz: int, seconds: float = 1.3) -> np.ndarray:
    """A voiced signal with a moving pitch, formant-like harmonics and syllable-rate loudness changes."""
    t = np.arange(int(rate_hz * seconds)) / rate_hz
    pitch = 120 + 30 * np.sin(2 * np.pi * 1.5 * t)
    phase = 2 * np.pi * np.cumsum(pitch) / rate_hz
    harmonics = sum(np.sin(k * phase) / k for k in range(1, 12) if k * 180 < rate_hz / 2)
    envelope = 0.5 + 0.5 * np.sin(2 * np.pi * 4 * t) ** 2
    return (0.3 * envelope * harmonics / 2).astype(np.float32)


def encode_in_chunks(encoding: int, samples: np.ndarray, rate_hz: int) -> tuple[bytes, list[int]]:
    """The stream, written in uneven chunks as vocoder steps come; and the bytes each call returned."""
    encoder = encoder_for(encoding, rate_hz)
    sizes, parts = [], []
    for chunk in np.array_split(samples, [int(rate_hz * s) for s in (0.128, 0.3, 0.62, 0.64, 1.0)]):
        data = encoder.encode(chunk)
        parts.append(data)
        sizes.append(len(data))
    tail = encoder.finish()
    parts.append(tail)
    sizes.append(len(tail))
    return b"".join(parts), sizes


def decode(encoding: int, data: bytes, rate_hz: int) -> np.ndarray:
    """The stream decoded with FFmpeg, as float32 mono."""
    if encoding == tts_pb2.LINEAR_PCM:
        return np.frombuffer(data, dtype="<i2").astype(np.float32) / 32767.0
    if encoding == tts_pb2.FLOAT_PCM:
        return np.frombuffer(data, dtype="<f4")
    if encoding in RAW_CODECS:
        context = av.CodecContext.create(RAW_CODECS[encoding], "r")
        context.sample_rate = rate_hz
        context.layout = "mono"
        frames = context.decode(av.Packet(data))
    else:
        container = av.open(io.BytesIO(data), mode="r", format=CONTAINERS[encoding])
        assert container.streams.audio[0].sample_rate == rate_hz
        frames = list(container.decode(audio=0))
    return np.concatenate([_as_float(frame) for frame in frames])


def _as_float(frame: av.AudioFrame) -> np.ndarray:
    values = frame.to_ndarray().reshape(-1)
    if frame.format.name.startswith("s16"):
        return values.astype(np.float32) / 32767.0  # the encoders' own scale (libs.encoding.pcm)
    return values.astype(np.float32)


def aligned_correlation(reference: np.ndarray, decoded: np.ndarray, max_lag: int) -> float:
    """Pearson correlation of the two at the lag (0..max_lag samples of codec delay) where it is highest."""
    best = -1.0
    length = min(len(reference), len(decoded) - max_lag)
    for lag in range(max_lag + 1):
        a, b = reference[:length], decoded[lag : lag + length]
        best = max(best, float(np.corrcoef(a, b)[0, 1]))
    return best


@pytest.mark.parametrize("encoding", sorted(ENCODINGS), ids=lambda value: tts_pb2.AudioEncoding.Name(value))
def test_each_encoding_decodes_back_to_the_samples_it_was_given(encoding: int) -> None:
    spec = encoding_of(encoding)
    rate_hz = spec.default_rate_hz or 22050
    samples = speech_like(rate_hz)
    data, _ = encode_in_chunks(encoding, samples, rate_hz)
    decoded = decode(encoding, data, rate_hz)
    if encoding in LOSSY:
        min_correlation, frame = LOSSY[encoding]
        assert abs(len(decoded) - len(samples)) <= frame, (len(decoded), len(samples))
        assert aligned_correlation(samples, decoded, max_lag=frame if frame > 1 else 0) >= min_correlation
    else:
        assert len(decoded) == len(samples)
        np.testing.assert_allclose(decoded, samples, atol=1.0 / 32767 + 1e-6)  # 16-bit rounding at most


@pytest.mark.parametrize("encoding", [tts_pb2.OGG_OPUS, tts_pb2.MP3, tts_pb2.AAC, tts_pb2.WAV, tts_pb2.MULAW])
def test_streams_flush_as_they_go_not_at_the_end(encoding: int) -> None:
    """Bytes come out with the first chunks (the header and the first frames), not only at `finish`."""
    rate_hz = encoding_of(encoding).default_rate_hz or 22050
    data, sizes = encode_in_chunks(encoding, speech_like(rate_hz), rate_hz)
    assert sizes[0] > 0, "nothing after the first 128 ms of audio"
    assert sum(sizes[:-1]) >= 0.8 * len(data), f"most of the stream waited for the end: {sizes}"


def test_ogg_pages_come_every_20_ms_of_audio() -> None:
    rate_hz = 48000
    encoder = encoder_for(tts_pb2.OGG_OPUS, rate_hz)
    samples = speech_like(rate_hz, seconds=1.0)
    pages = 0
    for start in range(0, len(samples), rate_hz // 50):  # 20 ms at a time
        pages += encoder.encode(samples[start : start + rate_hz // 50]).count(b"OggS")
    pages += encoder.finish().count(b"OggS")
    assert pages >= 45, pages  # 2 header pages + about one page per 20 ms of audio


def test_wav_header_says_the_length_is_unknown() -> None:
    data, _ = encode_in_chunks(tts_pb2.WAV, speech_like(16000), 16000)
    assert data[:4] == b"RIFF" and data[8:16] == b"WAVEfmt "
    assert data[4:8] == b"\xff\xff\xff\xff" and data[40:44] == b"\xff\xff\xff\xff"
    assert int.from_bytes(data[24:28], "little") == 16000


def test_compressed_encodings_are_a_fraction_of_pcm() -> None:
    """Opus carries speech in about a tenth of 16-bit PCM's bytes at 22.05 kHz."""
    seconds = 2.0
    opus, _ = encode_in_chunks(tts_pb2.OGG_OPUS, speech_like(48000, seconds), 48000)
    pcm_bytes = int(22050 * seconds) * 2
    assert len(opus) * 8 / seconds <= 48_000, f"{len(opus) * 8 / seconds:.0f} bit/s"
    assert len(opus) < pcm_bytes / 6
