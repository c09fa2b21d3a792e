"""The tiers a voice speaks in: its own decoder (quality), and a smaller student of it that costs a
fraction of the CPU (fast). Both vocode the same mel, so a sentence's mel (and its cache entry) is
the same in either; only the audio differs, and everything keyed by the audio (the audio head in
the cache, the vocoder's model version, a resume token) carries the tier.

A request names a tier, or none (its API key's default, else quality), or `auto`: quality unless the
mesh is too busy to take the stream in it, then fast where the voice has a fast tier.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

from libs.pb.tts.v1 import tts_pb2
from libs.wire.errors import InvalidRequestError, echo

QUALITY: Final = "quality"
FAST: Final = "fast"
AUTO: Final = "auto"
SPOKEN: Final = (QUALITY, FAST)
"""The tiers a stream is actually spoken in (`auto` resolves to one of them)."""
NAMES: Final = (QUALITY, FAST, AUTO)
"""What a request may ask for."""
FIELD: Final = "tier"
FAST_VOCODER_FILE: Final = "fast_vocoder.pt"
"""A voice with a fast tier has this file in its folder: a small HiFi-GAN generator that takes the mel
itself (its config in the .json beside it), the student of the voice's own vocoder."""

_BY_ENUM: Final = {tts_pb2.TIER_UNSPECIFIED: "", tts_pb2.TIER_QUALITY: QUALITY, tts_pb2.TIER_FAST: FAST, tts_pb2.TIER_AUTO: AUTO}
_TO_ENUM: Final = {name: value for value, name in _BY_ENUM.items() if name}


def tiers_in(voice_folder: Path) -> tuple[str, ...]:
    """The tiers of the voice whose trained pieces are in `voice_folder`: quality, and fast when the
    folder holds the fast tier's vocoder and its config."""
    weights = voice_folder / FAST_VOCODER_FILE
    return (QUALITY, FAST) if weights.is_file() and weights.with_suffix(".json").is_file() else (QUALITY,)


def tier_of_enum(value: int) -> str:
    """The tier a gRPC `Tier` asks for ("" for TIER_UNSPECIFIED); InvalidRequestError for a value
    this server does not know."""
    try:
        return _BY_ENUM[value]
    except KeyError:
        raise InvalidRequestError(
            f"tier {value} is not known; use TIER_QUALITY, TIER_FAST or TIER_AUTO (0: the default)", field=FIELD
        ) from None


def tier_of_name(name: str) -> str:
    """The tier an HTTP or socket request names ("" for none); InvalidRequestError otherwise."""
    if not name:
        return ""
    text = name.strip().lower()
    if text not in NAMES:
        raise InvalidRequestError(f"tier {echo(name)} is not known; use quality, fast or auto", field=FIELD)
    return text


def tier_enum(tier: str) -> int:
    """The gRPC `Tier` of a tier name."""
    return _TO_ENUM[tier]
