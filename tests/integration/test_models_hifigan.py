"""HiFi-GAN generator: public checkpoint format, sizes, padded batches and receptive field."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from libs.models.commons import to_legacy_weight_norm_keys
from libs.models.hifigan import (
    HIFIGAN_V1,
    HIFIGAN_V2,
    HIFIGAN_V3,
    Generator,
    GeneratorConfig,
    load_hifigan_checkpoint,
    piper_medium_decoder_config,
    receptive_field_frames,
)
from libs.voice.chunking import ChunkSchedule
from libs.voice.runtime import EngineSettings
from libs.voice.vocoder_engine import VocoderEngine

HOP = 256
VERSIONS = {"V1": (HIFIGAN_V1, 13.92e6), "V2": (HIFIGAN_V2, 0.92e6), "V3": (HIFIGAN_V3, 1.46e6)}
# Training-only keys of the public config files, which loading must ignore.
TRAINING_KEYS = {"num_gpus": 0, "batch_size": 16, "learning_rate": 0.0002, "segment_size": 8192, "sampling_rate": 22050}


@pytest.fixture(autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _write_public_checkpoint(tmp_path, config: GeneratorConfig) -> tuple[Generator, object]:
    torch.manual_seed(0)
    generator = Generator(config)
    state = to_legacy_weight_norm_keys(generator.state_dict())
    checkpoint = tmp_path / "g_02500000"
    torch.save({"generator": state}, checkpoint)
    public = {key: value for key, value in config.to_dict().items() if key not in ("in_channels", "io_weight_norm", "post_bias", "gin_channels", "lrelu_slope", "post_lrelu_slope")}
    (tmp_path / "config.json").write_text(json.dumps({**public, **TRAINING_KEYS}))
    return generator, state


@pytest.mark.parametrize("version", sorted(VERSIONS))
def test_public_checkpoint_loads_with_paper_sizes_and_output_length(tmp_path, version):
    config, paper_params = VERSIONS[version]
    original, state = _write_public_checkpoint(tmp_path, config)
    assert "conv_pre.weight_g" in state and "ups.0.weight_v" in state
    assert not any("parametrizations" in key for key in state)

    loaded = load_hifigan_checkpoint(tmp_path / "g_02500000")

    assert loaded.config == config
    assert abs(sum(p.numel() for p in loaded.parameters()) - paper_params) < 0.01e6
    mel = torch.randn(1, 80, 12)
    with torch.no_grad():
        expected = original.eval()(mel)
        audio = loaded(mel)
    assert audio.shape == (1, 1, 12 * HOP)
    assert torch.allclose(audio, expected, atol=1e-6)
    assert audio.abs().max() > 0


def test_config_round_trips_through_public_json_keys():
    for config in (HIFIGAN_V1, HIFIGAN_V2, HIFIGAN_V3, piper_medium_decoder_config()):
        assert GeneratorConfig.from_dict(json.loads(json.dumps(config.to_dict()))) == config
    assert GeneratorConfig.from_dict({"resblock": "2", "num_mels": 80, "upsample_rates": [8, 8, 4]}).in_channels == 80


@pytest.mark.parametrize("config", [HIFIGAN_V2, HIFIGAN_V3, piper_medium_decoder_config()], ids=["V2", "V3", "piper"])
def test_padded_batch_gives_each_item_its_alone_output(config):
    torch.manual_seed(1)
    generator = Generator(config).eval()
    generator.remove_weight_norm()
    lengths = torch.tensor([23, 9, 16])
    batch = torch.randn(3, config.in_channels, 23)
    for index, length in enumerate(lengths):
        batch[index, :, length:] = 3.0  # garbage in the padding must not leak
    with torch.no_grad():
        batched = generator(batch, lengths=lengths)
        for index, length in enumerate(lengths.tolist()):
            alone = generator(batch[index : index + 1, :, :length])[0, 0]
            assert torch.allclose(batched[index, 0, : length * HOP], alone, atol=1e-4)
            assert torch.count_nonzero(batched[index, 0, length * HOP :]) == 0


def test_receptive_field_matches_the_published_context():
    assert receptive_field_frames(HIFIGAN_V1) == 13
    assert receptive_field_frames(HIFIGAN_V2) == 13
    assert receptive_field_frames(HIFIGAN_V3) == 11
    assert receptive_field_frames(piper_medium_decoder_config()) == 11


@pytest.mark.parametrize("config", [HIFIGAN_V2, HIFIGAN_V3], ids=["V2", "V3"])
def test_one_frame_of_audio_depends_on_exactly_the_computed_context(config):
    torch.manual_seed(2)
    generator = Generator(config).eval()
    generator.remove_weight_norm()
    mel = torch.randn(1, 80, 40, requires_grad=True)
    frame = 20
    generator(mel)[0, 0, frame * HOP : (frame + 1) * HOP].sum().backward()
    influence = mel.grad[0].abs().sum(dim=0)
    depends = torch.nonzero(influence).flatten() - frame
    context = receptive_field_frames(config)
    assert depends.min().item() == -context
    assert depends.max().item() == context


def test_chunk_with_receptive_field_context_vocodes_like_the_whole():
    torch.manual_seed(3)
    generator = Generator(HIFIGAN_V3).eval()
    generator.remove_weight_norm()
    context = receptive_field_frames(HIFIGAN_V3)
    mel = torch.randn(1, 80, 70)
    with torch.no_grad():
        whole = generator(mel)[0, 0]
        start, end = 30, 40
        chunk = generator(mel[:, :, start - context : end + context])[0, 0]
    trimmed = chunk[context * HOP : (context + end - start) * HOP]
    assert torch.allclose(trimmed, whole[start * HOP : end * HOP], atol=1e-6)


@pytest.mark.parametrize("version", ["V1", "V3"])
@pytest.mark.parametrize("push_frames", [1, 7])
def test_stateful_stream_of_public_generator_vocodes_like_the_whole(version, push_frames):
    """V1 (conv-pair residual blocks) and V3 (single convs) both stream exactly, 1-frame pushes included."""
    torch.manual_seed(5)
    generator = Generator(VERSIONS[version][0]).eval()
    generator.remove_weight_norm()
    # float32: the claim is exactness of the streaming itself (bf16's bounds are tested on their own);
    # "auto" would pick bf16 on a CPU that runs it natively.
    engine = VocoderEngine.load_hifigan(
        generator, sample_rate_hz=22050, schedule=ChunkSchedule(5, 2.0, 16), settings=EngineSettings(precision="fp32")
    )
    mel = torch.randn(80, 45).numpy()
    stream = engine.open_stream()
    pieces = [stream.push(mel[:, i : i + push_frames]) for i in range(0, mel.shape[1], push_frames)] + [stream.finish()]
    streamed = torch.from_numpy(np.concatenate(pieces))
    whole = torch.from_numpy(engine.vocode(mel))
    assert streamed.shape == whole.shape == (45 * HOP,)
    assert torch.allclose(streamed, whole, atol=1e-5)
    assert engine.lag_frames <= receptive_field_frames(VERSIONS[version][0]) + 1
