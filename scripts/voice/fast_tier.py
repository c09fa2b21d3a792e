"""Train the fast tier of a voice's vocoder: a small HiFi-GAN generator that takes the mel itself, the
student of the voice's quality tier (its MelAdapter in front of the Piper decoder).

`python -m scripts.voice.fast_tier` renders teacher data once (cached in the work folder): the
training corpus through the voice, its latents through the mel head (the mel the acoustic worker
serves), and the quality tier's audio of that mel. The student learns to make that audio from that
mel with multi-resolution STFT and log-mel losses (a waveform L1 is there too, off by default: at
weight 10 it cost DNSMOS and intelligibility in the first thousand steps), and what the teacher's
decoder hands on at each upsampling stage through stage hints (`StageHints`). Every random draw is
seeded; a checkpoint (weights, optimiser, step) is written every `--checkpoint-every` steps into the
voice's folder, where it is committed with the student: a run resumes from it, in this sitting or a
later one, and reaches the weights an unbroken run reaches. `--evaluate` scores the student against the
quality tier on held-out sentences (DNSMOS, CPU seconds per audio second, one thread); `--install`
writes it into the voice's folder (FAST_VOCODER_FILE, its config, and FAST_TIER.md saying how it was
made), where the vocoder workers load it as the voice's fast tier.

The student keeps the teacher's shape (upsampling 8, 8, 4) at half its width and with one residual
block per stage instead of three: about a tenth of the teacher's CPU per audio second.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np
import torch
from torch import nn

from libs.audio.mel import mel_spectrogram
from libs.models.hifigan import HIFIGAN_V3, Generator, GeneratorConfig
from libs.models.mel_bridge import MelVocoder, load_mel_head, load_mel_vocoder, save_fast_vocoder
from libs.models.voice_files import MEL_HEAD_FILE
from libs.voice.assets import VoiceAssets, default_voice_assets
from libs.voice.precision import cpu_has_native_bf16
from libs.voice.tiers import FAST_VOCODER_FILE
from scripts.voice.corpus import heldout_sentences, training_sentences
from scripts.voice.fast_tier_adversarial import STAGE_RECORD_FILE
from scripts.voice.segments import segment_batch
from scripts.voice.teacher import TeacherConfig, load_teacher_voice, make_teacher_data, phoneme_id_sentences, synthesize_latent
from scripts.voice.train import multi_resolution_stft_loss

WORK_DIR = Path("build") / "fast-tier"
STFT_RESOLUTIONS = ((256, 64), (512, 128), (1024, 256), (2048, 512))
MANIFEST_FILE = "FAST_TIER.md"
CHECKPOINT_FILE = "fast_tier_checkpoint.pt"
"""The training run's last checkpoint, kept in the voice's folder (committed) so that training goes on across sittings."""
STUDENT = replace(
    HIFIGAN_V3, in_channels=80, upsample_initial_channel=128, resblock_kernel_sizes=(3,), resblock_dilation_sizes=((1, 3, 9),)
)
"""The teacher's upsampling (8, 8, 4 from the mel's frames) at half its width, one residual block of
three dilated convolutions per stage."""


@dataclass(frozen=True)
class FastTierConfig:
    """How the student is trained."""

    model: GeneratorConfig = STUDENT
    steps: int = 10000
    batch_size: int = 16
    segment_frames: int = 32
    """Frames of each training segment whose audio is scored."""
    context_frames: int = 8
    """Frames of mel each side of a segment the student sees but is not scored on (its reach is less)."""
    learning_rate: float = 1e-3
    waveform_weight: float = 0.0
    """Weight of the L1 between the student's samples and the teacher's."""
    hint_weight: float = 5.0
    """Weight of the stage hints: each upsampling stage of the student, through a 1x1 convolution
    trained with it (and dropped after), is matched to what the teacher's decoder hands on at the same
    stage (L1, relative to the teacher's mean magnitude), so the student learns from how the teacher
    makes its audio as well as from the audio. 0 leaves them out; 5, the installed student's, is where
    a student of the whole schedule kept its words and came closest to the teacher (docs/performance.md,
    history, 2026-12-07 (afternoon))."""
    seed: int = 7
    checkpoint_every: int = 500
    teacher: TeacherConfig = field(default_factory=lambda: TeacherConfig(variants_per_sentence=2))
    restarts: tuple[tuple[int, float], ...] = ((4000, 3e-4),)
    """Further cosine cycles after the first `steps`, each (steps, peak learning rate): a finished run
    goes on with one more, from its checkpoint, without starting over."""

    def to_dict(self) -> dict:
        values = asdict(self)
        values["model"] = self.model.to_dict()
        values["restarts"] = [list(cycle) for cycle in self.restarts]
        return values

    @property
    def total_steps(self) -> int:
        return self.steps + sum(steps for steps, _ in self.restarts)

    def learning_rate_at(self, step: int) -> float:
        """The learning rate of step `step`: a cosine decay from each cycle's peak over that cycle."""
        start, length, peak = 0, self.steps, self.learning_rate
        for cycle_steps, cycle_peak in self.restarts:
            if step < start + length:
                break
            start, length, peak = start + length, cycle_steps, cycle_peak
        return peak * 0.5 * (1 + np.cos(np.pi * (step - start) / length))

    def goes_on_from(self, saved: dict) -> bool:
        """Whether a checkpoint of the config `saved` (FastTierConfig.to_dict) is on this schedule: the
        same settings, and its cycles the first of these."""
        ours = self.to_dict()
        saved = {"hint_weight": 0.0, **saved}  # checkpoints from before the hints trained without them
        kept = saved.get("restarts", [])
        return {**saved, "restarts": []} == {**ours, "restarts": []} and kept == ours["restarts"][: len(kept)]


def teacher_pairs(config: FastTierConfig, work_dir: Path, log=print) -> list[tuple[torch.Tensor, torch.Tensor]]:  # type: ignore[no-untyped-def]
    """(served mel [80, T], the quality tier's audio of it [T * 256]) of every teacher rendering, cached on disk."""
    cache = work_dir / f"quality-targets-{config.teacher.variants_per_sentence}-{config.teacher.seed}.pt"
    if cache.exists():
        return torch.load(cache, weights_only=True)
    assets = default_voice_assets()
    voice = load_teacher_voice(cache_dir=work_dir / "piper-cache")
    head = load_mel_head(assets.trained_dir / MEL_HEAD_FILE)
    quality = load_mel_vocoder(assets.trained_dir, voice.decoder)
    utterances = make_teacher_data(training_sentences(), config.teacher, voice, log)
    pairs = []
    with torch.inference_mode():
        for utterance in utterances:
            mel = head(utterance.latent[None])
            pairs.append((mel[0].contiguous(), quality(mel)[0].contiguous()))
    work_dir.mkdir(parents=True, exist_ok=True)
    torch.save(pairs, cache)
    log(f"teacher data: {len(pairs)} renderings, {sum(mel.size(-1) for mel, _ in pairs) * 256 / 22050:.0f} s of audio")
    return pairs


class StageHints(nn.Module):
    """The stage hints' loss (`FastTierConfig.hint_weight`): a 1x1 convolution per upsampling stage
    from the student's channels to the teacher's, and the teacher's stages to match."""

    def __init__(self, student: GeneratorConfig, teacher: MelVocoder) -> None:
        super().__init__()
        if student.upsample_rates != teacher.decoder.config.upsample_rates:
            raise ValueError("stage hints need the student to upsample as its teacher does")
        self.teacher = teacher
        self.teacher_in_bf16 = cpu_has_native_bf16()
        self.scales = list(np.cumprod(student.upsample_rates))
        self.projections = nn.ModuleList(
            nn.Conv1d(student.upsample_initial_channel >> stage, teacher.decoder.config.upsample_initial_channel >> stage, 1)
            for stage in range(1, len(self.scales) + 1)
        )

    def teacher_stages(self, mel: torch.Tensor) -> list[torch.Tensor]:
        """The teacher's stages of `mel`, in bfloat16 where the CPU runs it natively: the teacher runs on
        every step, and there bf16 gives a target within about 1% of float32's for about half the CPU
        (elsewhere bf16 is emulated, slower than float32, and the teacher runs in float32)."""
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=self.teacher_in_bf16):
            stages, _ = self.teacher.forward_stages(mel)
        return [stage.float() for stage in stages]

    def forward(self, student_stages: list[torch.Tensor], mel: torch.Tensor, scored: tuple[int, int]) -> list[torch.Tensor]:
        """Each stage's relative L1 over the scored frames [first, last) of `mel`'s segments."""
        losses = []
        for ours, theirs, projection, scale in zip(student_stages, self.teacher_stages(mel), self.projections, self.scales, strict=True):
            window = slice(scored[0] * scale, scored[1] * scale)
            target = theirs[..., window]
            losses.append((projection(ours[..., window]) - target).abs().mean() / target.abs().mean().clamp_min(1e-6))
        return losses


def train(  # type: ignore[no-untyped-def]
    config: FastTierConfig,
    work_dir: Path = WORK_DIR,
    log=print,
    until_step: int | None = None,
    checkpoint: Path | None = None,
    teacher: MelVocoder | None = None,
) -> Generator:
    """Train (or go on training from the checkpoint) to `config.steps`, or only to `until_step` (a
    sitting shorter than the run: it checkpoints there); returns the student. Each step's batch and
    learning rate follow from the step's number alone, so a run that stops and resumes reaches the
    weights of one that never stopped. `checkpoint` (default: in `work_dir`) is where it is kept.
    `teacher` (default: the voice's quality tier) gives the stage hints where `config.hint_weight` asks for them."""
    torch.manual_seed(config.seed)
    pairs = teacher_pairs(config, work_dir, log)
    # The teacher is loaded before the student is drawn: loading draws too, and this order is the runs'.
    teacher = (teacher or load_quality_vocoder(work_dir)) if config.hint_weight else None
    model = Generator(config.model)
    hints = StageHints(config.model, teacher) if teacher is not None else None
    trained = [*model.parameters(), *(hints.projections.parameters() if hints else ())]
    optimiser = torch.optim.AdamW(trained, lr=config.learning_rate, betas=(0.8, 0.99), weight_decay=0.0)
    checkpoint = checkpoint or work_dir / CHECKPOINT_FILE
    step = 0
    if checkpoint.exists():
        state = torch.load(checkpoint, weights_only=False)
        if config.goes_on_from(state["config"]) and int(state["step"]) <= config.total_steps:
            model.load_state_dict(state["model"])
            if hints:
                hints.projections.load_state_dict(state["projections"])
            optimiser.load_state_dict(state["optimiser"])
            step = int(state["step"])
            log(f"resumed at step {step}")
    hop, context = config.model.hop_length, config.context_frames
    started_s = time.perf_counter()
    model.train()
    last = config.total_steps if until_step is None else min(until_step, config.total_steps)
    while step < last:
        for group in optimiser.param_groups:
            group["lr"] = config.learning_rate_at(step)
        rng = random.Random(f"{config.seed}-{step}")
        mel, target = segment_batch(pairs, config.batch_size, config.segment_frames, context, hop, rng)
        stages, samples = model.forward_stages(mel)
        predicted = samples[:, 0, context * hop : (context + config.segment_frames) * hop]
        stft = multi_resolution_stft_loss(predicted, target, STFT_RESOLUTIONS)
        mel_loss = (mel_spectrogram(predicted) - mel_spectrogram(target)).abs().mean()
        waveform = (predicted - target).abs().mean()
        stage_losses = hints(stages, mel, (context, context + config.segment_frames)) if hints else []
        loss = stft + mel_loss + config.waveform_weight * waveform
        if stage_losses:
            loss = loss + config.hint_weight * torch.stack(stage_losses).sum()
        optimiser.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(trained, 1.0)
        optimiser.step()
        step += 1
        if step % 100 == 0 or step == last:
            elapsed = time.perf_counter() - started_s
            said = " ".join(f"{value.item():.3f}" for value in stage_losses)
            log(
                f"step {step}/{config.total_steps}: stft {stft.item():.3f} mel {mel_loss.item():.3f} waveform {waveform.item():.4f}"
                + (f" hints {said}" if said else "") + f" ({elapsed:.0f} s)"
            )
        if step % config.checkpoint_every == 0 or step == last:
            state = {"model": model.state_dict(), "optimiser": optimiser.state_dict(), "step": step, "config": config.to_dict()}
            if hints:
                state["projections"] = hints.projections.state_dict()
            torch.save(state, checkpoint)
    return model.eval()


def load_quality_vocoder(work_dir: Path = WORK_DIR) -> MelVocoder:
    """The default voice's quality tier, the student's teacher: its MelAdapter in front of the Piper decoder."""
    voice = load_teacher_voice(cache_dir=work_dir / "piper-cache")
    return load_mel_vocoder(default_voice_assets().trained_dir, voice.decoder)


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


def heldout_mels(text_count: int, work_dir: Path = WORK_DIR, first: int = 0) -> list[list[torch.Tensor]]:
    """The served mel of `text_count` held-out texts (never trained on) from the `first`: for each text,
    one mel per sentence."""
    assets = default_voice_assets()
    voice = load_teacher_voice(cache_dir=work_dir / "piper-cache")
    head = load_mel_head(assets.trained_dir / MEL_HEAD_FILE)
    texts = []
    with torch.no_grad():
        for index, text in enumerate(heldout_sentences()[first : first + text_count], start=first):
            sentences = []
            for ids in phoneme_id_sentences(text):
                latent, _ = synthesize_latent(voice, ids, 1000 + index, 0.667, 1.0, 0.8, None)
                sentences.append(head(latent[None])[0])
            texts.append(sentences)
    return texts


def text_audio(vocode, texts: list[list[torch.Tensor]]) -> list[np.ndarray]:  # type: ignore[no-untyped-def]
    """`vocode`'s audio of each text: its sentences' mels vocoded one after the other."""
    with torch.inference_mode():
        return [np.concatenate([vocode(mel[None]).numpy() for mel in mels]) for mels in texts]


def dnsmos_per_text(clips: Sequence[np.ndarray]) -> tuple[float, float, float]:
    """Mean DNSMOS (OVRL, SIG, BAK) of the texts' audio (`text_audio`), each text scored on its own as
    `make bench-quality` scores them. One clip of all the texts scores otherwise: joined, texts 1-20
    put the fast tier 0.06 below the quality tier; one by one, 0.11."""
    from bench.quality import dnsmos_scores

    scores = [dnsmos_scores(clip, 22050) for clip in clips]
    overall, signal, background = (float(np.mean(column)) for column in zip(*scores, strict=True))
    return overall, signal, background


def periodicity_at(samples: np.ndarray, lag: int) -> float:
    """The normalised autocorrelation of `samples` at `lag` samples: near 1 for a waveform that repeats
    every `lag` samples, near 0 for speech, whose pitch periods follow the voice and not the frames."""
    x = np.asarray(samples, dtype=np.float64)
    energy = float(np.dot(x, x))
    return float(np.dot(x[:-lag], x[lag:]) / energy) if energy > 0.0 and len(x) > lag else 0.0


def hop_periodicity(clips: Sequence[np.ndarray], hop: int) -> float:
    """Mean `periodicity_at` one hop of the texts' audio (`text_audio`): how much the audio repeats with
    the mel's frames, a buzz at the frame rate (86 Hz for a 256-sample hop at 22,050 Hz) that spectral
    losses leave in a student."""
    return float(np.mean([periodicity_at(clip, hop) for clip in clips]))


def evaluate(model: Generator, text_count: int = 20, work_dir: Path = WORK_DIR) -> dict[str, float]:
    """The student against the quality tier on held-out texts (one thread): mean DNSMOS of each over
    the texts, the word error rate of `make bench-quality`'s recogniser, how much each one's audio
    repeats with the frames, and CPU per audio second of each. Both scores, since a student's DNSMOS
    and its words move apart (docs/performance.md, history, 2026-12-07 (afternoon))."""
    from bench.quality import Recogniser, word_error_rate

    torch.set_num_threads(1)
    quality = load_quality_vocoder(work_dir)
    student = Generator(model.config)
    student.load_state_dict(model.state_dict())
    student.eval().remove_weight_norm()
    texts = heldout_mels(text_count, work_dir)
    references = heldout_sentences()[:text_count]
    recogniser = Recogniser()
    scores: dict[str, float] = {}
    for name, vocode in (("quality", lambda mel: quality(mel)[0]), ("fast", lambda mel: student(mel)[0, 0])):
        clips = text_audio(vocode, texts)
        overall, signal, background = dnsmos_per_text(clips)
        scores[f"{name}_dnsmos"] = overall
        scores[f"{name}_sig"] = signal
        scores[f"{name}_bak"] = background
        scores[f"{name}_wer"] = word_error_rate(references, [recogniser.transcribe(clip, 22050) for clip in clips])
        scores[f"{name}_hop_periodicity"] = hop_periodicity(clips, model.config.hop_length)
        scores[f"{name}_cpu_per_audio_s"] = cpu_per_audio_second(vocode, [mel for mels in texts for mel in mels])
    return scores


def student_from(weights: Path, config: FastTierConfig | None = None) -> Generator:
    """A student of `config.model` (default the committed schedule's) with the training-form weights of a snapshot file."""
    student = Generator((config or FastTierConfig()).model)
    student.load_state_dict(torch.load(weights, map_location="cpu", weights_only=True))
    return student.eval()


def choose_snapshot(snapshots: list[Path], work_dir: Path = WORK_DIR, log=print) -> Path:  # type: ignore[no-untyped-def]
    """The snapshot whose audio scores the best DNSMOS on held-out texts 21-40 (the 20 of `evaluate`'s
    check are kept out of the choice, so the check stays an unbiased one)."""
    torch.set_num_threads(1)
    texts = heldout_mels(20, work_dir, first=20)
    scored = []
    for path in snapshots:
        student = student_from(path)
        student.remove_weight_norm()
        scored.append((dnsmos_per_text(text_audio(lambda mel: student(mel)[0, 0], texts))[0], path))  # noqa: B023
        log(f"{path.name}: DNSMOS {scored[-1][0]:.4f} on held-out texts 21-40, each on its own")
    return max(scored)[1]


def install(  # type: ignore[no-untyped-def]
    model: Generator,
    config: FastTierConfig,
    assets: VoiceAssets,
    step: int,
    scores: dict[str, float] | None,
    second_stage: Sequence[str],
    checkpoint_name: str,
    threads: int,
) -> Path:
    """Write the student of training step `step` into the voice's folder, with FAST_TIER.md saying how it was
    made (its last sitting on `threads` threads) and which checkpoint (`checkpoint_name`, beside it) its
    training goes on from."""
    path = assets.trained_dir / FAST_VOCODER_FILE
    save_fast_vocoder(model, path)
    parameters = sum(parameter.numel() for parameter in model.parameters())
    lines = [
        f"# {assets.name}: the fast tier's vocoder",
        "",
        "Trained by `python -m scripts.voice.fast_tier --install` (the Makefile's `make voice-fast`), on CPU, as the",
        "student of this voice's quality tier (MelAdapter + Piper decoder) on the mel its mel head serves.",
        "Do not edit by hand: retrain.",
        "",
        f"- `{FAST_VOCODER_FILE}` / `.json`: a HiFi-GAN generator that takes the mel itself, {parameters:,} parameters,",
        "  weight norm folded.",
        "",
        "## Settings",
        "",
        "```",
        json.dumps(config.to_dict(), indent=1),
        "```",
        "",
        f"Trained {step:,} of the schedule's {config.total_steps:,} steps, on CPU ({platform.machine()}, torch {torch.__version__},",
        f"Python {platform.python_version()}; the last sitting on {threads} thread(s)); `{checkpoint_name}` beside it",
        "is where training goes on from.",
        *second_stage,
    ]
    if scores:
        lines += ["", "## Held-out check (20 held-out texts, each scored on its own; one thread)", "", "| | quality tier | fast tier |", "|---|---:|---:|"]
        rows = (
            ("dnsmos", "DNSMOS"), ("sig", "DNSMOS SIG"), ("bak", "DNSMOS BAK"), ("wer", "word error rate (PocketSphinx)"),
            ("hop_periodicity", "periodicity at one hop (autocorrelation; 0 for speech, 1 for a buzz at the frame rate)"),
            ("cpu_per_audio_s", "CPU s per audio s"),
        )  # fmt: skip
        lines += [f"| {label} | {scores[f'quality_{key}']:.4f} | {scores[f'fast_{key}']:.4f} |" for key, label in rows]
    (assets.trained_dir / MANIFEST_FILE).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def adversarial_manifest(folder: Path, chosen: Path) -> list[str]:
    """FAST_TIER.md's account of the adversarial stage whose snapshots and record (STAGE_RECORD_FILE) are in `folder`."""
    record = json.loads((folder / STAGE_RECORD_FILE).read_text())
    settings = record["config"]
    return [
        "",
        "## Second stage: adversarial",
        "",
        f"Then trained on as a GAN by `python -m scripts.voice.fast_tier_adversarial` ({record['machine']}), with HiFi-GAN's",
        "discriminators at the width below, feature matching and a full-band mel loss, against the quality tier's audio:",
        "",
        "```",
        json.dumps(settings, indent=1),
        "```",
        "",
        f"Installed: the snapshot `{chosen.name}`, the best of the stage's snapshots by DNSMOS on held-out texts 21-40",
        "(the check below is on texts 1-20). The stage's checkpoint (with its discriminators) is not committed; a",
        f"later sitting starts the stage over from `{CHECKPOINT_FILE}`.",
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=FastTierConfig.steps)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--hint-weight", type=float, default=FastTierConfig.hint_weight,
                        help="weight of the stage hints (0: none; docs/performance.md, history, has what each gave)")
    parser.add_argument("--until-step", type=int, default=None, help="stop (checkpointed) at this step; run again to go on")
    parser.add_argument("--checkpoint", type=Path, default=None,
                        help=f"where this run's checkpoint is kept (default: {CHECKPOINT_FILE} in the voice's folder, the "
                        "installed student's run); a run of another recipe keeps its own, so the installed student's stays")
    parser.add_argument("--work-dir", type=Path, default=WORK_DIR)
    parser.add_argument("--evaluate", action="store_true", help="score the student against the quality tier afterwards")
    parser.add_argument("--install", action="store_true", help="write the student into the default voice's folder")
    parser.add_argument("--adversarial", type=Path, default=None,
                        help="a folder of the adversarial stage's snapshots and its record: the best on "
                        "held-out texts is the student evaluated and installed, instead of the first stage's")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    config = FastTierConfig(steps=args.steps, hint_weight=args.hint_weight)
    assets = default_voice_assets()
    checkpoint = args.checkpoint or assets.trained_dir / CHECKPOINT_FILE
    model = train(config, args.work_dir, until_step=args.until_step, checkpoint=checkpoint)
    second_stage: list[str] = []
    if args.adversarial is not None:
        chosen = choose_snapshot(sorted(args.adversarial.glob("student-*.pt")), args.work_dir)
        model = student_from(chosen, config)
        second_stage = adversarial_manifest(args.adversarial, chosen)
    scores = evaluate(model, work_dir=args.work_dir) if args.evaluate else None
    if scores:
        print(json.dumps(scores, indent=2))
    if args.install:
        step = int(torch.load(checkpoint, weights_only=False)["step"])
        print(f"installed {install(model, config, assets, step, scores, second_stage, checkpoint.name, args.threads)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
