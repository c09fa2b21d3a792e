"""Quality of the default voice through the mel contract, against piper-tts: `python -m bench.quality`.

On the held-out sentences (never trained on) it scores with DNSMOS (speechmos, audio resampled to
16 kHz with soxr):

(a)  piper-tts 1.8.0 with the same voice file;
(b)  our full path as the workers serve it, in the precision they settle on here: AcousticEngine
     (flow + MelHead in chunks) -> 40 ms mel slices in float16, as on the wire -> VocoderEngine
     stream (MelAdapter + Piper decoder body);
(b') the same models in float32 on whole sentences: torch acoustic -> MelHead -> mel -> vocoder;
(c)  our vocoder (MelAdapter + decoder) on the mel of piper-tts's own audio (copy synthesis);
(a') the same voice as our torch modules without the mel interface (decoder on the latent z that
     (b) starts from), so (b) - (a') is exactly what the mel interface costs;
(f)  the voice's fast tier as served: the mel of (b) through the fast tier's vocoder stream.

An independent recogniser (PocketSphinx's English model) transcribes (a), (b) and (f): the word
error rate against the held-out texts says whether a tier is as intelligible as the other.

Every system's audio is peak-normalised before scoring, as piper-tts does by default. The log-mel
L1 of (b) against Piper compares equal durations by starting both from the same latent z (same
phoneme ids, same seeded noise): mel(decoder(adapter(head(z)))) vs mel(decoder(z)). The real-time
factors of (a) and (b) are single-stream, measured in the same run on the same sentences with the
same thread count.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Final

import numpy as np
import torch

from bench.piper_baseline import load_voice as load_piper_tts_voice
from libs.audio.mel import mel_spectrogram
from libs.audio.slicing import slice_bounds
from libs.models.mel_bridge import load_mel_head, load_mel_vocoder
from libs.models.vits import DEFAULT_NOISE_SCALE, DEFAULT_NOISE_W, synthesis_generator
from libs.models.voice_files import MEL_HEAD_FILE
from libs.voice.assets import default_voice_assets
from libs.voice.calibration import MeasuredPrecision
from libs.voice.engine import AcousticEngine, EngineSettings, VocoderEngine
from libs.voice.inputs import SynthesisInputs, SynthesisParams
from libs.voice.precision import DEFAULT_PRECISION
from scripts.voice.build import DEFAULT_OUT_DIR, DEFAULT_WORK_DIR
from scripts.voice.corpus import heldout_sentences
from scripts.voice.teacher import VOICE_NAME, load_teacher_voice, phoneme_id_sentences

DNSMOS_SAMPLE_RATE_HZ: Final = 16_000
VOICE_SAMPLE_RATE_HZ: Final = 22_050
PEAK_LEVEL: Final = 0.95
OVRL_TOLERANCE: Final = 0.05
"""(b) passes when its OVRL is at least (a)'s minus this."""
REDUCED_PRECISION_TOLERANCE: Final = 0.02
"""(b), in the workers' reduced precisions, passes when its OVRL is at least (b')'s (float32) minus this."""
FAST_TIER_OVRL_TOLERANCE: Final = 0.10
"""(f) passes when its OVRL is at least (b)'s minus this..."""
FAST_TIER_WER_TOLERANCE: Final = 0.02
"""...and its word error rate at most (b)'s plus this."""
RECOGNISED_LABELS: Final = ("(a) piper-tts 1.8.0", "(b) ours as served", "(f) fast tier as served")


@dataclass(frozen=True)
class QualityConfig:
    """What the quality benchmark runs."""

    sentence_count: int = 40
    """Held-out texts to score (all 40 by default)."""
    voice_dir: Path = DEFAULT_OUT_DIR
    """Folder with the trained mel head and adapter."""
    threads: int = 2
    """CPU threads for torch and for piper-tts's onnxruntime session."""
    noise_scale: float = DEFAULT_NOISE_SCALE
    """VITS prior noise scale, both systems."""
    noise_w: float = DEFAULT_NOISE_W
    """Duration noise scale, both systems."""


@dataclass
class SystemScores:
    """Per-utterance measurements of one system."""

    ovrl: list[float] = field(default_factory=list)
    """DNSMOS overall quality."""
    sig: list[float] = field(default_factory=list)
    """DNSMOS speech signal quality."""
    bak: list[float] = field(default_factory=list)
    """DNSMOS background (noise) quality."""
    compute_s: float = 0.0
    """Synthesis time, seconds (timed systems only)."""
    audio_s: float = 0.0
    """Audio produced, seconds."""
    transcripts: list[str] = field(default_factory=list)
    """What the recogniser heard in each utterance (recognised systems only)."""

    def add(self, audio: np.ndarray, recogniser: Recogniser | None = None) -> None:
        """Score one utterance (and transcribe it with `recogniser`)."""
        ovrl, sig, bak = dnsmos_scores(audio, VOICE_SAMPLE_RATE_HZ)
        self.ovrl.append(ovrl)
        self.sig.append(sig)
        self.bak.append(bak)
        if recogniser is not None:
            self.transcripts.append(recogniser.transcribe(audio, VOICE_SAMPLE_RATE_HZ))

    def timed(self, make: Callable[[], np.ndarray], recogniser: Recogniser | None = None) -> np.ndarray:
        """`make()`'s audio, its time counted and the audio scored (and transcribed with `recogniser`)."""
        started_s = time.perf_counter()
        audio = make()
        self.compute_s += time.perf_counter() - started_s
        self.audio_s += len(audio) / VOICE_SAMPLE_RATE_HZ
        self.add(audio, recogniser)
        return audio

    def word_error_rate(self, references: list[str]) -> float:
        """Word error rate of the transcripts against `references` (nan when not recognised)."""
        return word_error_rate(references, self.transcripts)

    @property
    def real_time_factor(self) -> float:
        """Compute seconds per audio second (nan when not timed)."""
        return self.compute_s / self.audio_s if self.compute_s else float("nan")


class Recogniser:
    """PocketSphinx with its bundled US English model, one utterance at a time at 16 kHz."""

    def __init__(self) -> None:
        from pocketsphinx import Decoder

        self._decoder = Decoder(samprate=DNSMOS_SAMPLE_RATE_HZ, loglevel="FATAL")

    def transcribe(self, audio: np.ndarray, sample_rate_hz: int) -> str:
        import librosa

        audio = np.asarray(audio, dtype=np.float32)
        audio = audio * (PEAK_LEVEL / max(float(np.abs(audio).max()), 1e-8))
        resampled = librosa.resample(audio, orig_sr=sample_rate_hz, target_sr=DNSMOS_SAMPLE_RATE_HZ, res_type="soxr_hq")
        pcm = (np.clip(resampled, -1.0, 1.0) * 32767).astype("<i2").tobytes()
        self._decoder.start_utt()
        self._decoder.process_raw(pcm, full_utt=True)
        self._decoder.end_utt()
        hypothesis = self._decoder.hyp()
        return hypothesis.hypstr if hypothesis is not None else ""


def word_error_rate(references: Sequence[str], transcripts: Sequence[str]) -> float:
    """Word error rate of what a recogniser heard (`transcripts`) against the texts spoken (nan for none)."""
    if not transcripts:
        return float("nan")
    import jiwer

    return float(jiwer.wer([_words(text) for text in references], [_words(text) for text in transcripts]))


def _words(text: str) -> str:
    """`text` as the recogniser writes words: lower case, no punctuation but apostrophes."""
    return " ".join("".join(c.lower() if c.isalnum() or c == "'" else " " for c in text).split())


def dnsmos_scores(audio: np.ndarray, sample_rate_hz: int) -> tuple[float, float, float]:
    """DNSMOS (OVRL, SIG, BAK) of `audio`, peak-normalised and resampled to 16 kHz (soxr, high quality)."""
    import librosa
    from speechmos import dnsmos

    audio = np.asarray(audio, dtype=np.float32)
    audio = audio * (PEAK_LEVEL / max(float(np.abs(audio).max()), 1e-8))
    resampled = librosa.resample(audio, orig_sr=sample_rate_hz, target_sr=DNSMOS_SAMPLE_RATE_HZ, res_type="soxr_hq")
    resampled = np.clip(resampled, -1.0, 1.0).astype(np.float32)
    result = dnsmos.run(resampled, sr=DNSMOS_SAMPLE_RATE_HZ)
    return float(result["ovrl_mos"]), float(result["sig_mos"]), float(result["bak_mos"])


@dataclass
class QualityReport:
    """Everything the table shows."""

    systems: dict[str, SystemScores]
    """Scores by row label."""
    mel_l1_full: float
    """Log-mel L1 of (b) vs Piper on the same latent, per frame and band."""
    mel_l1_head: float
    """Log-mel L1 of MelHead(z) vs the mel of Piper's audio from the same z."""
    utterances: int
    """Sentences scored."""
    texts: list[str] = field(default_factory=list)
    """The held-out texts scored, the recogniser's references."""


def run_quality(config: QualityConfig) -> QualityReport:
    """Synthesise and score the held-out sentences with every system."""
    from piper import SynthesisConfig

    torch.set_num_threads(config.threads)
    voice = load_teacher_voice(cache_dir=DEFAULT_WORK_DIR / "piper-cache")
    head = load_mel_head(config.voice_dir / MEL_HEAD_FILE)
    vocoder = load_mel_vocoder(config.voice_dir, voice.decoder)
    piper_tts = load_piper_tts_voice(config.threads)
    piper_settings = SynthesisConfig(noise_scale=config.noise_scale, noise_w_scale=config.noise_w, normalize_audio=False)
    labels = (
        "(a) piper-tts 1.8.0",
        "(b) ours as served",
        "(b') ours, fp32, whole sentence",
        "(c) ours, copy synthesis",
        "(a') voice as torch, no mel",
    )
    systems = {label: SystemScores() for label in labels}
    piper, served, full, copy, direct = (systems[label] for label in labels)
    assets = replace(default_voice_assets(), trained_dir=config.voice_dir)
    # In the precision the workers settle on here (measured, or as they recorded it on this machine).
    acoustic_engine = MeasuredPrecision(EngineSettings(precision=DEFAULT_PRECISION)).acoustic(assets)
    vocoder_engine = MeasuredPrecision(EngineSettings(precision=DEFAULT_PRECISION)).vocoder(assets)
    fast_engine = vocoder_engine.fast_tier
    fast = systems.setdefault(RECOGNISED_LABELS[2], SystemScores()) if fast_engine is not None else None
    recogniser = Recogniser()
    l1_full = l1_head = 0.0
    frames = 0

    # Warm both timed paths once, so one-off allocation is not counted.
    for _ in piper_tts.synthesize("Warming up.", syn_config=piper_settings):
        pass
    warm_ids = phoneme_id_sentences("Warming up.")[0]
    with torch.no_grad():
        vocoder(head(voice.acoustic.infer(torch.tensor([warm_ids]), synthesis_generator(0)).z))
    served_audio(acoustic_engine, vocoder_engine, warm_ids, seed=0)
    if fast_engine is not None:
        served_audio(acoustic_engine, fast_engine, warm_ids, seed=0)

    texts = heldout_sentences()[: config.sentence_count]
    for text in texts:
        piper_audio = piper.timed(
            lambda: np.concatenate([c.audio_float_array for c in piper_tts.synthesize(text, syn_config=piper_settings)]), recogniser  # noqa: B023
        )
        served.timed(lambda: served_text(acoustic_engine, vocoder_engine, text, config), recogniser)  # noqa: B023
        if fast is not None:
            fast.timed(lambda: served_text(acoustic_engine, fast_engine, text, config), recogniser)  # noqa: B023

        with torch.no_grad():
            started_s = time.perf_counter()
            latents, predicted_mels, full_audio = [], [], []
            for ids in phoneme_id_sentences(text):
                seed = bench_seed(ids, config)
                z = voice.acoustic.infer(
                    torch.tensor([ids]), synthesis_generator(seed), noise_scale=config.noise_scale, noise_w=config.noise_w
                ).z
                mel = head(z)
                full_audio.append(vocoder(mel)[0])
                latents.append(z)
                predicted_mels.append(mel[0])
            full.compute_s += time.perf_counter() - started_s
            full_wave = torch.cat(full_audio)
            full.audio_s += len(full_wave) / VOICE_SAMPLE_RATE_HZ
            full.add(full_wave.numpy())

            direct_audio = [voice.decoder(z)[0, 0] for z in latents]
            direct.add(torch.cat(direct_audio).numpy())
            for ours, reference, mel in zip(full_audio, direct_audio, predicted_mels, strict=False):
                reference_mel = mel_spectrogram(reference)
                l1_full += (mel_spectrogram(ours) - reference_mel).abs().mean(dim=0).sum().item()
                l1_head += (mel - reference_mel).abs().mean(dim=0).sum().item()
                frames += reference_mel.shape[-1]

            copy_audio = vocoder(mel_spectrogram(torch.from_numpy(piper_audio)).unsqueeze(0))[0]
            copy.add(copy_audio.numpy())
    return QualityReport(systems, l1_full / frames, l1_head / frames, config.sentence_count, texts)


def bench_seed(phoneme_ids: list[int], config: QualityConfig) -> int:
    """The noise seed of one held-out sentence, the same for every system of ours."""
    return SynthesisInputs("bench", VOICE_NAME, phoneme_ids, SynthesisParams(0, 1.0, config.noise_scale, config.noise_w)).seed()


def served_text(acoustic: AcousticEngine, vocoder: VocoderEngine, text: str, config: QualityConfig) -> np.ndarray:
    """A held-out text's sentences as served (`served_audio`), each with its bench seed, one after the other."""
    return np.concatenate([served_audio(acoustic, vocoder, ids, bench_seed(ids, config)) for ids in phoneme_id_sentences(text)])


def served_audio(
    acoustic: AcousticEngine, vocoder: VocoderEngine, phoneme_ids: list[int], seed: int, spoken_ids: tuple[int, int] | None = None
) -> np.ndarray:
    """One sentence the way the mesh makes it: mel chunks cut into 40 ms slices, float16 on the
    wire, pushed into a vocoder stream as they come. `seed` fixes the noise, so that (b) and (b')
    differ only in how they are computed. `spoken_ids` speaks only those ids' frames, as a worker
    asked for a part of a sentence does."""
    params = SynthesisParams()
    part = acoustic.spoken_part(acoustic.plan(phoneme_ids, params, seed), *(spoken_ids or (0, None)))
    bounds = slice_bounds(part.frame_count, acoustic.hop_length, acoustic.sample_rate_hz)
    stream = vocoder.open_stream()
    pieces: list[np.ndarray] = []
    pending: list[np.ndarray] = []
    received = next_slice = 0
    for chunk in acoustic.mel_chunks(part.plan, part.skip_frames):
        chunk = chunk[:, : part.frame_count - received]
        pending.append(chunk.astype(np.float16).astype(np.float32))
        received += chunk.shape[1]
        mel = np.concatenate(pending, axis=1)
        offset = bounds[next_slice][0] if next_slice < len(bounds) else received
        while next_slice < len(bounds) and bounds[next_slice][1] <= received:
            start, end = bounds[next_slice]
            pieces.append(stream.push(mel[:, start - offset : end - offset]))
            next_slice += 1
        consumed = (bounds[next_slice][0] if next_slice < len(bounds) else received) - offset
        pending = [mel[:, consumed:]]
    pieces.append(stream.finish())
    return np.concatenate(pieces)


def format_report(report: QualityReport) -> str:
    """The benchmark's table and verdict as text."""
    lines = [
        f"DNSMOS on {report.utterances} held-out sentences (mean; higher is better), single-stream real-time factor",
        "",
        f"| {'system':<30} | OVRL | SIG  | BAK  |  RTF  |  WER  |",
        f"|{'-' * 32}|------|------|------|-------|-------|",
    ]
    for label, scores in report.systems.items():
        rtf = "   -  " if np.isnan(scores.real_time_factor) else f"{scores.real_time_factor:6.3f}"
        wer = scores.word_error_rate(report.texts)
        wer_text = "   -  " if np.isnan(wer) else f"{wer:6.3f}"
        lines.append(
            f"| {label:<30} | {np.mean(scores.ovrl):.2f} | {np.mean(scores.sig):.2f} | {np.mean(scores.bak):.2f} | {rtf}| {wer_text}|"
        )
    piper, full, float32 = (report.systems[label] for label in list(report.systems)[:3])
    gap = float(np.mean(full.ovrl) - np.mean(piper.ovrl))
    verdict = "PASS" if gap >= -OVRL_TOLERANCE else "FAIL"
    precision_gap = float(np.mean(full.ovrl) - np.mean(float32.ovrl))
    precision_verdict = "PASS" if precision_gap >= -REDUCED_PRECISION_TOLERANCE else "FAIL"
    lines += [
        "",
        f"log-mel L1, (b') vs Piper on the same latent z: {report.mel_l1_full:.4f} "
        f"(MelHead(z) alone vs the mel of Piper's audio: {report.mel_l1_head:.4f})",
        f"RTF (b) / (a): {full.real_time_factor / piper.real_time_factor:.2f}x",
        f"target (b) OVRL >= (a) OVRL - {OVRL_TOLERANCE}: {gap:+.3f} -> {verdict}",
        f"target (b) OVRL >= (b') OVRL - {REDUCED_PRECISION_TOLERANCE} (reduced precision against float32): "
        f"{precision_gap:+.3f} -> {precision_verdict}",
    ]
    fast = report.systems.get(RECOGNISED_LABELS[2])
    if fast is not None:
        ovrl_gap = float(np.mean(fast.ovrl) - np.mean(full.ovrl))
        wer_gap = fast.word_error_rate(report.texts) - full.word_error_rate(report.texts)
        lines += [
            f"RTF (f) / (b): {fast.real_time_factor / full.real_time_factor:.2f}x",
            f"target (f) OVRL >= (b) OVRL - {FAST_TIER_OVRL_TOLERANCE}: {ovrl_gap:+.3f} -> "
            f"{'PASS' if ovrl_gap >= -FAST_TIER_OVRL_TOLERANCE else 'FAIL'}",
            f"target (f) WER <= (b) WER + {FAST_TIER_WER_TOLERANCE}: {wer_gap:+.3f} -> "
            f"{'PASS' if wer_gap <= FAST_TIER_WER_TOLERANCE else 'FAIL'}",
        ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Command line entry point; exit status 1 when (b) misses the OVRL target."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sentences", type=int, default=QualityConfig.sentence_count, help="held-out texts to score")
    parser.add_argument("--voice-dir", type=Path, default=DEFAULT_OUT_DIR, help="folder of the trained weights")
    parser.add_argument("--threads", type=int, default=QualityConfig.threads, help="CPU threads per system")
    args = parser.parse_args(argv)
    report = run_quality(QualityConfig(sentence_count=args.sentences, voice_dir=args.voice_dir, threads=args.threads))
    print(format_report(report))
    piper, full, float32 = (report.systems[label] for label in list(report.systems)[:3])
    passed = np.mean(full.ovrl) >= np.mean(piper.ovrl) - OVRL_TOLERANCE
    passed &= np.mean(full.ovrl) >= np.mean(float32.ovrl) - REDUCED_PRECISION_TOLERANCE
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
