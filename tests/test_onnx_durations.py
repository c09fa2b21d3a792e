"""The stochastic duration predictor in onnxruntime: torch's log-durations, exported once, then cached."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch

from libs.models.onnx_encoder import OnnxDurationPredictor, duration_cache_path, export_duration_predictor
from libs.models.piper_import import PiperVoiceModels
from libs.models.vits import VitsAcoustic, VitsConfig, piper_medium_config, synthesis_generator
from libs.voice.acoustic_engine import AcousticEngine, SynthesisParams, encoder_version_part
from tests.test_onnx_encoder import ID_RUNS
from tests.test_streaming_exact import LONG_IDS, SHORT_IDS

TOLERANCE = 1e-4


@pytest.fixture(scope="module")
def duration_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("duration-cache")


@pytest.fixture(scope="module")
def exported(voice: PiperVoiceModels, duration_cache: Path) -> OnnxDurationPredictor:
    return OnnxDurationPredictor.load(voice.acoustic, cache_dir=duration_cache)


@pytest.mark.parametrize("noise_w", [0.0, 0.8])
@pytest.mark.parametrize("name", ["short", "161", "301"])
def test_onnxruntime_log_durations_equal_torch(
    voice: PiperVoiceModels, exported: OnnxDurationPredictor, name: str, noise_w: float
) -> None:
    acoustic = voice.acoustic
    with torch.inference_mode():
        encoded = acoustic.encode(torch.tensor([ID_RUNS[name]]))
        noise = acoustic.duration_noise(encoded, synthesis_generator(7), noise_w)
        reference = acoustic.dp.sample_log_durations(encoded.hidden, encoded.x_mask, noise)
        logw = exported.log_durations(encoded.hidden, noise)
    assert logw.shape == reference.shape == (1, 1, len(ID_RUNS[name]))
    assert logw.dtype == torch.float32
    assert float((logw - reference).abs().max()) <= TOLERANCE


def test_second_load_reads_the_cached_file_without_exporting(
    voice: PiperVoiceModels, duration_cache: Path, exported: OnnxDurationPredictor
) -> None:
    written_ns = exported.cache_path.stat().st_mtime_ns
    again = OnnxDurationPredictor.load(voice.acoustic, cache_dir=duration_cache)
    assert exported.exported and not again.exported
    assert again.cache_path == exported.cache_path and again.cache_path.parent == duration_cache
    assert again.cache_path.stat().st_mtime_ns == written_ns
    hidden, noise = torch.randn(1, 192, 40), torch.randn(1, 2, 40)
    assert torch.equal(again.log_durations(hidden, noise), exported.log_durations(hidden, noise))


def test_cache_key_ignores_the_training_only_weights(voice: PiperVoiceModels, tmp_path: Path) -> None:
    # An imported Piper voice leaves these at their random initial values, different in every process.
    other = copy.deepcopy(voice.acoustic)
    with torch.no_grad():
        other.dp.post_pre.weight.add_(1.0)
        other.dp.flows[1].proj.bias.add_(1.0)
    assert duration_cache_path(other, tmp_path) == duration_cache_path(voice.acoustic, tmp_path)
    with torch.no_grad():
        other.dp.pre.bias.add_(1.0)
    assert duration_cache_path(other, tmp_path) != duration_cache_path(voice.acoustic, tmp_path)


def test_cached_graph_that_disagrees_with_the_weights_is_rebuilt(voice: PiperVoiceModels, tmp_path: Path) -> None:
    torch.manual_seed(0)
    other = VitsAcoustic(voice.acoustic.config).eval()
    # A zero-initialised spline flow is the identity: give the stray graph weights that matter.
    with torch.no_grad():
        for flow in other.dp.flows[3::2]:
            flow.proj.weight.normal_(0.0, 0.1)
    duration_cache_path(voice.acoustic, tmp_path).write_bytes(export_duration_predictor(other))
    rebuilt = OnnxDurationPredictor.load(voice.acoustic, cache_dir=tmp_path)
    assert rebuilt.exported
    with torch.inference_mode():
        encoded = voice.acoustic.encode(torch.tensor([SHORT_IDS]))
        noise = voice.acoustic.duration_noise(encoded, synthesis_generator(3), 0.8)
        reference = voice.acoustic.dp.sample_log_durations(encoded.hidden, encoded.x_mask, noise)
        assert float((rebuilt.log_durations(encoded.hidden, noise) - reference).abs().max()) <= TOLERANCE


@pytest.mark.parametrize("noise_w", [0.0, 0.8])
def test_engine_plan_with_onnxruntime_encoder_and_durations_gives_the_torch_durations(noise_w: float) -> None:
    torch.set_num_threads(1)
    engine = AcousticEngine.load_default()
    twin = AcousticEngine(
        engine.acoustic,
        engine.mel_head,
        voice_name=engine.voice_name,
        model_version=engine.model_version,
        sample_rate_hz=engine.sample_rate_hz,
        hop_length=engine.hop_length,
        encoder_backend="torch",
    )
    assert engine._onnx_durations is not None and twin._onnx_durations is None
    assert (engine.encoder_backend, twin.encoder_backend) == ("onnxruntime", "torch")
    for ids in (SHORT_IDS, LONG_IDS):
        params = SynthesisParams(noise_w=noise_w)
        seed = engine.synthesis_seed(ids, params)
        plan, reference = engine.plan(ids, params, seed), twin.plan(ids, params, seed)
        assert plan.phoneme_frames == reference.phoneme_frames
        # Same frames and the same later draws: the prior noise comes from the same place in the stream.
        assert float((plan.z_p - reference.z_p).abs().max()) <= TOLERANCE


def test_only_single_speaker_stochastic_predictors_leave_torch() -> None:
    medium = piper_medium_config()
    deterministic = VitsConfig(duration_predictor="deterministic")
    multi_speaker = piper_medium_config(n_speakers=4, gin_channels=16)
    assert encoder_version_part(medium, "onnxruntime") == "encoder=onnxruntime+sdp"
    assert encoder_version_part(medium, "torch") == "encoder=torch"
    assert encoder_version_part(deterministic, "onnxruntime") == "encoder=onnxruntime"
    assert encoder_version_part(multi_speaker, "onnxruntime") == "encoder=onnxruntime"
    tiny = VitsConfig(n_vocab=16, hidden_channels=16, inter_channels=16, filter_channels=32, n_speakers=2, gin_channels=8)
    with pytest.raises(ValueError, match="speaker-conditioned"):
        export_duration_predictor(VitsAcoustic(tiny).eval())
