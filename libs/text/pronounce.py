"""Words whose phonemes are chosen before espeak-ng reads the text: inline phonemes, lexicon entries
and heteronyms.

Inline phonemes are written `[[ h ə l ˈoʊ ]]`: inside the brackets whitespace separates phonemes
(a block without spaces, Piper's `[[həlˈoʊ]]`, is read one codepoint at a time), and a block is one
spoken word. A lexicon maps a word (matched whole, case-insensitive) to its phonemes.

espeak-ng still reads the sentence around such a word, so its clauses, stress and rhythm stay
espeak-ng's: each chosen word is replaced by `PLACEHOLDER`, a word espeak-ng reads as one word with
phonemes no English word has (`PLACEHOLDER_PHONEMES`), and after espeak-ng the placeholder's
phonemes in each sentence are swapped, in order, for the chosen ones. A sentence's text gets the
written word back (an inline block shows its phonemes, "həlˈoʊ": one word, as it is spoken).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from libs.text.errors import TextError
from libs.text.offsets import Edit, EditMap, edits_of_replacements

PLACEHOLDER: Final = "zyzzy"
PLACEHOLDER_PHONEMES: Final = "zɪzi"
"""The placeholder's phonemes without stress marks or the linking glide, as espeak-ng reads it in every context."""
_STRESS_AND_GLIDE: Final = frozenset("ˈˌʲ")
MAX_INLINE_BLOCK_CHARS: Final = 400
"""The most characters between one inline block's brackets: a block is one spoken word."""
_INLINE_BLOCK: Final = re.compile(rf"\[\[([^\[\]]{{0,{MAX_INLINE_BLOCK_CHARS}}})\]\]")
_ANY_BLOCK: Final = re.compile(r"\[\[([^\[\]]*)\]\]")
_PLACEHOLDER_WORD: Final = re.compile(r"(?<![\w'-])" + PLACEHOLDER + r"(?![\w'-])", re.IGNORECASE)
_WORD: Final = re.compile(r"[^\W\d_](?:[\w'.-]{0,62}\w)?")
_SPEECH_PUNCTUATION: Final = frozenset(".,;:!?")
MAX_LEXICON_ENTRIES: Final = 10_000
MAX_LEXICON_WORD_CHARS: Final = 64
MAX_LEXICON_PHONEMES: Final = 64


class InvalidPhonemeError(TextError):
    """Phonemes (inline, in a lexicon or in SSML) that the voice cannot speak."""

    def __init__(self, symbol: str, where: str, voice_hint: str = "") -> None:
        self.symbol = symbol
        name = unicodedata.name(symbol, "unnamed")
        super().__init__(
            f"phoneme {symbol!r} (U+{ord(symbol):04X} {name}) in {where} is not one the voice can speak"
            f"{voice_hint}; write phonemes in the IPA of espeak-ng's English, e.g. [[ h ə l ˈoʊ ]]"
        )


class InvalidLexiconError(TextError):
    """A lexicon entry that is not a word mapped to phonemes."""


@dataclass(frozen=True)
class Override:
    """A written word and the phonemes it is spoken with."""

    written: str
    """The text it replaces, as written."""
    phonemes: tuple[str, ...]
    """Its phonemes, one codepoint each (a single spoken word: no spaces)."""


def phoneme_symbols(ipa: str) -> tuple[str, ...]:
    """Phonemes of an IPA string as the phoneme-id map holds them: NFD codepoints, whitespace dropped."""
    return tuple(character for character in unicodedata.normalize("NFD", ipa) if not character.isspace())


def check_inventory(phonemes: Sequence[str], inventory: Mapping[str, object], where: str) -> None:
    """Raise InvalidPhonemeError for the first phoneme the voice's phoneme-id map lacks (its
    punctuation and control symbols are not phonemes)."""
    for phoneme in phonemes:
        if phoneme not in inventory or phoneme in _NOT_PHONEMES:
            lookalike = _LOOKALIKES.get(phoneme)
            if lookalike is not None:
                hint = f" (did you mean {lookalike!r}, U+{ord(lookalike):04X}?)"
            else:
                hint = f" (the voice has: {' '.join(sorted(_speakable(inventory)))})"
            raise InvalidPhonemeError(phoneme, where, hint)


_NOT_PHONEMES: Final = frozenset(".,;:!?^_$ \"'()#-")
_LOOKALIKES: Final = {"g": "ɡ", ":": "ː", "'": "ˈ", ",": "ˌ", "ǝ": "ə", "ɝ": "ɜ", "ε": "ɛ", "ɩ": "ɪ"}


def _speakable(inventory: Mapping[str, object]) -> list[str]:
    return [symbol for symbol in inventory if symbol not in _NOT_PHONEMES and not symbol.isdigit()]


def inline_blocks(text: str) -> Iterator[re.Match[str]]:
    """The `[[ ... ]]` blocks of `text`."""
    return _INLINE_BLOCK.finditer(text)


def split_inline(text: str) -> list[tuple[str, bool]]:
    """`text` as (part, is_block) pieces in order; a block's part keeps its brackets."""
    pieces: list[tuple[str, bool]] = []
    position = 0
    for block in _INLINE_BLOCK.finditer(text):
        if block.start() > position:
            pieces.append((text[position : block.start()], False))
        pieces.append((block.group(), True))
        position = block.end()
    if position < len(text):
        pieces.append((text[position:], False))
    return pieces


def block_phonemes(block: str) -> tuple[str, ...]:
    """The phonemes of one `[[ ... ]]` block (brackets included)."""
    return phoneme_symbols(block[2:-2])


def check_inline_phonemes(text: str, inventory: Mapping[str, object]) -> None:
    """Raise InvalidPhonemeError when an inline block holds a phoneme the voice lacks, is empty, or
    is too long to be a word (it would otherwise be read aloud as the text it is)."""
    for block in _ANY_BLOCK.finditer(text):
        if len(block.group(1)) > MAX_INLINE_BLOCK_CHARS:
            raise TextError(
                f"the inline phonemes {block.group()[:40]!r}... hold {len(block.group(1))} characters; a block is one word, "
                f"at most {MAX_INLINE_BLOCK_CHARS} characters: write each word as a block of its own"
            )
        phonemes = block_phonemes(block.group())
        if not phonemes:
            raise InvalidPhonemeError(" ", f"the empty inline block {block.group()!r}") from None
        check_inventory(phonemes, inventory, f"the inline phonemes {block.group()!r}")


def parse_lexicon_entries(entries: Mapping[str, str], inventory: Mapping[str, object], where: str) -> dict[str, tuple[str, ...]]:
    """A lexicon (word -> IPA) checked and keyed by the lower-cased word; InvalidLexiconError or
    InvalidPhonemeError names the bad entry."""
    if len(entries) > MAX_LEXICON_ENTRIES:
        raise InvalidLexiconError(f"{where} has {len(entries)} entries; the limit is {MAX_LEXICON_ENTRIES}")
    lexicon: dict[str, tuple[str, ...]] = {}
    for word, ipa in entries.items():
        word = unicodedata.normalize("NFC", word.strip())
        if not _WORD.fullmatch(word) or len(word) > MAX_LEXICON_WORD_CHARS:
            raise InvalidLexiconError(
                f"{where}: {word!r} is not a word (letters first, then letters, digits, ' . or -, "
                f"at most {MAX_LEXICON_WORD_CHARS} characters)"
            )
        phonemes = phoneme_symbols(ipa)
        if not phonemes or len(phonemes) > MAX_LEXICON_PHONEMES:
            raise InvalidLexiconError(f"{where}: the phonemes of {word!r} must be 1 to {MAX_LEXICON_PHONEMES} IPA symbols")
        check_inventory(phonemes, inventory, f"{where} (the entry for {word!r})")
        lexicon[word.lower()] = phonemes
    return lexicon


def _lexicon_pattern(lexicon: Mapping[str, tuple[str, ...]]) -> re.Pattern[str] | None:
    if not lexicon:
        return None
    words = sorted(lexicon, key=len, reverse=True)
    return re.compile(r"(?<![\w'-])(?:" + "|".join(re.escape(word) for word in words) + r")(?![\w'-]|\.\w)", re.IGNORECASE)


class PronunciationPlan:
    """Text with each chosen word replaced by the placeholder, and what each placeholder stands for."""

    def __init__(self, text: str, overrides: list[Override], source: str, edits: list[Edit]) -> None:
        """`text` was made from `source` by `edits`."""
        self.text = text
        """The text espeak-ng reads."""
        self.overrides = overrides
        """One per placeholder in `text`, in order."""
        self._next = 0
        self._maps = [EditMap(edits)]
        self._source = source

    def from_source(self, source: str, edits: list[Edit]) -> None:
        """Say that the text this plan was made from was itself made from `source` by `edits`."""
        self._maps.append(EditMap(edits))
        self._source = source

    def written(self, start: int, end: int) -> str:
        """The source text that `text[start:end]` was made from (inline blocks shown as their phonemes)."""
        for edit_map in self._maps:
            start, end = edit_map.old_position(start, is_end=False), edit_map.old_position(end, is_end=True)
        return _INLINE_BLOCK.sub(lambda block: "".join(block_phonemes(block.group())), self._source[start:end])

    def take(self, count: int) -> list[Override]:
        """The overrides of the next `count` placeholders."""
        taken = self.overrides[self._next : self._next + count]
        self._next += count
        return taken


def plan_pronunciations(
    text: str,
    lexicon: Mapping[str, tuple[str, ...]] = {},
    chosen: Sequence[tuple[int, int, tuple[str, ...]]] = (),
) -> PronunciationPlan:
    """Replace inline blocks, lexicon words and `chosen` spans ((start, end, phonemes) in `text`,
    e.g. heteronyms) by the placeholder. A placeholder already in the text stands for itself."""
    spans: list[tuple[int, int, tuple[str, ...]]] = []
    for block in _INLINE_BLOCK.finditer(text):
        spans.append((block.start(), block.end(), block_phonemes(block.group())))
    taken = [(start, end) for start, end, _ in spans]
    pattern = _lexicon_pattern(lexicon)
    for part_start, part_end in _gaps(taken, len(text)):
        if pattern is not None:
            for match in pattern.finditer(text, part_start, part_end):
                spans.append((match.start(), match.end(), lexicon[match.group().lower()]))
        for match in _PLACEHOLDER_WORD.finditer(text, part_start, part_end):
            spans.append((match.start(), match.end(), tuple(PLACEHOLDER_PHONEMES[:1] + "ˈ" + PLACEHOLDER_PHONEMES[1:])))
    covered = sorted(spans)
    for start, end, phonemes in chosen:
        if not any(start < other_end and other_start < end for other_start, other_end, _ in covered):
            spans.append((start, end, phonemes))
    spans.sort()
    replacements: list[tuple[int, int, str]] = []
    overrides: list[Override] = []
    position = 0
    for start, end, phonemes in spans:
        if start < position:
            continue
        before = text[start - 1] if start else " "
        after = text[end] if end < len(text) else " "
        space_before = "" if before.isspace() or before in "([\"" else " "
        space_after = "" if after.isspace() or after in ".,;:!?)]\"" else " "
        replacements.append((start, end, space_before + PLACEHOLDER + space_after))
        written = "".join(phonemes) if text.startswith("[[", start) else text[start:end]  # a block shows its phonemes
        overrides.append(Override(written, phonemes))
        position = end
    planned, edits = edits_of_replacements(text, replacements)
    return PronunciationPlan(planned, overrides, text, edits)


def _gaps(taken: list[tuple[int, int]], length: int) -> Iterator[tuple[int, int]]:
    position = 0
    for start, end in sorted(taken):
        if start > position:
            yield position, start
        position = max(position, end)
    if position < length:
        yield position, length


def restore_text(text: str, overrides: Sequence[Override]) -> str:
    """A sentence's text with its placeholders given back their written words."""
    replacements = iter(overrides)
    return _PLACEHOLDER_WORD.sub(lambda match: next(replacements, Override(match.group(), ())).written, text)


def placeholder_count(text: str) -> int:
    """How many placeholders a sentence's text holds."""
    return sum(1 for _ in _PLACEHOLDER_WORD.finditer(text))


def phonemes_in_parts(
    text: str, overrides: Sequence[Override], phonemize_part: Callable[[str], Sequence[str]]
) -> tuple[str, ...]:
    """A sentence's phonemes made piece by piece, as Piper does for inline phonemes: the text
    between placeholders phonemised on its own, each override's phonemes in between. The fallback
    for a sentence whose placeholders espeak-ng did not read as words of their own (a word next to
    one that reads the same, "Zizi"): the words keep their phonemes, the clause loses a little flow."""
    parts = _PLACEHOLDER_WORD.split(text)
    result: list[str] = []
    for index, part in enumerate(parts):
        spoken = list(phonemize_part(part)) if part.strip() else []
        while spoken and spoken[-1] == " " and index < len(parts) - 1:
            spoken.pop()
        if spoken and result and result[-1] != " ":
            result.append(" ")
        result.extend(spoken)
        if index < len(overrides):
            if result and result[-1] != " ":
                result.append(" ")
            result.extend(overrides[index].phonemes)
    return tuple(result)


def substitute_phonemes(phonemes: Sequence[str], overrides: Sequence[Override]) -> tuple[str, ...]:
    """`phonemes` with the placeholder's phonemes swapped, in order, for each override's.

    Raises ValueError when espeak-ng did not read each placeholder as one word of its own (the
    caller then knows the sentence cannot be spoken as planned).
    """
    result: list[str] = []
    word: list[str] = []
    remaining = iter(overrides)
    used = 0

    def close_word() -> None:
        nonlocal used
        if "".join(p for p in word if p not in _STRESS_AND_GLIDE) == PLACEHOLDER_PHONEMES:
            override = next(remaining, None)
            if override is None:
                raise ValueError("more placeholders in the phonemes than in the text")
            result.extend(override.phonemes)
            used += 1
        else:
            result.extend(word)
        word.clear()

    for phoneme in phonemes:
        if phoneme == " " or phoneme in _SPEECH_PUNCTUATION:
            close_word()
            result.append(phoneme)
        else:
            word.append(phoneme)
    close_word()
    if used != len(overrides):
        raise ValueError(f"{len(overrides)} placeholders in the text, {used} in the phonemes")
    return tuple(result)
