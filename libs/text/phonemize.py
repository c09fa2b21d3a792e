"""Text to espeak-ng IPA phonemes, grouped into sentences exactly as piper-tts 1.8.0 groups them.

Per clause: drop espeak-ng's language-switch flags ("(en)", "(fr)"), append the clause's
punctuation (". ? ! , : ;") and a space after ", : ;", then split the string into codepoints after
NFD decomposition, so accents become phonemes of their own. A clause that espeak-ng marks as a
sentence end closes the sentence.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from typing import Final

from libs.text.espeak import DEFAULT_ESPEAK_VOICE, EspeakClause, espeak_engine

_LANGUAGE_SWITCH_FLAG: Final = re.compile(r"\([^)]+\)")
# Clause punctuation that does not end a sentence; Piper puts a space after it.
_MID_SENTENCE_TERMINATORS: Final = frozenset({",", ":", ";"})


@dataclass(frozen=True)
class PhonemizedSentence:
    """One sentence as Piper groups it, with where it came from in the input text."""

    phonemes: tuple[str, ...]
    """One IPA codepoint (or punctuation mark, or space) per entry."""
    text_start: int
    """Index (in characters) of the sentence's first character in the phonemised text."""
    text_end: int
    """Index (in characters) just past the sentence, including the whitespace that follows it."""


def clause_phonemes(clause: EspeakClause) -> list[str]:
    """A clause's phonemes as Piper writes them: flags removed, punctuation kept, NFD codepoints."""
    phonemes = _LANGUAGE_SWITCH_FLAG.sub("", clause.phonemes) + clause.terminator
    if clause.terminator in _MID_SENTENCE_TERMINATORS:
        phonemes += " "
    return list(unicodedata.normalize("NFD", phonemes))


def phonemize_sentences(text: str, voice: str = DEFAULT_ESPEAK_VOICE) -> list[PhonemizedSentence]:
    """Sentences of `text` as Piper phonemises them, each with its span in `text`.

    Like Piper, a sentence closed by espeak-ng is kept even if it has no phonemes, and a trailing
    clause without a sentence end is kept only if it has phonemes.
    """
    sentences: list[PhonemizedSentence] = []
    phonemes: list[str] = []
    sentence_start: int | None = None
    last_end = 0
    for clause in espeak_engine().clauses(text, voice):
        if sentence_start is None:
            sentence_start = clause.text_start
        phonemes.extend(clause_phonemes(clause))
        last_end = clause.text_end
        if clause.ends_sentence:
            sentences.append(PhonemizedSentence(tuple(phonemes), sentence_start, last_end))
            phonemes, sentence_start = [], None
    if phonemes and sentence_start is not None:
        sentences.append(PhonemizedSentence(tuple(phonemes), sentence_start, last_end))
    return sentences


def phonemize(text: str, voice: str = DEFAULT_ESPEAK_VOICE) -> list[list[str]]:
    """Phonemes of `text` grouped by sentence: the same value as Piper's `EspeakPhonemizer.phonemize`."""
    return [list(sentence.phonemes) for sentence in phonemize_sentences(text, voice)]
