"""A multi-speaker voice's decoder streams exactly: its speaker conditioning goes in with every step,
and the streamed samples of each speaker equal the whole sentence decoded for that speaker."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from libs.models.mel_bridge import MelVocoder
from libs.voice.engine import EngineSettings, VocoderEngine
from tests.support.piper_voices import TinyVoice, tiny_models

TOLERANCE = 1e-5
TRIO = TinyVoice("en_GB-trio-low", sample_rate_hz=16_000, speakers=("alice", "bob", "carol"), seed=1)


@pytest.fixture(scope="module")
def engine() -> VocoderEngine:
    acoustic, decoder = tiny_models(TRIO)
    return VocoderEngine(
        MelVocoder(None, decoder, acoustic.emb_g), model_version="trio", sample_rate_hz=16_000, hop_length=256,
        n_mels=decoder.config.in_channels, settings=EngineSettings(precision="fp32"),
    )  # fmt: skip


@pytest.mark.parametrize("push_frames", [1, 5, 23])
def test_each_speaker_s_stream_equals_its_whole_sentence(engine: VocoderEngine, push_frames: int) -> None:
    latent = np.random.default_rng(3).normal(0.0, 1.0, size=(engine.n_mels, 61)).astype(np.float32)
    decoded = []
    for speaker in range(3):
        whole = engine.vocode(latent, speaker_id=speaker)
        with torch.inference_mode():
            g = engine.vocoder.speakers(torch.tensor([speaker])).unsqueeze(-1)
            direct = engine.vocoder.decoder(torch.from_numpy(latent)[None], None, g)[0, 0].numpy()
        assert np.abs(whole - direct).max() <= TOLERANCE
        stream = engine.open_stream(speaker_id=speaker)
        pieces = [stream.push(latent[:, i : i + push_frames]) for i in range(0, latent.shape[1], push_frames)]
        streamed = np.concatenate([*pieces, stream.finish()])
        assert streamed.shape == whole.shape and np.abs(streamed - whole).max() <= TOLERANCE
        decoded.append(whole)
    assert np.abs(decoded[0] - decoded[2]).max() > 1e-3, "the speakers sound the same: the conditioning is lost"


def test_a_speaker_the_voice_does_not_have_is_refused(engine: VocoderEngine) -> None:
    with pytest.raises(ValueError, match="speakers 0 to 2"):
        engine.open_stream(speaker_id=3)
