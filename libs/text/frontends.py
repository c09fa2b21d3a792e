"""Which text front end reads a voice's text, chosen by the voice's espeak-ng voice.

A Piper voice says which espeak-ng voice made its training phonemes (`espeak.voice` in its
.onnx.json). Mandarin (`cmn`, and the older names `zh`, `cmn-latn-pinyin`) gets the Mandarin front
end (libs.text.zh), which reads polyphones from context, tone sandhi, numbers and mixed scripts
before writing espeak-ng's phonemes; every other voice, English included, keeps the espeak-ng front
end exactly as it is (libs.text.frontend.TextFrontend).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final, Protocol

from libs.text.frontend import DEFAULT_MAX_TEXT_CHARS, Sentence, TextFrontend
from libs.text.phoneme_ids import load_espeak_voice, load_phoneme_id_map

MANDARIN_ESPEAK_VOICES: Final = frozenset({"cmn", "zh", "cmn-latn-pinyin", "zh-cn"})
"""espeak-ng voice names (lower-cased) that mean Mandarin."""


class Frontend(Protocol):
    """What the gateway and the text processes ask of a front end."""

    phoneme_id_map: dict[str, tuple[int, ...]]
    espeak_voice: str
    max_phoneme_ids: int | None
    max_word_chars: int

    def chunks(self, text: str) -> list[str]: ...

    def chunk_sentences(
        self,
        chunk: str,
        continues: bool = False,
        lexicon: Mapping[str, tuple[str, ...]] | None = None,
        first_max_ids: int | None = None,
        eager_opening: bool = False,
    ) -> list[Sentence]: ...

    def sentences(self, text: str) -> list[Sentence]: ...

    def load(self) -> None:
        """Load what the first text would otherwise load (dictionaries, models), so no request waits for it."""
        ...


def is_mandarin(espeak_voice: str) -> bool:
    """True when `espeak_voice` is one of espeak-ng's Mandarin voices."""
    return espeak_voice.strip().lower() in MANDARIN_ESPEAK_VOICES


def front_end_name(espeak_voice: str) -> str:
    """The name of the front end a voice gets: "mandarin" or "espeak"."""
    return "mandarin" if is_mandarin(espeak_voice) else "espeak"


def frontend_for(phoneme_id_map: Mapping[str, Sequence[int]], espeak_voice: str, **settings: Any) -> Frontend:
    """The front end for a voice with this phoneme-id map and espeak-ng voice; `settings` are
    TextFrontend's keyword arguments (max_text_chars, max_chunk_chars, max_phoneme_ids,
    max_word_chars, reading), which every front end takes."""
    if is_mandarin(espeak_voice):
        from libs.text.zh.frontend import MandarinFrontend  # pypinyin and jieba only where a voice needs them

        return MandarinFrontend(phoneme_id_map, espeak_voice=espeak_voice, **settings)
    return TextFrontend(phoneme_id_map, espeak_voice=espeak_voice, **settings)


def frontend_from_voice_config(config_path: Path | str, max_text_chars: int = DEFAULT_MAX_TEXT_CHARS) -> Frontend:
    """The front end for the Piper voice described by `config_path` (its .onnx.json)."""
    return frontend_for(load_phoneme_id_map(config_path), load_espeak_voice(config_path), max_text_chars=max_text_chars)
