"""The fast tier's adversarial stage: seeded, checkpointed, a run that stops goes on from its checkpoint
to the very weights an unbroken run reaches, the discriminators learn to tell the teacher's audio
from the student's, and snapshots keep the student along the way. The bundle here is small and random
(structure only; the stage's effect on quality is measured by `scripts.voice.fast_tier --evaluate`)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import torch

from libs.audio.mel import MelConfig, mel_filterbank
from libs.models.discriminators import DiscriminatorConfig, Discriminators, discriminator_loss
from libs.models.hifigan import Generator
from libs.models.mel_bridge import ConvStackConfig, MelAdapter, MelAdapterConfig, MelVocoder
from scripts.voice.fast_tier import STUDENT, adversarial_manifest
from scripts.voice.fast_tier_adversarial import LOSS_MEL_FMAX_HZ, STAGE_RECORD_FILE, AdversarialConfig, LossMel, train_adversarial

TINY_DISCRIMINATORS = DiscriminatorConfig(periods=(2, 3), period_channels=(4, 8, 8), scales=2, scale_channels=(4, 4, 8, 8, 16, 16, 16))
SMALL = AdversarialConfig(
    steps=4, batch_size=2, segment_frames=8, context_frames=4, checkpoint_every=2, discriminator_warmup_steps=1, discriminators=TINY_DISCRIMINATORS
)
STUDENT_SHAPE = replace(STUDENT, upsample_initial_channel=16)
QUALITY_SHAPE = replace(STUDENT, in_channels=8, upsample_initial_channel=16)


def _bundle() -> dict:
    torch.manual_seed(0)
    adapter = MelAdapter(MelAdapterConfig(stack=ConvStackConfig(in_channels=80, out_channels=8, hidden_channels=8, block_dilations=(1,))))
    quality = MelVocoder(adapter, Generator(QUALITY_SHAPE))
    student = Generator(STUDENT_SHAPE)
    generator = torch.Generator().manual_seed(1)
    return {
        "mels": [torch.randn(80, 30, generator=generator).half() for _ in range(3)],
        "quality": quality.state_dict(),
        "quality_decoder": QUALITY_SHAPE.to_dict(),
        "quality_adapter": adapter.config.to_dict(),
        "loss_filterbank": mel_filterbank(MelConfig(fmax_hz=LOSS_MEL_FMAX_HZ)),
        "student": student.state_dict(),
        "student_config": STUDENT_SHAPE.to_dict(),
        "student_step": 14,
    }


def _train(work_dir: Path, until_step: int | None = None, log=lambda line: None, **kwargs) -> dict:  # type: ignore[no-untyped-def]
    work_dir.mkdir(parents=True, exist_ok=True)
    return train_adversarial(SMALL, _bundle(), work_dir, torch.device("cpu"), until_step=until_step, log=log, **kwargs).state_dict()


def test_a_stopped_adversarial_run_resumes_to_the_weights_of_an_unbroken_one(tmp_path: Path) -> None:
    torch.set_num_threads(1)
    unbroken = _train(tmp_path / "a")
    _train(tmp_path / "b", until_step=2)
    said: list[str] = []
    resumed = _train(tmp_path / "b", log=said.append)
    assert "resumed at step 2" in said
    assert all(torch.equal(unbroken[name], resumed[name]) for name in unbroken)
    assert not all(torch.equal(unbroken[name], _bundle()["student"][name]) for name in unbroken), "training changed nothing"


def test_the_student_is_left_alone_while_the_discriminators_warm_up(tmp_path: Path) -> None:
    torch.set_num_threads(1)
    warming = _train(tmp_path / "work", until_step=1)
    assert all(torch.equal(warming[name], _bundle()["student"][name]) for name in warming)


def test_snapshots_keep_the_student_at_the_steps_asked(tmp_path: Path) -> None:
    torch.set_num_threads(1)
    final = _train(tmp_path / "work", snapshot_every=2, snapshot_dir=tmp_path / "snapshots")
    assert sorted(path.name for path in (tmp_path / "snapshots").iterdir()) == [STAGE_RECORD_FILE, "student-000002.pt", "student-000004.pt"]
    record = json.loads((tmp_path / "snapshots" / STAGE_RECORD_FILE).read_text())
    assert record["config"] == SMALL.to_dict() and record["student_step"] == 14 and record["machine"].startswith("cpu, ")
    manifest = "\n".join(adversarial_manifest(tmp_path / "snapshots", tmp_path / "snapshots" / "student-000004.pt"))
    assert "`student-000004.pt`" in manifest and record["machine"] in manifest and '"discriminator_warmup_steps": 1' in manifest
    last = torch.load(tmp_path / "snapshots" / "student-000004.pt", weights_only=True)
    assert all(torch.equal(final[name], last[name]) for name in final)


def test_discriminators_learn_to_tell_real_audio_from_generated() -> None:
    torch.manual_seed(0)
    discriminators = Discriminators(TINY_DISCRIMINATORS)
    optimiser = torch.optim.Adam(discriminators.parameters(), lr=2e-3)
    time_s = torch.arange(4096) / 22050
    real = torch.stack([0.5 * torch.sin(2 * torch.pi * (150 + 50 * index) * time_s) for index in range(4)])
    fake = 0.3 * torch.randn(4, 4096)
    first = None
    for _ in range(150):
        loss = discriminator_loss(discriminators(real)[0], discriminators(fake)[0])
        first = loss.item() if first is None else first
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
    assert loss.item() < 0.25 * first
    real_scores, features = discriminators(real)
    fake_scores, _ = discriminators(fake)
    assert len(real_scores) == len(features) == 2 + 2
    assert all(real.mean() > fake.mean() + 0.5 for real, fake in zip(real_scores, fake_scores, strict=False)), "every sub-discriminator tells them apart"


def test_the_loss_mel_matches_the_served_mel_recipe_on_its_band() -> None:
    from libs.audio.mel import mel_spectrogram

    audio = 0.1 * torch.randn(2, 8192, generator=torch.Generator().manual_seed(3))
    served = mel_spectrogram(audio)
    same_band = LossMel(mel_filterbank(MelConfig()))(audio)
    assert torch.allclose(served, same_band, atol=1e-4)
