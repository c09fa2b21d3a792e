"""The fast tier's second training stage: the student vocoder (distilled by scripts.voice.fast_tier with
spectral losses alone) trained on as a GAN, with HiFi-GAN's discriminators, feature matching and mel
loss, against the quality tier's audio of the served mel.

Spectral losses alone leave a student's audio smoother and buzzier than its teacher's (HiFi-GAN V3
without its period discriminator fell from MOS 4.10 to 2.28); the discriminators are what teach the
fine structure. The stage runs where the device allows (`--device cuda` on a GPU: minutes; the CPU:
hours), from one file, the bundle, that `--bundle-only` writes here: the served mel of every teacher
rendering (float16), the quality tier's weights, the loss mel's filters and the distilled student. So
a machine without the voice package, espeak-ng or librosa can run it. The quality tier's audio of each
mel is made where the stage runs.

Every batch and learning rate follow from the step's number; the stage's checkpoint (student,
discriminators, both optimisers) is written every `checkpoint_every` steps into the work folder, and a
run goes on from it. It is not committed (the discriminators are 18 MB with 37 MB of optimiser state):
a later sitting on another machine starts the stage over from the distilled student. `--snapshot-every`
keeps the student's weights along the way, with a record of the stage (STAGE_RECORD_FILE: its settings
and the machine), so the step that is installed can be chosen by held-out quality
(`python -m scripts.voice.fast_tier --adversarial SNAPSHOT_DIR`). `--sitting-s` ends a sitting at a time
limit (checkpointed and snapshotted), as a lent GPU's is.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Final

import numpy as np
import torch
from torch import nn

from libs.audio.mel import mel_spectrogram
from libs.models.discriminators import (
    DiscriminatorConfig,
    Discriminators,
    discriminator_loss,
    feature_matching_loss,
    generator_adversarial_loss,
)
from libs.models.hifigan import Generator, GeneratorConfig
from libs.models.mel_bridge import ConvStackConfig, MelAdapter, MelAdapterConfig, MelVocoder
from scripts.voice.segments import segment_batch

BUNDLE_FILE: Final = "adversarial-bundle.pt"
CHECKPOINT_FILE: Final = "adversarial-checkpoint.pt"
STAGE_RECORD_FILE: Final = "stage.json"
"""Beside the snapshots: the stage's settings and the machine it ran on, for the voice's FAST_TIER.md."""
LOSS_MEL_FMAX_HZ: Final = 11025.0
"""The loss mel reaches Nyquist (HiFi-GAN's fmax_for_loss is None), unlike the served mel's 8 kHz: the
band above 8 kHz is where a student's hiss and buzz live."""


@dataclass(frozen=True)
class AdversarialConfig:
    """How the second stage trains."""

    steps: int = 12000
    """Steps of the stage, over which the learning rate decays."""
    batch_size: int = 16
    """Segments per step."""
    segment_frames: int = 32
    """Frames of each segment the discriminators and losses see (32 frames: HiFi-GAN's 8,192 samples)."""
    context_frames: int = 8
    """Frames of mel each side of a segment the student sees but is not scored on."""
    learning_rate: float = 2e-4
    """Peak learning rate of both optimisers (cosine decay over `steps`)."""
    mel_weight: float = 45.0
    """Weight of the full-band log-mel L1 in the student's loss (HiFi-GAN's)."""
    feature_matching_weight: float = 2.0
    """Weight of the discriminators' feature matching in the student's loss (HiFi-GAN's)."""
    discriminator_warmup_steps: int = 1000
    """Steps at the start in which only the discriminators learn: three steps of a student against
    untrained discriminators cost it 0.11 DNSMOS on held-out texts here."""
    seed: int = 11
    """Seed of the discriminators' initial weights and of every step's batch."""
    checkpoint_every: int = 1000
    """Steps between checkpoints in the work folder."""
    discriminators: DiscriminatorConfig = field(default_factory=DiscriminatorConfig)
    """Their widths."""

    def to_dict(self) -> dict:
        """Plain JSON-ready dict (tuples as lists, as a checkpoint read back has them)."""
        return json.loads(json.dumps(asdict(self)))

    def learning_rate_at(self, step: int) -> float:
        """Both optimisers' learning rate at `step`: a cosine decay from the peak over `steps`."""
        return self.learning_rate * 0.5 * (1 + np.cos(np.pi * min(step, self.steps) / self.steps))


class LossMel(nn.Module):
    """The mel recipe (libs.audio.mel) with filters of its own, kept on the module's device: the loss's view of audio."""

    def __init__(self, filterbank: torch.Tensor) -> None:
        super().__init__()
        self.register_buffer("filterbank", filterbank.float())

    def forward(self, audio: torch.Tensor) -> torch.Tensor:
        """Waveforms [B, samples] -> log-mel [B, n_mels, frames]."""
        return mel_spectrogram(audio, filterbank=self.filterbank)


def write_bundle(work_dir: Path, student_checkpoint: Path) -> Path:
    """Write the stage's one input file (see the module's docstring) from the first stage's cached teacher data."""
    from libs.audio.mel import MelConfig, mel_filterbank
    from scripts.voice.fast_tier import FastTierConfig, load_quality_vocoder, teacher_pairs

    pairs = teacher_pairs(FastTierConfig(), work_dir)
    quality = load_quality_vocoder(work_dir)
    distilled = torch.load(student_checkpoint, weights_only=False)
    bundle = {
        "mels": [mel.half() for mel, _ in pairs],
        "quality": quality.state_dict(),
        "quality_decoder": quality.decoder.config.to_dict(),
        "quality_adapter": quality.adapter.config.to_dict(),
        "loss_filterbank": mel_filterbank(MelConfig(fmax_hz=LOSS_MEL_FMAX_HZ)),
        "student": distilled["model"],
        "student_config": distilled["config"]["model"],
        "student_step": int(distilled["step"]),
    }
    path = work_dir / BUNDLE_FILE
    torch.save(bundle, path)
    return path


def quality_vocoder(bundle: dict) -> MelVocoder:
    adapter = MelAdapter(MelAdapterConfig(stack=ConvStackConfig.from_dict(bundle["quality_adapter"])))
    vocoder = MelVocoder(adapter, Generator(GeneratorConfig.from_dict(bundle["quality_decoder"])))
    vocoder.load_state_dict(bundle["quality"])
    return vocoder.eval()


@torch.inference_mode()
def teacher_audio(bundle: dict, device: torch.device, log=print) -> list[tuple[torch.Tensor, torch.Tensor]]:  # type: ignore[no-untyped-def]
    """(mel [80, T] float32, the quality tier's audio of it [T * 256]) on `device`, for every mel of the bundle."""
    quality = quality_vocoder(bundle).to(device)
    started = time.perf_counter()
    pairs = []
    for mel in bundle["mels"]:
        mel = mel.float().to(device)
        pairs.append((mel, quality(mel[None])[0]))
    audio_s = sum(audio.numel() for _, audio in pairs) / 22050
    log(f"teacher audio: {len(pairs)} mels, {audio_s:.0f} s of audio in {time.perf_counter() - started:.1f} s")
    return pairs


def train_adversarial(  # type: ignore[no-untyped-def]
    config: AdversarialConfig,
    bundle: dict,
    work_dir: Path,
    device: torch.device,
    *,
    until_step: int | None = None,
    snapshot_every: int = 0,
    snapshot_dir: Path | None = None,
    sitting_s: float | None = None,
    log=print,
) -> Generator:
    """Train (or go on from the work folder's checkpoint) to `config.steps` or `until_step`, or until
    `sitting_s` seconds have passed (checkpointed and snapshotted there); returns the student. On a GPU
    the convolutions' fastest algorithms are chosen, so a GPU sitting is seeded but not bit-reproducible."""
    torch.manual_seed(config.seed)
    pairs = teacher_audio(bundle, device, log)
    # Only now: the teacher's pass has a shape per mel, and cuDNN would time its algorithms for each one.
    torch.backends.cudnn.benchmark = device.type == "cuda"
    generator = Generator(GeneratorConfig.from_dict(bundle["student_config"])).to(device)
    generator.load_state_dict(bundle["student"])
    discriminators = Discriminators(config.discriminators).to(device)
    loss_mel = LossMel(bundle["loss_filterbank"]).to(device)
    betas = (0.8, 0.99)
    optimiser_g = torch.optim.AdamW(generator.parameters(), lr=config.learning_rate, betas=betas, weight_decay=0.0)
    optimiser_d = torch.optim.AdamW(discriminators.parameters(), lr=config.learning_rate, betas=betas, weight_decay=0.0)
    work_dir.mkdir(parents=True, exist_ok=True)
    checkpoint = work_dir / CHECKPOINT_FILE
    step = 0
    if checkpoint.exists():
        state = torch.load(checkpoint, map_location=device, weights_only=False)
        if state["config"] == config.to_dict() and state["student_step"] == bundle["student_step"]:
            generator.load_state_dict(state["generator"])
            discriminators.load_state_dict(state["discriminators"])
            optimiser_g.load_state_dict(state["optimiser_g"])
            optimiser_d.load_state_dict(state["optimiser_d"])
            step = int(state["step"])
            log(f"resumed at step {step}")
    if snapshot_dir is not None and snapshot_every:
        write_stage_record(snapshot_dir, config, device, bundle["student_step"])
    hop, context = generator.config.hop_length, config.context_frames
    last = config.steps if until_step is None else min(until_step, config.steps)
    generator.train()
    discriminators.train()
    started = time.perf_counter()
    while step < last:
        for optimiser in (optimiser_g, optimiser_d):
            for group in optimiser.param_groups:
                group["lr"] = config.learning_rate_at(step)
        rng = random.Random(f"{config.seed}-{step}")
        mel, real = segment_batch(pairs, config.batch_size, config.segment_frames, context, hop, rng)
        fake = generator(mel)[:, 0, context * hop : (context + config.segment_frames) * hop]

        real_scores, _ = discriminators(real)
        fake_scores, _ = discriminators(fake.detach())
        loss_d = discriminator_loss(real_scores, fake_scores)
        optimiser_d.zero_grad(set_to_none=True)
        loss_d.backward()
        optimiser_d.step()

        _, real_features = discriminators(real)
        fake_scores, fake_features = discriminators(fake)
        adversarial = generator_adversarial_loss(fake_scores)
        matching = feature_matching_loss(real_features, fake_features)
        mel_l1 = (loss_mel(fake) - loss_mel(real)).abs().mean()
        loss_g = adversarial + config.feature_matching_weight * matching + config.mel_weight * mel_l1
        optimiser_g.zero_grad(set_to_none=True)
        if step >= config.discriminator_warmup_steps:
            loss_g.backward()
            optimiser_g.step()
        step += 1
        if sitting_s is not None and time.perf_counter() - started > sitting_s:
            last = step

        if step % 100 == 0 or step == last:
            log(f"step {step}/{config.steps}: d {loss_d.item():.3f} adv {adversarial.item():.3f} fm {matching.item():.3f} "
                f"mel {mel_l1.item():.4f} ({time.perf_counter() - started:.0f} s)")
        if snapshot_dir is not None and snapshot_every and (step % snapshot_every == 0 or step == last):
            snapshot_dir.mkdir(parents=True, exist_ok=True)
            torch.save({k: v.cpu() for k, v in generator.state_dict().items()}, snapshot_dir / f"student-{step:06d}.pt")
        if step % config.checkpoint_every == 0 or step == last:
            torch.save(
                {"generator": generator.state_dict(), "discriminators": discriminators.state_dict(), "optimiser_g": optimiser_g.state_dict(),
                 "optimiser_d": optimiser_d.state_dict(), "step": step, "config": config.to_dict(), "student_step": bundle["student_step"]},
                checkpoint,
            )
    return generator.cpu().eval()


def write_stage_record(snapshot_dir: Path, config: AdversarialConfig, device: torch.device, student_step: int) -> None:
    """STAGE_RECORD_FILE in `snapshot_dir`: the stage's settings and the machine that trains it."""
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or platform.machine()
    machine = f"{device.type}, {name}, torch {torch.__version__}"
    snapshot_dir.mkdir(parents=True, exist_ok=True)
    record = {"config": config.to_dict(), "machine": machine, "student_step": student_step}
    (snapshot_dir / STAGE_RECORD_FILE).write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work-dir", type=Path, default=Path("build") / "fast-tier")
    parser.add_argument("--bundle", type=Path, default=None, help=f"the stage's input (default: WORK_DIR/{BUNDLE_FILE})")
    parser.add_argument("--bundle-only", action="store_true", help="write the bundle from the first stage's teacher data and stop")
    parser.add_argument("--device", default="cpu", help="torch device to train on: cpu, cuda or cuda:N")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--steps", type=int, default=AdversarialConfig.steps)
    parser.add_argument("--batch-size", type=int, default=AdversarialConfig.batch_size)
    parser.add_argument("--until-step", type=int, default=None, help="stop (checkpointed) at this step; run again to go on")
    parser.add_argument("--snapshot-every", type=int, default=0, help="keep the student's weights every this many steps")
    parser.add_argument("--snapshot-dir", type=Path, default=None, help="where snapshots go (default: WORK_DIR/snapshots)")
    parser.add_argument("--sitting-s", type=float, default=None, help="end this sitting (checkpointed) after this many seconds")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    args.work_dir.mkdir(parents=True, exist_ok=True)
    if args.bundle_only:
        from libs.voice.assets import default_voice_assets
        from scripts.voice.fast_tier import CHECKPOINT_FILE as STUDENT_CHECKPOINT

        print(f"wrote {write_bundle(args.work_dir, default_voice_assets().trained_dir / STUDENT_CHECKPOINT)}")
        return 0
    bundle = torch.load(args.bundle or args.work_dir / BUNDLE_FILE, weights_only=False)
    config = AdversarialConfig(steps=args.steps, batch_size=args.batch_size)
    snapshot_dir = args.snapshot_dir or args.work_dir / "snapshots"
    train_adversarial(config, bundle, args.work_dir, torch.device(args.device), until_step=args.until_step,
                      snapshot_every=args.snapshot_every, snapshot_dir=snapshot_dir, sitting_s=args.sitting_s,
                      log=lambda line: print(line, flush=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
