"""Cache keys and the cached mel layout."""

from __future__ import annotations

import numpy as np
import pytest

from libs.cache.codec import CacheFormatError, decode_mel, encode_mel
from libs.cache.keys import cache_key
from libs.voice.inputs import SynthesisInputs, SynthesisParams

BASE = dict(model_version="m1", voice="v", speaker_id=0, speed=1.0, noise_scale=0.667, noise_w=0.8, phoneme_ids=[1, 0, 5, 0, 2])


def key_of(model_version: str, voice: str, speaker_id: int, speed: float, noise_scale: float, noise_w: float, phoneme_ids: list[int]) -> str:
    return cache_key(SynthesisInputs(model_version, voice, phoneme_ids, SynthesisParams(speaker_id, speed, noise_scale, noise_w)))


def test_key_changes_with_every_input_and_only_with_them() -> None:
    assert key_of(**BASE) == key_of(**dict(BASE))
    variants = [
        dict(BASE, model_version="m2"),
        dict(BASE, voice="w"),
        dict(BASE, speaker_id=1),
        dict(BASE, speed=1.25),
        dict(BASE, noise_scale=0.5),
        dict(BASE, noise_w=0.7),
        dict(BASE, phoneme_ids=[1, 0, 6, 0, 2]),
        dict(BASE, phoneme_ids=[1, 0, 5, 0]),
    ]
    keys = {key_of(**variant) for variant in variants} | {key_of(**BASE)}
    assert len(keys) == len(variants) + 1
    assert key_of(**BASE).startswith("tts:mel:v1:")


def test_a_spoken_part_has_a_key_of_its_own_and_its_sentences_seed() -> None:
    ids = (1, 0, 5, 0, 6, 0, 2)
    whole = SynthesisInputs("m1", "v", ids)
    parts = [SynthesisInputs("m1", "v", ids, spoken_ids=span) for span in ((0, 3), (3, 7), (0, 7))]
    keys = {cache_key(inputs) for inputs in [whole, *parts]}
    assert len(keys) == 4  # even the part that is all of it: the whole is asked for without one
    # The part is planned as its sentence would be: the same seed, so the same durations and noise.
    assert {inputs.seed() for inputs in parts} == {whole.seed()}
    for bad in ((3, 3), (-1, 2), (0, 8)):
        with pytest.raises(ValueError):
            SynthesisInputs("m1", "v", ids, spoken_ids=bad)


def test_round_trip_keeps_frames_to_float16_precision_and_alignment() -> None:
    rng = np.random.default_rng(0)
    mel = rng.uniform(-11.5, 2.0, size=(80, 37)).astype(np.float32)
    cached = decode_mel(encode_mel(mel, [3, 4, 30]))
    assert cached.mel.shape == (80, 37) and cached.mel.dtype == np.float32
    np.testing.assert_allclose(cached.mel, mel.astype(np.float16).astype(np.float32), rtol=0, atol=0)
    assert np.max(np.abs(cached.mel - mel)) < 0.01
    assert cached.phoneme_frames == (3, 4, 30)
    assert cached.frame_count == 37


def test_header_is_24_bytes_and_values_are_float16() -> None:
    value = encode_mel(np.zeros((80, 10), dtype=np.float32), [10])
    assert len(value) == 24 + 4 + 80 * 10 * 2
    assert value[:4] == b"TMEL"


@pytest.mark.parametrize(
    "damage",
    [
        lambda v: v[:10],
        lambda v: b"XMEL" + v[4:],
        lambda v: v[:-1],
        lambda v: v[:-2] + bytes([v[-2] ^ 0xFF]) + v[-1:],
    ],
    ids=["truncated-header", "bad-magic", "short-body", "flipped-byte"],
)
def test_damaged_values_are_rejected(damage) -> None:
    value = encode_mel(np.ones((80, 4), dtype=np.float32), [4])
    with pytest.raises(CacheFormatError):
        decode_mel(damage(value))
