"""How a chunk of text is read before espeak-ng sees it: written forms spoken as words, heteronyms
read from their context, and the client's pronunciations (inline phonemes, lexicons).

`ReadingRules` says what is on; `prepare` turns a chunk into a `PronunciationPlan` (the text
espeak-ng reads, with a placeholder for each word whose phonemes are chosen here), and
`finish_sentence` puts the chosen phonemes and the written words back into each sentence.
Everything here is linear in the chunk, and runs where espeak-ng runs (the text processes).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from libs.text.heteronyms import heteronym_readings
from libs.text.normalizer import written_form_replacements
from libs.text.offsets import Edit, Taken, edits_of_replacements
from libs.text.pronounce import (
    PronunciationPlan,
    phoneme_symbols,
    phonemes_in_parts,
    placeholder_count,
    plan_pronunciations,
    restore_text,
    split_inline,
    substitute_phonemes,
)
from libs.text.scripts import UnreadWords


@dataclass(frozen=True)
class ReadingRules:
    """What the front end does to text before espeak-ng reads it."""

    written_forms: bool = False
    """Read the text as a person does: say numbers, money, dates, units, abbreviations, ... as words
    (libs.text.normalizer), and pass over words in scripts the voice can only name letter by letter
    (libs.text.scripts)."""
    heteronyms: bool = False
    """Choose the reading of heteronyms from their context (libs.text.heteronyms)."""
    lexicon: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """Lower-cased word -> phonemes, checked against the voice (libs.text.pronounce)."""


PIPER_READING = ReadingRules()
"""Text read exactly as piper-tts reads it (inline phonemes still apply)."""


def expand(text: str, rules: ReadingRules, unread: UnreadWords | None = None) -> str:
    """`text` with its written forms as words (inline phoneme blocks left as they are), and the
    words `unread` finds passed over."""
    return _expanded(text, rules, unread)[0]


def _expanded(text: str, rules: ReadingRules, unread: UnreadWords | None = None) -> tuple[str, list[Edit]]:
    if not rules.written_forms:
        return text, []
    replacements: list[tuple[int, int, str]] = []
    position = 0
    for part, is_block in split_inline(text):
        if not is_block:
            passed = [(start, end, " ") for start, end in unread.spans(part)] if unread is not None else []
            taken = Taken(len(part), passed)
            spoken = [replacement for replacement in written_form_replacements(part) if not taken.overlaps(replacement[0], replacement[1])]
            replacements += [(start + position, end + position, words) for start, end, words in passed + spoken]
        position += len(part)
    return edits_of_replacements(text, sorted(replacements))


def prepare(
    text: str, rules: ReadingRules, lexicon: Mapping[str, tuple[str, ...]] | None = None, unread: UnreadWords | None = None
) -> PronunciationPlan:
    """The plan for one chunk: its written forms expanded (and the words `unread` finds passed
    over), then every word whose phonemes are chosen here (inline blocks, `lexicon` (a request's,
    over `rules.lexicon`), heteronyms) replaced by the placeholder. `PronunciationPlan.written` maps
    a stretch of the plan back to `text`."""
    expanded, edits = _expanded(text, rules, unread)
    merged = dict(rules.lexicon)
    if lexicon:
        merged.update(lexicon)
    chosen: list[tuple[int, int, tuple[str, ...]]] = []
    if rules.heteronyms:
        chosen = [(found.start, found.end, phoneme_symbols(found.ipa)) for found in heteronym_readings(expanded)]
    plan = plan_pronunciations(expanded, merged, chosen)
    plan.from_source(text, edits)
    return plan


def finish_sentence(
    plan: PronunciationPlan, text: str, phonemes: Sequence[str], phonemize_part: Callable[[str], Sequence[str]]
) -> tuple[str, tuple[str, ...]]:
    """A sentence of the plan's text: its written words back, and the chosen phonemes in place of
    the placeholder's (`phonemize_part` phonemises a piece of text alone, for the rare sentence
    where espeak-ng did not read a placeholder as a word of its own). Sentences must be finished in
    order."""
    count = placeholder_count(text)
    if not count:
        return text, tuple(phonemes)
    overrides = plan.take(count)
    try:
        spoken = substitute_phonemes(phonemes, overrides)
    except ValueError:
        spoken = phonemes_in_parts(text, overrides, phonemize_part)
    return restore_text(text, overrides), spoken
