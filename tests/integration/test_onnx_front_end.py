"""The text side in one onnxruntime graph (encoder + stochastic duration predictor): torch's numbers,
exported once, then read back from the cache."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch

from libs.models.onnx_encoder import OnnxFrontEnd, export_front_end, front_end_cache_path
from libs.models.piper_import import PiperVoiceModels
from libs.models.vits import VitsAcoustic, VitsConfig, piper_medium_config, synthesis_generator
from libs.voice.acoustic_engine import AcousticEngine, SynthesisParams, encoder_version_part
from libs.voice.runtime import EngineSettings
from tests.integration.test_onnx_encoder import ID_RUNS, load_again_from_the_cache
from tests.integration.test_streaming_exact import LONG_IDS, SHORT_IDS

TOLERANCE = 1e-4


@pytest.fixture(scope="module")
def exported(voice: PiperVoiceModels, graph_cache: Path) -> OnnxFrontEnd:
    return OnnxFrontEnd.load(voice.acoustic, cache_dir=graph_cache)


def _torch_front_end(acoustic: VitsAcoustic, ids: list[int], noise_w: float, seed: int) -> tuple[torch.Tensor, ...]:
    """(noise, m_p, logs_p, logw) as torch computes them."""
    with torch.inference_mode():
        encoded = acoustic.encode(torch.tensor([ids]))
        noise = acoustic.duration_noise(encoded, synthesis_generator(seed), noise_w)
        logw = acoustic.dp.sample_log_durations(encoded.hidden, encoded.x_mask, noise)
    return noise, encoded.m_p, encoded.logs_p, logw


@pytest.mark.parametrize("noise_w", [0.0, 0.8])
@pytest.mark.parametrize("name", ["one", "short", "161", "301"])
def test_float32_front_end_equals_torch(voice: PiperVoiceModels, exported: OnnxFrontEnd, name: str, noise_w: float) -> None:
    noise, *reference = _torch_front_end(voice.acoustic, ID_RUNS[name], noise_w, seed=7)
    outputs = exported.run(torch.tensor([ID_RUNS[name]]), noise)
    for output, expected in zip(outputs, reference, strict=False):
        assert output.shape == expected.shape and output.dtype == torch.float32
        assert float((output - expected).abs().max()) <= TOLERANCE


@pytest.mark.parametrize("name", ["one", "short", "161", "301"])
def test_both_cores_give_the_same_numbers_bit_for_bit(exported: OnnxFrontEnd, name: str) -> None:
    # A resumed sentence is planned on one thread after its start ran on two: durations must agree.
    ids = torch.tensor([ID_RUNS[name]])
    noise = torch.randn(1, 2, ids.size(1), generator=torch.Generator().manual_seed(len(ID_RUNS[name]))) * 0.8
    for wide, lean in zip(exported.run(ids, noise, wide=True), exported.run(ids, noise), strict=False):
        assert torch.equal(wide, lean)


def test_second_load_reads_the_cached_file_without_exporting(
    voice: PiperVoiceModels, graph_cache: Path, exported: OnnxFrontEnd
) -> None:
    again = load_again_from_the_cache(exported, lambda: OnnxFrontEnd.load(voice.acoustic, cache_dir=graph_cache), graph_cache)
    ids, noise = torch.tensor([SHORT_IDS]), torch.randn(1, 2, len(SHORT_IDS))
    for left, right in zip(again.run(ids, noise), exported.run(ids, noise), strict=False):
        assert torch.equal(left, right)


def test_cache_key_ignores_the_training_only_weights(voice: PiperVoiceModels, tmp_path: Path) -> None:
    # An imported Piper voice leaves these at their random initial values, different in every process.
    other = copy.deepcopy(voice.acoustic)
    with torch.no_grad():
        other.dp.post_pre.weight.add_(1.0)
        other.dp.flows[1].proj.bias.add_(1.0)
    assert front_end_cache_path(other, tmp_path) == front_end_cache_path(voice.acoustic, tmp_path)
    for name in ("dp.pre.bias", "enc_p.proj.bias"):  # the graph holds both halves
        changed = copy.deepcopy(other)
        with torch.no_grad():
            changed.get_parameter(name).add_(1.0)
        assert front_end_cache_path(changed, tmp_path) != front_end_cache_path(voice.acoustic, tmp_path)


def test_cached_graph_that_disagrees_with_the_weights_is_rebuilt(voice: PiperVoiceModels, tmp_path: Path) -> None:
    torch.manual_seed(0)
    other = VitsAcoustic(voice.acoustic.config).eval()
    # A zero-initialised spline flow is the identity: give the stray graph weights that matter.
    with torch.no_grad():
        for flow in other.dp.flows[3::2]:
            flow.proj.weight.normal_(0.0, 0.1)
    front_end_cache_path(voice.acoustic, tmp_path).write_bytes(export_front_end(other))
    rebuilt = OnnxFrontEnd.load(voice.acoustic, cache_dir=tmp_path)
    assert rebuilt.exported
    noise, *reference = _torch_front_end(voice.acoustic, SHORT_IDS, 0.8, seed=3)
    for output, expected in zip(rebuilt.run(torch.tensor([SHORT_IDS]), noise), reference, strict=False):
        assert float((output - expected).abs().max()) <= TOLERANCE


def _twin(engine: AcousticEngine, backend: str) -> AcousticEngine:
    return AcousticEngine(
        engine.acoustic,
        engine.mel_head,
        voice_name=engine.voice_name,
        model_version=engine.model_version,
        sample_rate_hz=engine.sample_rate_hz,
        hop_length=engine.hop_length,
        encoder_backend=backend,
    )


@pytest.mark.parametrize("noise_w", [0.0, 0.8])
def test_engine_plan_with_the_float32_front_end_gives_the_torch_durations(noise_w: float) -> None:
    torch.set_num_threads(1)
    engine = AcousticEngine.load_default(settings=EngineSettings(precision="fp32"))
    twin = _twin(engine, "torch")
    assert engine._front_end is not None and twin._front_end is None
    assert (engine.encoder_backend, twin.encoder_backend) == ("onnxruntime", "torch")
    for ids in (SHORT_IDS, LONG_IDS):
        params = SynthesisParams(noise_w=noise_w)
        seed = engine.synthesis_seed(ids, params)
        plan, reference = engine.plan(ids, params, seed), twin.plan(ids, params, seed)
        assert plan.phoneme_frames == reference.phoneme_frames
        # Same frames and the same later draws: the prior noise comes from the same place in the stream.
        assert float((plan.z_p - reference.z_p).abs().max()) <= TOLERANCE


def test_where_the_text_side_runs() -> None:
    medium = piper_medium_config()
    deterministic = VitsConfig(duration_predictor="deterministic")
    multi_speaker = piper_medium_config(n_speakers=4, gin_channels=16)
    assert encoder_version_part(medium, "onnxruntime") == "encoder=onnxruntime+sdp"
    assert encoder_version_part(medium, "torch") == "encoder=torch"
    assert encoder_version_part(deterministic, "onnxruntime") == "encoder=onnxruntime"
    assert encoder_version_part(multi_speaker, "onnxruntime") == "encoder=onnxruntime"
    tiny = VitsConfig(n_vocab=16, hidden_channels=16, inter_channels=16, filter_channels=32, n_speakers=2, gin_channels=8)
    with pytest.raises(ValueError, match="speaker-conditioned"):
        export_front_end(VitsAcoustic(tiny).eval())
