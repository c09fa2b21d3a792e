"""Training loops of the mel head and the mel adapter, on teacher utterances.

Stage 1 regresses the mel from the latent (MelHead). Stage 2 regresses the latent from mels, half
of them true teacher mels and half the head's own predictions, so the full path head -> adapter
comes back close to z (MelAdapter). Stage 3 puts the frozen Piper decoder in the loop and tunes
the adapter on short random segments with a mel L1 + multi-resolution STFT loss against the
teacher audio.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import nn
from torch.nn import functional as F

from libs.audio.mel import MelConfig, mel_spectrogram
from libs.models.mel_bridge import ConvStack, MelAdapter, MelHead
from scripts.voice.teacher import Utterance

HOP_LENGTH = 256
Log = Callable[[str], None]


@dataclass(frozen=True)
class RegressionConfig:
    """Settings of one frame-level regression stage (stage 1 or 2)."""

    steps: int = 1500
    """Optimiser steps."""
    batch_size: int = 16
    """Segments per step."""
    segment_frames: int = 64
    """Frames per training segment."""
    learning_rate: float = 2e-3
    """Peak Adam learning rate (cosine decay to 2% after a short warm-up)."""
    seed: int = 1
    """Seed of initialisation and segment sampling."""


@dataclass(frozen=True)
class DecoderTuneConfig:
    """Settings of stage 3 (adapter tuned through the frozen decoder)."""

    steps: int = 300
    """Optimiser steps."""
    batch_size: int = 4
    """Segments per step."""
    segment_frames: int = 32
    """Frames per segment whose audio is scored."""
    context_frames: int = 8
    """Extra frames of input on each side, decoded but not scored, so segment edges look like mid-utterance."""
    learning_rate: float = 2e-4
    """Peak Adam learning rate."""
    latent_loss_weight: float = 0.5
    """Weight of the stage-2 latent L1 kept as a regulariser."""
    decoder_layers_to_tune: tuple[str, ...] = ()
    """Decoder parameter name prefixes tuned along with the adapter (e.g. "conv_pre."); empty: decoder frozen."""
    stft_resolutions: tuple[tuple[int, int], ...] = ((512, 128), (1024, 256), (2048, 512))
    """(n_fft, hop) of each STFT resolution in the multi-resolution loss."""
    seed: int = 3
    """Seed of segment sampling."""


@dataclass
class StageReport:
    """What one training stage did, for the manifest."""

    name: str
    """Stage name."""
    steps: int
    """Optimiser steps run."""
    seconds: float
    """Wall-clock time."""
    final_loss: float
    """Mean training loss over the last 10% of steps."""
    extra: dict = field(default_factory=dict)
    """Stage-specific numbers (validation losses and the like)."""


def _lr_at(step: int, steps: int, peak: float) -> float:
    warmup = max(1, steps // 20)
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = (step - warmup) / max(1, steps - warmup)
    return peak * (0.02 + 0.98 * 0.5 * (1 + math.cos(math.pi * progress)))


def _segments(
    pairs: list[tuple[torch.Tensor, torch.Tensor]],
    batch_size: int,
    frames: int,
    rf: int,
    input_pad: torch.Tensor,
    rng: random.Random,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A batch of aligned crops (inputs, targets, loss mask) from (input [C, T], target [D, T]) pairs.

    Frames within `rf` of a crop edge that is not a true utterance edge are masked out of the loss:
    there the network sees zero padding that whole-utterance inference would not. Short utterances
    are padded with `input_pad` [C, 1] (the input mean: zero after standardisation, like conv
    padding) and masked.
    """
    inputs, targets, masks = [], [], []
    for _ in range(batch_size):
        source, target = pairs[rng.randrange(len(pairs))]
        total = source.shape[-1]
        start = rng.randrange(0, max(1, total - frames + 1))
        stop = min(total, start + frames)
        mask = torch.zeros(frames)
        mask[: stop - start] = 1.0
        if start > 0:
            mask[:rf] = 0.0
        if stop < total:
            mask[stop - start - rf : stop - start] = 0.0
        inputs.append(torch.cat([source[:, start:stop], input_pad.expand(-1, frames - (stop - start))], dim=1))
        targets.append(F.pad(target[:, start:stop], (0, frames - (stop - start))))
        masks.append(mask)
    return torch.stack(inputs), torch.stack(targets), torch.stack(masks).unsqueeze(1)


def train_regression(
    model: ConvStack,
    pairs: list[tuple[torch.Tensor, torch.Tensor]],
    config: RegressionConfig,
    name: str,
    log: Log = print,
    on_step: Callable[[], None] | None = None,
) -> StageReport:
    """Fit `model` so model(input) ~ target (L1 in standardised target units) on random crops."""
    model.set_statistics(
        torch.cat([source for source, _ in pairs], dim=1), torch.cat([target for _, target in pairs], dim=1)
    )
    rng = random.Random(config.seed)
    optimiser = torch.optim.Adam(model.parameters(), lr=config.learning_rate, betas=(0.9, 0.99))
    rf = model.receptive_field_frames
    if config.segment_frames <= 2 * rf:  # every frame of a crop would be masked out: a loss of 0/0
        raise ValueError(f"{name}: segment_frames {config.segment_frames} must be over twice its receptive field ({rf} frames)")
    losses: list[float] = []
    started_s = time.perf_counter()
    model.train()
    for step in range(config.steps):
        for group in optimiser.param_groups:
            group["lr"] = _lr_at(step, config.steps, config.learning_rate)
        inputs, targets, mask = _segments(pairs, config.batch_size, config.segment_frames, rf, model.input_mean[0], rng)
        predicted = model(inputs)
        error = ((predicted - targets) / model.output_std).abs() * mask
        loss = error.sum() / (mask.sum() * targets.shape[1])
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
        losses.append(loss.item())
        if on_step is not None:
            on_step()
        if (step + 1) % max(1, config.steps // 5) == 0:
            log(f"{name}: step {step + 1}/{config.steps} loss {sum(losses[-50:]) / len(losses[-50:]):.4f} "
                f"({time.perf_counter() - started_s:.0f} s)")
    model.eval()
    tail = losses[-max(1, len(losses) // 10):]
    return StageReport(name, config.steps, time.perf_counter() - started_s, sum(tail) / len(tail))


@torch.no_grad()
def predict_whole(model: nn.Module, features: list[torch.Tensor]) -> list[torch.Tensor]:
    """Run `model` over each whole [C, T] feature (as inference does) and return [D, T] outputs."""
    model.eval()
    return [model(feature.unsqueeze(0))[0] for feature in features]


def train_mel_head(
    utterances: list[Utterance], config: RegressionConfig, log: Log = print, on_step: Callable[[], None] | None = None
) -> tuple[MelHead, StageReport]:
    """Stage 1: latent -> mel."""
    torch.manual_seed(config.seed)
    head = MelHead()
    report = train_regression(head, [(u.latent, u.mel) for u in utterances], config, "mel head", log, on_step)
    return head, report


def train_mel_adapter(
    utterances: list[Utterance], head: MelHead, config: RegressionConfig, log: Log = print, on_step: Callable[[], None] | None = None
) -> tuple[MelAdapter, StageReport]:
    """Stage 2: mel -> latent, from true mels and from the head's predicted mels."""
    torch.manual_seed(config.seed)
    predicted_mels = predict_whole(head, [u.latent for u in utterances])
    pairs = [(u.mel, u.latent) for u in utterances] + [(mel, u.latent) for mel, u in zip(predicted_mels, utterances, strict=False)]
    adapter = MelAdapter()
    report = train_regression(adapter, pairs, config, "mel adapter", log, on_step)
    return adapter, report


def multi_resolution_stft_loss(
    predicted: torch.Tensor, target: torch.Tensor, resolutions: tuple[tuple[int, int], ...]
) -> torch.Tensor:
    """Mean over resolutions of spectral convergence + L1 of log magnitude ([B, samples] inputs)."""
    total = predicted.new_zeros(())
    for n_fft, hop in resolutions:
        window = torch.hann_window(n_fft)
        spec_p = torch.stft(predicted, n_fft, hop, window=window, return_complex=True).abs().clamp(min=1e-7)
        spec_t = torch.stft(target, n_fft, hop, window=window, return_complex=True).abs().clamp(min=1e-7)
        convergence = torch.linalg.norm(spec_t - spec_p) / torch.linalg.norm(spec_t)
        total = total + convergence + (spec_p.log() - spec_t.log()).abs().mean()
    return total / len(resolutions)


def tune_adapter_through_decoder(
    adapter: MelAdapter,
    head: MelHead,
    decoder: nn.Module,
    utterances: list[Utterance],
    config: DecoderTuneConfig,
    log: Log = print,
    *,
    mel_config: MelConfig = MelConfig(),
    on_step: Callable[[], None] | None = None,
    speaker_conditioning: Callable[[list[int]], torch.Tensor] | None = None,
) -> StageReport:
    """Stage 3: tune `adapter` so decoder(adapter(mel)) sounds like the teacher audio.

    The decoder stays frozen except the layers named in `config.decoder_layers_to_tune`, which are
    tuned in place. For a voice of several speakers, `speaker_conditioning(speaker ids)` gives the
    decoder's conditioning [batch, gin, 1] for each segment's speaker.
    """
    rng = random.Random(config.seed)
    predicted_mels = predict_whole(head, [u.latent for u in utterances])
    decoder_parameters = []
    for name, parameter in decoder.named_parameters():
        tuned = name.startswith(config.decoder_layers_to_tune) if config.decoder_layers_to_tune else False
        parameter.requires_grad_(tuned)
        if tuned:
            decoder_parameters.append(parameter)
    decoder.eval()
    trained = [*adapter.parameters(), *decoder_parameters]
    optimiser = torch.optim.Adam(trained, lr=config.learning_rate, betas=(0.8, 0.99))
    frames, context = config.segment_frames, config.context_frames
    losses: list[float] = []
    started_s = time.perf_counter()
    adapter.train()
    for step in range(config.steps):
        for group in optimiser.param_groups:
            group["lr"] = _lr_at(step, config.steps, config.learning_rate)
        mels, latents, audios, speakers = [], [], [], []
        for item in range(config.batch_size):
            index = rng.randrange(len(utterances))
            utterance = utterances[index]
            total = utterance.mel.shape[-1]
            if total < frames + 2 * context:
                index = max(range(len(utterances)), key=lambda i: utterances[i].mel.shape[-1])
                utterance, total = utterances[index], utterances[index].mel.shape[-1]
            start = rng.randrange(context, total - frames - context + 1)
            # Alternate true and head-predicted mels: the vocoder must serve both.
            source = utterance.mel if item % 2 == 0 else predicted_mels[index]
            mels.append(source[:, start - context : start + frames + context])
            latents.append(utterance.latent[:, start - context : start + frames + context])
            audios.append(utterance.audio[start * HOP_LENGTH : (start + frames) * HOP_LENGTH])
            speakers.append(utterance.speaker_id or 0)
        mel_batch, latent_batch, audio_batch = torch.stack(mels), torch.stack(latents), torch.stack(audios)
        latent = adapter(mel_batch)
        g = speaker_conditioning(speakers) if speaker_conditioning is not None else None
        audio = decoder(latent, g=g).squeeze(1)[:, context * HOP_LENGTH : (context + frames) * HOP_LENGTH]
        mel_loss = (mel_spectrogram(audio, mel_config) - mel_spectrogram(audio_batch, mel_config)).abs().mean()
        stft_loss = multi_resolution_stft_loss(audio, audio_batch, config.stft_resolutions)
        latent_loss = ((latent - latent_batch) / adapter.output_std).abs().mean()
        loss = mel_loss + stft_loss + config.latent_loss_weight * latent_loss
        optimiser.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(trained, 1.0)
        optimiser.step()
        losses.append(loss.item())
        if on_step is not None:
            on_step()
        if (step + 1) % max(1, config.steps // 6) == 0:
            log(f"decoder-in-loop: step {step + 1}/{config.steps} loss {sum(losses[-25:]) / len(losses[-25:]):.4f} "
                f"(mel {mel_loss.item():.3f} stft {stft_loss.item():.3f} latent {latent_loss.item():.3f}, "
                f"{time.perf_counter() - started_s:.0f} s)")
    adapter.eval()
    tail = losses[-max(1, len(losses) // 10):]
    return StageReport("decoder in the loop", config.steps, time.perf_counter() - started_s, sum(tail) / len(tail))
