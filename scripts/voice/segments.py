"""Random training segments of (mel, audio) pairs, shared by the fast tier's two training stages.

Only torch is imported, so the adversarial stage runs on a machine without the voice's text side.
"""

from __future__ import annotations

import random

import torch

Pair = tuple[torch.Tensor, torch.Tensor]
"""(mel [80, frames], its audio [frames * hop])."""


def segment_batch(
    pairs: list[Pair], batch_size: int, segment_frames: int, context_frames: int, hop: int, rng: random.Random
) -> tuple[torch.Tensor, torch.Tensor]:
    """`batch_size` random segments: mel of `segment_frames` with `context_frames` more each side
    [B, 80, frames], and the audio of the segment alone [B, samples]. Pairs shorter than that are skipped."""
    width = segment_frames + 2 * context_frames
    mels, audios = [], []
    while len(mels) < batch_size:
        mel, audio = pairs[rng.randrange(len(pairs))]
        if mel.size(-1) < width:
            continue
        start = rng.randrange(mel.size(-1) - width + 1)
        mels.append(mel[:, start : start + width])
        scored = start + context_frames
        audios.append(audio[scored * hop : (scored + segment_frames) * hop])
    return torch.stack(mels), torch.stack(audios)
