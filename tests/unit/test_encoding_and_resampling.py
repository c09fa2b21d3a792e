"""Float samples become the client's encoding and sample rate."""

from __future__ import annotations

import numpy as np

from libs.audio.resample import SentenceResampler
from libs.encoding.encoders import encoder_for
from libs.encoding.pcm import float_to_int16
from libs.pb.tts.v1 import tts_pb2


def test_int16_is_little_endian_rounded_and_clipped() -> None:
    samples = np.array([0.0, 0.5, -0.5, 1.0, -1.0, 1.7, -3.0, 1.0 / 32767 * 0.6], dtype=np.float32)
    assert float_to_int16(samples).tolist() == [0, 16384, -16384, 32767, -32767, 32767, -32767, 1]
    raw = encoder_for(tts_pb2.LINEAR_PCM, 22050).encode(np.array([0.5], dtype=np.float32))
    assert raw == (16384).to_bytes(2, "little", signed=True)
    assert encoder_for(tts_pb2.AUDIO_ENCODING_UNSPECIFIED, 22050).encode(np.array([0.5], dtype=np.float32)) == raw


def test_float_encoding_is_four_bytes_per_sample() -> None:
    samples = np.array([0.25, -0.125], dtype=np.float32)
    encoder = encoder_for(tts_pb2.FLOAT_PCM, 22050)
    assert np.frombuffer(encoder.encode(samples), dtype="<f4").tolist() == [0.25, -0.125]
    assert encoder.finish() == b""


def test_chunked_resampling_keeps_length_and_pitch() -> None:
    rate_in, rate_out = 22050, 16000
    t = np.arange(rate_in) / rate_in
    tone = (0.5 * np.sin(2 * np.pi * 440.0 * t)).astype(np.float32)
    resampler = SentenceResampler(rate_in, rate_out)
    chunks = np.array_split(tone, 23)  # uneven chunk sizes, as slices arrive
    pieces = [resampler.push(chunk, last=index == len(chunks) - 1) for index, chunk in enumerate(chunks)]
    out = np.concatenate(pieces)
    assert abs(len(out) - rate_out) <= 1
    spectrum = np.abs(np.fft.rfft(out[1000:-1000]))
    peak_hz = np.argmax(spectrum) * rate_out / len(out[1000:-1000])
    assert abs(peak_hz - 440.0) < 2.0


def test_same_rate_passes_samples_through_unchanged() -> None:
    samples = np.linspace(-1, 1, 100, dtype=np.float32)
    np.testing.assert_array_equal(SentenceResampler(22050, 22050).push(samples, last=True), samples)
