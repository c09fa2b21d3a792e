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
from libs.text.long_words import DEFAULT_MAX_WORD_CHARS

_LANGUAGE_SWITCH_FLAG: Final = re.compile(r"\([^)]+\)")
# Clause punctuation that does not end a sentence; Piper puts a space after it.
_MID_SENTENCE_TERMINATORS: Final = frozenset({",", ":", ";"})


@dataclass(frozen=True)
class PhonemizedClause:
    """One espeak-ng clause of a sentence: where a long sentence may be cut without changing a phoneme."""

    phonemes: tuple[str, ...]
    """The clause's phonemes as Piper writes them (its punctuation and the space after ", : ;" included)."""
    text_start: int
    """Index (in characters) of the clause's first character in the phonemised text."""
    text_end: int
    """Index (in characters) where the next clause starts."""


@dataclass(frozen=True)
class PhonemizedSentence:
    """One sentence as Piper groups it, with where it came from in the input text."""

    phonemes: tuple[str, ...]
    """One IPA codepoint (or punctuation mark, or space) per entry."""
    text_start: int
    """Index (in characters) of the sentence's first character in the phonemised text."""
    text_end: int
    """Index (in characters) just past the sentence, including the whitespace that follows it."""
    clauses: tuple[PhonemizedClause, ...] = ()
    """Its clauses in order; their phonemes joined are `phonemes`."""


def clause_phonemes(clause: EspeakClause) -> list[str]:
    """A clause's phonemes as Piper writes them: flags removed, punctuation kept, NFD codepoints."""
    phonemes = _LANGUAGE_SWITCH_FLAG.sub("", clause.phonemes) + clause.terminator
    if clause.terminator in _MID_SENTENCE_TERMINATORS:
        phonemes += " "
    return list(unicodedata.normalize("NFD", phonemes))


def phonemize_sentences(
    text: str, voice: str = DEFAULT_ESPEAK_VOICE, max_word_chars: int = DEFAULT_MAX_WORD_CHARS
) -> list[PhonemizedSentence]:
    """Sentences of `text` as Piper phonemises them, each with its span in `text` and its clauses.

    Like Piper, a sentence closed by espeak-ng is kept even if it has no phonemes, and a trailing
    clause without a sentence end is kept only if it has phonemes. Words longer than
    `max_word_chars` are broken first (`libs.text.long_words.break_long_words`).
    """
    sentences: list[PhonemizedSentence] = []
    clauses: list[PhonemizedClause] = []
    for clause in espeak_engine().clauses(text, voice, max_word_chars):
        clauses.append(PhonemizedClause(tuple(clause_phonemes(clause)), clause.text_start, clause.text_end))
        if clause.ends_sentence:
            sentences.append(_sentence_of(clauses))
            clauses = []
    if any(clause.phonemes for clause in clauses):
        sentences.append(_sentence_of(clauses))
    return sentences


def _sentence_of(clauses: list[PhonemizedClause]) -> PhonemizedSentence:
    phonemes = tuple(phoneme for clause in clauses for phoneme in clause.phonemes)
    return PhonemizedSentence(phonemes, clauses[0].text_start, clauses[-1].text_end, tuple(clauses))


def phonemize(text: str, voice: str = DEFAULT_ESPEAK_VOICE) -> list[list[str]]:
    """Phonemes of `text` grouped by sentence: the same value as Piper's `EspeakPhonemizer.phonemize`."""
    return [list(sentence.phonemes) for sentence in phonemize_sentences(text, voice)]
