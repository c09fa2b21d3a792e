"""Train the fast tier's vocoder for a voice: a frame-rate decoder ending in an inverse STFT
(libs/models/frame_vocoder.py), the student of the voice itself.

`python -m scripts.voice.fast_tier --steps 4000` renders teacher data once (the voice's own latents
and audio for the training corpus; cached in the work folder), then trains the student to turn the
mel the served path makes (the mel head on the latent) into the voice's audio, with multi-resolution
STFT and log-mel losses. Every random draw is seeded. A checkpoint (weights, optimiser, step) is
written every `--checkpoint-every` steps to the work folder, and the run resumes from it: training
longer than one sitting goes on where it stopped. `--evaluate` scores the student against the
quality tier on the held-out sentences: DNSMOS and CPU seconds per audio second, one thread each.

Without a discriminator the student's audio is smoother than its teacher's (phase and fine structure
are what adversarial training adds); the scores say how far this gets. `--adversarial-steps N` goes on
from the reconstruction run's checkpoint with a multi-resolution spectrogram discriminator (least-
squares GAN and feature matching, the reconstruction losses kept), checkpointed and resumed alike.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import nn

from libs.audio.mel import mel_spectrogram
from libs.models.frame_vocoder import FrameVocoder, FrameVocoderConfig
from libs.models.mel_bridge import MEL_HEAD_FILE, load_mel_head, load_mel_vocoder
from libs.voice.assets import default_voice_assets
from scripts.voice.corpus import heldout_sentences, training_sentences
from scripts.voice.teacher import TeacherConfig, load_teacher_voice, make_teacher_data, phoneme_id_sentences, synthesize_latent
from scripts.voice.train import multi_resolution_stft_loss

WORK_DIR = Path("build") / "fast-tier"
STFT_RESOLUTIONS = ((512, 128), (1024, 256), (2048, 512))


@dataclass(frozen=True)
class FastTierConfig:
    """How the student is trained."""

    model: FrameVocoderConfig = field(default_factory=lambda: FrameVocoderConfig(channels=256, intermediate=768, layers=8))
    steps: int = 4000
    batch_size: int = 8
    segment_frames: int = 48
    """Frames of each training segment whose audio is scored."""
    context_frames: int = 16
    """Frames of mel each side of a segment the student sees but is not scored on."""
    learning_rate: float = 5e-4
    mel_weight: float = 1.0
    seed: int = 7
    checkpoint_every: int = 500
    teacher: TeacherConfig = field(default_factory=lambda: TeacherConfig(variants_per_sentence=2))


def teacher_pairs(config: FastTierConfig, work_dir: Path, log=print) -> list[tuple[torch.Tensor, torch.Tensor]]:  # type: ignore[no-untyped-def]
    """(served mel [80, T], the voice's audio [T * 256]) of every teacher rendering, cached on disk."""
    cache = work_dir / f"teacher-{config.teacher.variants_per_sentence}-{config.teacher.seed}.pt"
    if cache.exists():
        return torch.load(cache, weights_only=True)
    assets = default_voice_assets()
    voice = load_teacher_voice(cache_dir=work_dir / "piper-cache")
    head = load_mel_head(assets.trained_dir / MEL_HEAD_FILE)
    utterances = make_teacher_data(training_sentences(), config.teacher, voice, log)
    with torch.no_grad():
        pairs = [(head(utterance.latent[None])[0].contiguous(), utterance.audio.contiguous()) for utterance in utterances]
    work_dir.mkdir(parents=True, exist_ok=True)
    torch.save(pairs, cache)
    return pairs


def _batch(pairs: list[tuple[torch.Tensor, torch.Tensor]], config: FastTierConfig, rng: random.Random) -> tuple[torch.Tensor, torch.Tensor]:
    hop = config.model.hop_length
    width = config.segment_frames + 2 * config.context_frames
    mels, audios = [], []
    while len(mels) < config.batch_size:
        mel, audio = pairs[rng.randrange(len(pairs))]
        frames = mel.size(-1)
        if frames < width:
            continue
        start = rng.randrange(frames - width + 1)
        mels.append(mel[:, start : start + width])
        scored = start + config.context_frames
        audios.append(audio[scored * hop : (scored + config.segment_frames) * hop])
    return torch.stack(mels), torch.stack(audios)


def train(config: FastTierConfig, work_dir: Path = WORK_DIR, log=print, until_step: int | None = None) -> FrameVocoder:  # type: ignore[no-untyped-def]
    """Train (or go on training from the checkpoint) to `config.steps`, or only to `until_step` (a
    sitting shorter than the run: it checkpoints there); returns the student. Each step's batch and
    learning rate follow from the step's number alone, so a run that stops and resumes reaches the
    weights of one that never stopped."""
    torch.manual_seed(config.seed)
    pairs = teacher_pairs(config, work_dir, log)
    model = FrameVocoder(config.model)
    optimiser = torch.optim.AdamW(model.parameters(), lr=config.learning_rate, betas=(0.8, 0.99), weight_decay=0.01)
    checkpoint = work_dir / "checkpoint.pt"
    step = 0
    if checkpoint.exists():
        state = torch.load(checkpoint, weights_only=False)
        if state["config"] == asdict(config.model):
            model.load_state_dict(state["model"])
            optimiser.load_state_dict(state["optimiser"])
            step = int(state["step"])
            log(f"resumed at step {step}")
    hop, context = config.model.hop_length, config.context_frames
    started_s = time.perf_counter()
    model.train()
    last = config.steps if until_step is None else min(until_step, config.steps)
    while step < last:
        for group in optimiser.param_groups:  # cosine decay from the peak
            group["lr"] = config.learning_rate * 0.5 * (1 + np.cos(np.pi * step / config.steps))
        mel, target = _batch(pairs, config, random.Random(f"{config.seed}-{step}"))
        predicted = model(mel)[:, context * hop : (context + config.segment_frames) * hop]
        stft = multi_resolution_stft_loss(predicted, target, STFT_RESOLUTIONS)
        mel_loss = (mel_spectrogram(predicted) - mel_spectrogram(target)).abs().mean()
        loss = stft + config.mel_weight * mel_loss
        optimiser.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimiser.step()
        step += 1
        if step % 100 == 0 or step == config.steps:
            elapsed = time.perf_counter() - started_s
            log(f"step {step}/{config.steps}: stft {stft.item():.3f} mel {mel_loss.item():.3f} ({elapsed:.0f} s)")
        if step % config.checkpoint_every == 0 or step == last:
            torch.save({"model": model.state_dict(), "optimiser": optimiser.state_dict(), "step": step, "config": asdict(config.model)}, checkpoint)
    return model.eval()


class SpectrogramDiscriminator(nn.Module):
    """Judges one resolution's log-magnitude spectrogram with 2D convolutions (as UnivNet's and
    Vocos's multi-resolution discriminators do); returns its score map and its layers' features."""

    def __init__(self, n_fft: int, hop: int, channels: int = 32) -> None:
        super().__init__()
        self.n_fft, self.hop = n_fft, hop
        norm = nn.utils.parametrizations.weight_norm
        self.layers = nn.ModuleList([
            norm(nn.Conv2d(1, channels, (3, 9), padding=(1, 4))),
            norm(nn.Conv2d(channels, channels, (3, 9), stride=(1, 2), padding=(1, 4))),
            norm(nn.Conv2d(channels, channels, (3, 9), stride=(1, 2), padding=(1, 4))),
            norm(nn.Conv2d(channels, channels, (3, 3), padding=(1, 1))),
        ])  # fmt: skip
        self.out = norm(nn.Conv2d(channels, 1, (3, 3), padding=(1, 1)))

    def forward(self, audio: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
        spectrum = torch.stft(audio, self.n_fft, self.hop, window=torch.hann_window(self.n_fft), return_complex=True)
        x = spectrum.abs().clamp(min=1e-5).log().transpose(1, 2).unsqueeze(1)  # [B, 1, frames, bins]
        features = []
        for layer in self.layers:
            x = torch.nn.functional.leaky_relu(layer(x), 0.1)
            features.append(x)
        return self.out(x), features


def discriminators() -> nn.ModuleList:
    return nn.ModuleList(SpectrogramDiscriminator(n_fft, hop) for n_fft, hop in STFT_RESOLUTIONS)


def train_adversarial(config: FastTierConfig, steps: int, work_dir: Path = WORK_DIR, log=print, until_step: int | None = None) -> FrameVocoder:  # type: ignore[no-untyped-def]
    """Go on from the reconstruction checkpoint for `steps` adversarial steps (resumable as `train`)."""
    torch.manual_seed(config.seed)
    pairs = teacher_pairs(config, work_dir, log)
    model = FrameVocoder(config.model)
    judges = discriminators()
    base = torch.load(work_dir / "checkpoint.pt", weights_only=False)
    model.load_state_dict(base["model"])
    optimiser = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.8, 0.99), weight_decay=0.01)
    judge_optimiser = torch.optim.AdamW(judges.parameters(), lr=1e-4, betas=(0.8, 0.99), weight_decay=0.01)
    checkpoint = work_dir / "adversarial.pt"
    step = 0
    if checkpoint.exists():
        state = torch.load(checkpoint, weights_only=False)
        model.load_state_dict(state["model"])
        judges.load_state_dict(state["judges"])
        optimiser.load_state_dict(state["optimiser"])
        judge_optimiser.load_state_dict(state["judge_optimiser"])
        step = int(state["step"])
        log(f"resumed the adversarial run at step {step}")
    hop, context = config.model.hop_length, config.context_frames
    last = steps if until_step is None else min(until_step, steps)
    started_s = time.perf_counter()
    model.train()
    while step < last:
        mel, target = _batch(pairs, config, random.Random(f"{config.seed}-adversarial-{step}"))
        predicted = model(mel)[:, context * hop : (context + config.segment_frames) * hop]
        # The judges first, on the student's audio as it is now.
        judge_loss = predicted.new_zeros(())
        for judge in judges:
            real, _ = judge(target)
            fake, _ = judge(predicted.detach())
            judge_loss = judge_loss + ((real - 1) ** 2).mean() + (fake**2).mean()
        judge_optimiser.zero_grad(set_to_none=True)
        judge_loss.backward()
        judge_optimiser.step()
        # Then the student: fool them, match their features, and keep the reconstruction losses.
        adversarial = matching = predicted.new_zeros(())
        for judge in judges:
            fake, fake_features = judge(predicted)
            with torch.no_grad():
                _, real_features = judge(target)
            adversarial = adversarial + ((fake - 1) ** 2).mean()
            matching = matching + sum((f - r).abs().mean() for f, r in zip(fake_features, real_features, strict=True))
        stft = multi_resolution_stft_loss(predicted, target, STFT_RESOLUTIONS)
        mel_loss = (mel_spectrogram(predicted) - mel_spectrogram(target)).abs().mean()
        loss = adversarial + 2.0 * matching + 15.0 * mel_loss + stft
        optimiser.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimiser.step()
        step += 1
        if step % 50 == 0 or step == last:
            log(f"adversarial step {step}/{steps}: judges {judge_loss.item():.3f} fool {adversarial.item():.3f} "
                f"match {matching.item():.3f} mel {mel_loss.item():.3f} ({time.perf_counter() - started_s:.0f} s)")  # fmt: skip
        if step % 200 == 0 or step == last:
            torch.save(
                {"model": model.state_dict(), "judges": judges.state_dict(), "optimiser": optimiser.state_dict(),
                 "judge_optimiser": judge_optimiser.state_dict(), "step": step},
                checkpoint,
            )  # fmt: skip
    return model.eval()


def cpu_per_audio_second(vocode, mels: list[torch.Tensor], repeats: int = 3) -> float:  # type: ignore[no-untyped-def]
    """CPU seconds `vocode` spends per second of audio (22,050 Hz) over `mels`, the best of `repeats`."""
    audio_s = sum(mel.size(-1) for mel in mels) * 256 / 22050
    best = float("inf")
    with torch.inference_mode():
        vocode(mels[0][None])
        for _ in range(repeats):
            started = time.process_time()
            for mel in mels:
                vocode(mel[None])
            best = min(best, time.process_time() - started)
    return best / audio_s


def evaluate(model: FrameVocoder, sentence_count: int = 20, work_dir: Path = WORK_DIR) -> dict[str, float]:
    """The student against the quality tier's vocoder on held-out sentences (one thread): DNSMOS of
    each, and CPU per audio second of each."""
    from bench.quality import dnsmos_scores

    torch.set_num_threads(1)
    assets = default_voice_assets()
    voice = load_teacher_voice(cache_dir=work_dir / "piper-cache")
    head = load_mel_head(assets.trained_dir / MEL_HEAD_FILE)
    quality = load_mel_vocoder(assets.trained_dir, voice.decoder)
    mels = []
    with torch.no_grad():
        for index, text in enumerate(heldout_sentences()[:sentence_count]):
            for ids in phoneme_id_sentences(text):
                latent, _ = synthesize_latent(voice, ids, 1000 + index, 0.667, 1.0, 0.8, None)
                mels.append(head(latent[None])[0])
        scores: dict[str, float] = {}
        for name, vocode in (("quality", lambda mel: quality(mel)[0]), ("fast", lambda mel: model(mel)[0])):
            audio = np.concatenate([vocode(mel[None]).numpy() for mel in mels])
            overall, signal, background = dnsmos_scores(audio, 22050)
            scores[f"{name}_dnsmos"] = overall
            scores[f"{name}_sig"] = signal
            scores[f"{name}_bak"] = background
            scores[f"{name}_cpu_per_audio_s"] = cpu_per_audio_second(vocode, mels)
    return scores


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=FastTierConfig.steps)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--until-step", type=int, default=None, help="stop (checkpointed) at this step; run again to go on")
    parser.add_argument("--adversarial-steps", type=int, default=0, help="then this many steps with a discriminator")
    parser.add_argument("--work-dir", type=Path, default=WORK_DIR)
    parser.add_argument("--evaluate", action="store_true", help="score the student against the quality tier afterwards")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    config = FastTierConfig(steps=args.steps)
    model = train(config, args.work_dir, until_step=args.until_step)
    if args.adversarial_steps:
        model = train_adversarial(config, args.adversarial_steps, args.work_dir)
    if args.evaluate:
        print(json.dumps(evaluate(model, work_dir=args.work_dir), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
