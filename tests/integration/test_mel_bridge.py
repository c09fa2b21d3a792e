"""The mel head and mel adapter: exact chunking, the committed weights, and real output quality."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from libs.audio.mel import mel_spectrogram
from libs.models.mel_bridge import (
    ConvStack,
    MelAdapter,
    MelHead,
    MelVocoder,
    load_mel_adapter,
    load_mel_head,
)
from libs.models.voice_files import MEL_ADAPTER_FILE, MEL_HEAD_FILE

VOICE_DIR = Path(__file__).resolve().parents[2] / "assets" / "voices" / "en_US-joe-medium"
HELDOUT_TEXT = "The weather forecast promises sunshine for the rest of the week."
# Log-mel L1 (nats per band and frame) that the trained full path stays under on a held-out
# sentence; measured about 0.30 for trained weights and 1.8 for untrained ones.
FULL_PATH_MEL_L1_BOUND = 0.5
FLOAT32_RELATIVE_TOLERANCE = 2e-6


def _randomised(module: ConvStack, seed: int) -> ConvStack:
    """`module` with its random initial weights, random biases and non-trivial standardisation."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in module.named_parameters():
            if name.endswith("bias"):
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.1)
            else:
                # Default init shrinks the signal along the stack; this keeps every layer's reach visible.
                parameter.mul_(1.5)
        module.input_mean.copy_(torch.randn(module.input_mean.shape, generator=generator))
        module.input_std.copy_(torch.rand(module.input_std.shape, generator=generator) + 0.5)
        module.output_mean.copy_(torch.randn(module.output_mean.shape, generator=generator))
        module.output_std.copy_(torch.rand(module.output_std.shape, generator=generator) + 0.5)
    return module.eval()


def _chunked(module: ConvStack, features: torch.Tensor, chunk_frames: int, context_frames: int) -> torch.Tensor:
    """Run `module` chunk by chunk, each with up to `context_frames` of real input on both sides."""
    total = features.shape[-1]
    pieces = []
    for start in range(0, total, chunk_frames):
        stop = min(total, start + chunk_frames)
        left, right = max(0, start - context_frames), min(total, stop + context_frames)
        out = module(features[..., left:right])
        pieces.append(out[..., start - left : start - left + (stop - start)])
    return torch.cat(pieces, dim=-1)


@pytest.mark.parametrize("module_type", [MelHead, MelAdapter])
def test_chunked_inference_with_receptive_field_context_equals_whole_sequence(module_type: type[ConvStack]) -> None:
    # float64, so any difference left would be structural (missing context), not round-off.
    torch.manual_seed(0)
    module = _randomised(module_type(), seed=1).double()
    features = torch.randn(1, module.config.in_channels, 123, dtype=torch.float64) * 2.0
    with torch.no_grad():
        whole = module(features)
        for chunk_frames in (1, 4, 17, 50):
            chunked = _chunked(module, features, chunk_frames, module.receptive_field_frames)
            assert chunked.shape == whole.shape
            assert (chunked - whole).abs().max().item() <= 1e-10


def test_chunked_trained_full_path_in_float32_matches_whole_sentence(teacher_voice) -> None:
    from libs.models.vits import synthesis_generator
    from scripts.voice.teacher import phoneme_id_sentences

    head = load_mel_head(VOICE_DIR / MEL_HEAD_FILE)
    adapter = load_mel_adapter(VOICE_DIR / MEL_ADAPTER_FILE)
    (ids,) = phoneme_id_sentences(HELDOUT_TEXT)
    with torch.no_grad():
        z = teacher_voice.acoustic.infer(torch.tensor([ids]), synthesis_generator(7)).z
        whole_mel = head(z)
        chunked_mel = _chunked(head, z, 4, head.receptive_field_frames)
        whole_latent = adapter(whole_mel)
        chunked_latent = _chunked(adapter, chunked_mel, 4, adapter.receptive_field_frames)
    # Equal to float32 round-off (the latent peaks near 40, so absolute 1e-5 is below its ulp range).
    assert (chunked_mel - whole_mel).abs().max().item() <= FLOAT32_RELATIVE_TOLERANCE * whole_mel.abs().max().item()
    assert (chunked_latent - whole_latent).abs().max().item() <= FLOAT32_RELATIVE_TOLERANCE * whole_latent.abs().max().item()


@pytest.mark.parametrize("module_type", [MelHead, MelAdapter])
def test_one_frame_less_context_than_the_receptive_field_changes_the_output(module_type: type[ConvStack]) -> None:
    torch.manual_seed(0)
    module = _randomised(module_type(), seed=2).double()
    features = torch.randn(1, module.config.in_channels, 80, dtype=torch.float64) * 2.0
    with torch.no_grad():
        whole = module(features)
        short = _chunked(module, features, 10, module.receptive_field_frames - 1)
    assert (short - whole).abs().max().item() > 1e-3


@pytest.mark.parametrize("module_type", [MelHead, MelAdapter])
def test_padded_batch_with_lengths_gives_each_item_its_solo_output(module_type: type[ConvStack]) -> None:
    torch.manual_seed(0)
    module = _randomised(module_type(), seed=3)
    short, long = torch.randn(1, module.config.in_channels, 29), torch.randn(1, module.config.in_channels, 47)
    batch = torch.cat([torch.nn.functional.pad(short, (0, 18), value=5.0), long])
    with torch.no_grad():
        out = module(batch, torch.tensor([29, 47]))
        assert (out[0, :, :29] - module(short)[0]).abs().max().item() <= 1e-5
        assert (out[1] - module(long)[0]).abs().max().item() <= 1e-5
        assert out[0, :, 29:].abs().max().item() == 0.0


def test_receptive_fields_are_small_and_exact() -> None:
    assert MelHead().receptive_field_frames == 6
    assert MelAdapter().receptive_field_frames == 10


def test_committed_weights_load_with_their_configs() -> None:
    head = load_mel_head(VOICE_DIR / MEL_HEAD_FILE)
    adapter = load_mel_adapter(VOICE_DIR / MEL_ADAPTER_FILE)
    assert (head.config.in_channels, head.config.out_channels) == (192, 80)
    assert (adapter.config.in_channels, adapter.config.out_channels) == (80, 192)
    # Trained standardisation: log-mel means are negative (quiet bands), latent stds are not 1.
    assert head.output_mean.mean().item() < -1.0
    assert not torch.allclose(adapter.output_std, torch.ones_like(adapter.output_std))
    assert sum(p.numel() for p in head.parameters()) < 2_000_000
    assert sum(p.numel() for p in adapter.parameters()) < 2_000_000


@pytest.fixture(scope="module")
def teacher_voice(tmp_path_factory: pytest.TempPathFactory):
    from scripts.voice.teacher import load_teacher_voice

    return load_teacher_voice(cache_dir=tmp_path_factory.mktemp("piper-cache"))


def _full_path_mel_l1(voice, head: MelHead, adapter: MelAdapter) -> tuple[float, float]:
    """(full-path L1, head-only L1) against the mel of Piper's own audio from the same latent."""
    from libs.models.vits import synthesis_generator
    from scripts.voice.teacher import phoneme_id_sentences

    (ids,) = phoneme_id_sentences(HELDOUT_TEXT)
    with torch.no_grad():
        z = voice.acoustic.infer(torch.tensor([ids]), synthesis_generator(42)).z
        reference = mel_spectrogram(voice.decoder(z)[0, 0])
        predicted_mel = head(z)
        audio = MelVocoder(adapter, voice.decoder)(predicted_mel)[0]
    assert audio.shape[-1] == z.shape[-1] * 256
    return (mel_spectrogram(audio) - reference).abs().mean().item(), (predicted_mel[0] - reference).abs().mean().item()


def test_full_path_on_a_heldout_sentence_gives_a_mel_close_to_the_teachers(teacher_voice) -> None:
    from scripts.voice.corpus import heldout_sentences

    assert HELDOUT_TEXT in heldout_sentences()
    head = load_mel_head(VOICE_DIR / MEL_HEAD_FILE)
    adapter = load_mel_adapter(VOICE_DIR / MEL_ADAPTER_FILE)
    full_l1, head_l1 = _full_path_mel_l1(teacher_voice, head, adapter)
    assert full_l1 < FULL_PATH_MEL_L1_BOUND
    assert head_l1 < FULL_PATH_MEL_L1_BOUND

    # The same bound rejects untrained networks that keep the trained standardisation.
    torch.manual_seed(0)
    untrained_head, untrained_adapter = MelHead().eval(), MelAdapter().eval()
    untrained_head.load_state_dict({**untrained_head.state_dict(), **{k: v for k, v in head.state_dict().items() if "_mean" in k or "_std" in k}})
    untrained_adapter.load_state_dict({**untrained_adapter.state_dict(), **{k: v for k, v in adapter.state_dict().items() if "_mean" in k or "_std" in k}})
    untrained_l1, _ = _full_path_mel_l1(teacher_voice, untrained_head, untrained_adapter)
    assert untrained_l1 > 2 * FULL_PATH_MEL_L1_BOUND
