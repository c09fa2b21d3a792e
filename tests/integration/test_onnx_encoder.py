"""The text encoder in onnxruntime: torch's numbers, exported once, then read back from the cache."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from libs.models.mel_bridge import ConvStackConfig, MelHead, MelHeadConfig
from libs.models.onnx_encoder import OnnxTextEncoder, encoder_cache_path, export_text_encoder
from libs.models.piper_import import CACHE_DIR_ENV, PiperVoiceModels
from libs.models.vits import EncoderOutput, VitsAcoustic, VitsConfig, piper_medium_config
from libs.voice.acoustic_engine import default_encoder_backend
from libs.voice.engine import AcousticEngine, EngineSettings, SynthesisParams
from tests.integration.test_streaming_exact import LONG_IDS, SHORT_IDS

TOLERANCE = 1e-4
BASE_IDS = [0, 20, 0, 59, 0, 24, 0, 27, 0, 3, 0, 35, 0, 27, 0, 30, 0, 24, 0, 17, 0, 8, 0, 3]
ID_RUNS = {
    "one": [1],
    "three": [1, 0, 2],
    "short": SHORT_IDS,
    "161": [1, *(BASE_IDS * 7)[:158], 0, 2],
    "301": [1, *(BASE_IDS * 13)[:298], 0, 2],
}


@pytest.fixture(scope="module")
def exported(voice: PiperVoiceModels, graph_cache: Path) -> OnnxTextEncoder:
    return OnnxTextEncoder.load(voice.acoustic, cache_dir=graph_cache)


def _max_difference(left: EncoderOutput, right: EncoderOutput) -> float:
    pairs = [(left.hidden, right.hidden), (left.m_p, right.m_p), (left.logs_p, right.logs_p)]
    for a, b in pairs:
        assert a.shape == b.shape
    return max(float((a - b).abs().max()) for a, b in pairs)


@pytest.mark.parametrize("name", list(ID_RUNS))
def test_onnxruntime_encoder_equals_torch_encode(voice: PiperVoiceModels, exported: OnnxTextEncoder, name: str) -> None:
    ids = torch.tensor([ID_RUNS[name]])
    with torch.inference_mode():
        reference = voice.acoustic.encode(ids)
        output = exported.encode(ids)
    assert _max_difference(output, reference) <= TOLERANCE
    assert output.hidden.dtype == output.m_p.dtype == output.logs_p.dtype == torch.float32
    assert torch.equal(output.x_mask, reference.x_mask)
    assert torch.equal(output.lengths, reference.lengths)
    assert output.g is None and reference.g is None


@pytest.mark.parametrize("name", ["short", "301"])
def test_both_cores_give_the_same_numbers_bit_for_bit(exported: OnnxTextEncoder, name: str) -> None:
    ids = torch.tensor([ID_RUNS[name]])
    wide, lean = exported.encode(ids, wide=True), exported.encode(ids)
    assert torch.equal(wide.hidden, lean.hidden) and torch.equal(wide.m_p, lean.m_p) and torch.equal(wide.logs_p, lean.logs_p)


def test_export_leaves_the_callers_model_in_eval_mode(voice: PiperVoiceModels, exported: OnnxTextEncoder) -> None:
    assert not any(module.training for module in voice.acoustic.modules())


def load_again_from_the_cache(first: Any, load: Callable[[], Any], folder: Path) -> Any:
    """`load()` after `first` exported a graph into `folder`: it must read that file, untouched."""
    written_ns = first.cache_path.stat().st_mtime_ns
    again = load()
    assert first.exported and not again.exported
    assert again.cache_path == first.cache_path and again.cache_path.parent == folder
    assert again.cache_path.stat().st_mtime_ns == written_ns
    return again


def test_second_load_reads_the_cached_file_without_exporting(
    voice: PiperVoiceModels, graph_cache: Path, exported: OnnxTextEncoder
) -> None:
    again = load_again_from_the_cache(exported, lambda: OnnxTextEncoder.load(voice.acoustic, cache_dir=graph_cache), graph_cache)
    ids = torch.tensor([SHORT_IDS])
    assert torch.equal(again.encode(ids).m_p, exported.encode(ids).m_p)


def test_corrupt_cache_file_is_rebuilt(voice: PiperVoiceModels, tmp_path: Path) -> None:
    path = encoder_cache_path(voice.acoustic, tmp_path)
    path.write_bytes(b"not an onnx model")
    rebuilt = OnnxTextEncoder.load(voice.acoustic, cache_dir=tmp_path)
    assert rebuilt.exported and rebuilt.cache_path == path
    ids = torch.tensor([LONG_IDS])
    with torch.inference_mode():
        assert _max_difference(rebuilt.encode(ids), voice.acoustic.encode(ids)) <= TOLERANCE
    assert not OnnxTextEncoder.load(voice.acoustic, cache_dir=tmp_path).exported


def test_cache_that_cannot_be_written_still_gives_a_working_encoder(voice: PiperVoiceModels, tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_bytes(b"")
    encoder = OnnxTextEncoder.load(voice.acoustic, cache_dir=blocker / "cache")
    assert encoder.exported and not encoder.cache_path.exists()
    ids = torch.tensor([SHORT_IDS])
    with torch.inference_mode():
        assert _max_difference(encoder.encode(ids), voice.acoustic.encode(ids)) <= TOLERANCE


def test_cached_graph_that_disagrees_with_the_weights_is_rebuilt(voice: PiperVoiceModels, tmp_path: Path) -> None:
    torch.manual_seed(0)
    other = VitsAcoustic(voice.acoustic.config).eval()
    encoder_cache_path(voice.acoustic, tmp_path).write_bytes(export_text_encoder(other))
    rebuilt = OnnxTextEncoder.load(voice.acoustic, cache_dir=tmp_path)
    assert rebuilt.exported
    ids = torch.tensor([SHORT_IDS])
    with torch.inference_mode():
        assert _max_difference(rebuilt.encode(ids), voice.acoustic.encode(ids)) <= TOLERANCE


def test_multi_speaker_voice_keeps_its_speaker_with_the_onnxruntime_encoder(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv(CACHE_DIR_ENV, str(tmp_path))
    torch.manual_seed(0)
    config = VitsConfig(n_vocab=128, hidden_channels=32, inter_channels=32, filter_channels=64, n_speakers=3, gin_channels=16)
    acoustic = VitsAcoustic(config).eval()
    # float32 wherever the engine could choose: streamed against whole is compared at fp32 round-off
    # (bf16's own exactness is tests/integration/test_resume_exact_bf16.py's; its round-off is not
    # the same for a chunk as for the whole sentence on every CPU).
    common = dict(voice_name="tiny", model_version="tiny", sample_rate_hz=22050, hop_length=256, settings=EngineSettings(precision="fp32"))
    head = MelHead(MelHeadConfig(ConvStackConfig(in_channels=32, out_channels=80))).eval()
    engine = AcousticEngine(acoustic, head, **common)
    twin = AcousticEngine(acoustic, head, **common, encoder_backend="torch")
    assert engine.encoder_backend == "onnxruntime"
    params = SynthesisParams(speaker_id=2)
    plan, reference = engine.plan(SHORT_IDS, params, seed=5), twin.plan(SHORT_IDS, params, seed=5)
    assert torch.equal(plan.g, reference.g)
    assert plan.phoneme_frames == reference.phoneme_frames
    assert float((plan.z_p - reference.z_p).abs().max()) <= TOLERANCE
    # The speaker conditions the streamed flow as it does the whole-sentence one.
    streamed = np.concatenate(list(engine.mel_chunks(plan)), axis=1)
    assert np.abs(streamed - engine.mel_whole(plan)).max() <= TOLERANCE


def test_gpu_engines_and_speaker_conditioned_encoders_keep_the_torch_encoder() -> None:
    conditioned = VitsConfig(n_speakers=2, gin_channels=16, use_spk_conditioned_encoder=True)
    assert default_encoder_backend(piper_medium_config(), "cpu") == "onnxruntime"
    assert default_encoder_backend(piper_medium_config(), "cuda") == "torch"
    assert default_encoder_backend(conditioned, "cpu") == "torch"
    tiny = VitsConfig(n_vocab=16, hidden_channels=16, inter_channels=16, filter_channels=32, n_speakers=2, gin_channels=8)
    with pytest.raises(ValueError, match="speaker-conditioned"):
        AcousticEngine(
            VitsAcoustic(VitsConfig(**{**tiny.to_dict(), "use_spk_conditioned_encoder": True})),
            MelHead(),
            voice_name="tiny",
            model_version="tiny",
            sample_rate_hz=22050,
            hop_length=256,
            encoder_backend="onnxruntime",
        )
