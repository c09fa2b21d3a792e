"""What fixes a sentence's audio exactly: the one value its seed, its cache key and its worker
request are all made from.

Synthesis is a pure function of the acoustic model version, the voice, the phoneme ids and four
knobs (speaker, speed, and the two noise scales); every random draw is seeded from a hash of
exactly these (docs/ARCHITECTURE.md, "Determinism"). Nothing here imports torch: the gateway builds
the same value to key its cache.
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass, field
from typing import Final

DEFAULT_NOISE_SCALE: Final = 0.667
DEFAULT_NOISE_W: Final = 0.8
SEED_BITS: Final = 63


@dataclass(frozen=True)
class SynthesisParams:
    """The knobs of one sentence's synthesis; with the phoneme ids they fix the audio exactly."""

    speaker_id: int = 0
    """Speaker index, 0-based."""
    speed: float = 1.0
    """Speaking-rate multiple; length_scale = 1 / speed."""
    noise_scale: float = DEFAULT_NOISE_SCALE
    """Scale of the prior noise (0 is flat and deterministic even without a seed)."""
    noise_w: float = DEFAULT_NOISE_W
    """Scale of the stochastic duration noise."""


@dataclass(frozen=True)
class SynthesisInputs:
    """Everything a sentence's audio is a function of."""

    model_version: str
    """The acoustic model's version (weights, precision, encoder backend)."""
    voice: str
    """The voice's name."""
    phoneme_ids: tuple[int, ...]
    """The sentence's phoneme ids, padding and markers included."""
    params: SynthesisParams = field(default_factory=SynthesisParams)
    """Speaker, speed and noise scales."""
    spoken_ids: tuple[int, int] | None = None
    """The ids whose frames are spoken, [first, end) (None: all): a part of the sentence planned
    whole. The part is in the cache key, not in the seed: the sentence is planned as it would be whole."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "phoneme_ids", tuple(int(i) for i in self.phoneme_ids))
        spoken = self.spoken_ids
        if spoken is not None and not 0 <= spoken[0] < spoken[1] <= len(self.phoneme_ids):
            raise ValueError(f"spoken ids {spoken} are not a span of the sentence's {len(self.phoneme_ids)} ids")

    def digest_bytes(self) -> bytes:
        """The inputs as bytes no two different inputs share: length-prefixed strings, then the
        numbers (floats as float64, so 1 and 1.0 are one input), then the spoken part when there is one."""
        spoken = b"" if self.spoken_ids is None else struct.pack("<4sqq", b"part", *self.spoken_ids)
        return self._sentence_bytes() + spoken

    def _sentence_bytes(self) -> bytes:
        parts = []
        for text in (self.model_version, self.voice):
            encoded = text.encode("utf-8")
            parts.append(struct.pack("<I", len(encoded)) + encoded)
        params = self.params
        parts.append(struct.pack("<qddd", int(params.speaker_id), float(params.speed), float(params.noise_scale), float(params.noise_w)))
        ids = self.phoneme_ids
        parts.append(struct.pack(f"<I{len(ids)}q", len(ids), *ids))
        return b"".join(parts)

    def seed(self) -> int:
        """The seed of every random draw of this sentence: the same inputs give the same audio (a
        spoken part shares its sentence's seed, so it is that sentence's plan)."""
        digest = hashlib.blake2b(self._sentence_bytes(), digest_size=8, person=b"tts-synth-seed")
        return int.from_bytes(digest.digest(), "little") & ((1 << SEED_BITS) - 1)
