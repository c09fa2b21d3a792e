"""The pitch each tier speaks with: how much of the audio is voiced, and how its F0 moves.

Both tiers vocode the same served mel of held-out texts (never trained on); pYIN (librosa) reads each
text's F0 frame by frame. A vocoder that follows the voice's intonation shows the spread of the voice's
pitch; one that stamps the same waveform into every mel frame speaks on one note, the frame rate
(22,050 / 256 = 86.13 Hz), whatever the mel says. The last column is the share of voiced frames within
2 Hz of that rate.

    python -m bench.tier_pitch [--texts 20]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

SAMPLE_RATE = 22050
HOP = 256
FRAME_RATE_HZ = SAMPLE_RATE / HOP
NEAR_FRAME_RATE_HZ = 2.0
F0_RANGE_HZ = (55.0, 450.0)


@dataclass(frozen=True)
class PitchSummary:
    voiced_share: float
    median_hz: float
    low_hz: float
    """5th percentile of the voiced frames' F0."""
    high_hz: float
    """95th percentile."""
    spread_semitones: float
    """Standard deviation of the voiced frames' F0, in semitones."""
    near_frame_rate: float
    """Share of the voiced frames within NEAR_FRAME_RATE_HZ of the frame rate."""


def voiced_pitch(samples: np.ndarray, sample_rate: int = SAMPLE_RATE) -> tuple[np.ndarray, int]:
    """(F0 of the voiced frames in Hz, frame count) of one clip, by pYIN at the mel's hop."""
    import librosa

    f0, voiced, _ = librosa.pyin(
        np.asarray(samples, dtype=np.float64).ravel(), fmin=F0_RANGE_HZ[0], fmax=F0_RANGE_HZ[1], sr=sample_rate,
        frame_length=1024, hop_length=HOP,
    )  # fmt: skip
    return f0[voiced], len(f0)


def summarise(clips: Sequence[tuple[np.ndarray, int]]) -> PitchSummary:
    """The pitch of clips read by `voiced_pitch`, pooled over all their voiced frames."""
    voiced = np.concatenate([f0 for f0, _ in clips])
    frames = sum(count for _, count in clips)
    if voiced.size == 0:
        return PitchSummary(0.0, float("nan"), float("nan"), float("nan"), float("nan"), float("nan"))
    return PitchSummary(
        voiced_share=voiced.size / frames,
        median_hz=float(np.median(voiced)),
        low_hz=float(np.percentile(voiced, 5)),
        high_hz=float(np.percentile(voiced, 95)),
        spread_semitones=float(np.std(12 * np.log2(voiced / np.median(voiced)))),
        near_frame_rate=float(np.mean(np.abs(voiced - FRAME_RATE_HZ) < NEAR_FRAME_RATE_HZ)),
    )


def table(rows: Sequence[tuple[str, PitchSummary]], texts: int) -> str:
    lines = [
        f"Pitch of each tier on held-out texts 1-{texts} (pYIN, {F0_RANGE_HZ[0]:g}-{F0_RANGE_HZ[1]:g} Hz, hop {HOP}):",
        "",
        f"| tier | voiced frames | F0 median | F0 5-95% | F0 spread | voiced frames within {NEAR_FRAME_RATE_HZ:g} Hz of {FRAME_RATE_HZ:.2f} Hz |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    lines += [
        f"| {name} | {s.voiced_share:.0%} | {s.median_hz:.1f} Hz | {s.low_hz:.1f}-{s.high_hz:.1f} Hz | {s.spread_semitones:.2f} semitones | {s.near_frame_rate:.0%} |"
        for name, s in rows
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--texts", type=int, default=20, help="held-out texts, from the first")
    args = parser.parse_args(argv)

    import torch

    from libs.models.mel_bridge import load_fast_vocoder
    from libs.voice.assets import default_voice_assets
    from libs.voice.tiers import FAST_VOCODER_FILE
    from scripts.voice.fast_tier import heldout_mels, load_quality_vocoder, text_audio

    torch.set_num_threads(1)
    quality = load_quality_vocoder()
    fast = load_fast_vocoder(default_voice_assets().trained_dir / FAST_VOCODER_FILE)
    texts = heldout_mels(args.texts)
    rows = []
    for name, vocode in (("quality", lambda mel: quality(mel)[0]), ("fast", lambda mel: fast(mel)[0])):
        rows.append((name, summarise([voiced_pitch(clip) for clip in text_audio(vocode, texts)])))
    print(table(rows, args.texts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
