"""Words in scripts a voice's espeak-ng language cannot read, found so that they are passed over.

espeak-ng reads a letter of an alphabet its language has no rules for by its name: every ideograph
is "Chinese letter", Thai is "Thai letter e28", Arabic "Arabic meem", and a Russian word in an
English voice is spelled ("pe er i ve ..."). A listener hears a string of names where the text has a
word. A person reading the text aloud passes such a word over, and so does the front end when it
reads as a person does (`ReadingRules.written_forms`).

Which words those are is asked of espeak-ng itself, in the voice at hand. A run of letters outside
the Latin script is read when espeak-ng switches to a language of its own for it (Hindi, Korean,
Armenian: its reading carries a language flag such as "(hi)") and neither spells it (a word or more
per letter) nor names a letter in it (the voice's own reading of the word "letter"). Everything
else of two letters or more is passed over: Greek and Russian words are read by their letters'
names. A lone letter is kept unless espeak-ng says "letter" for it: a symbol in a formula is read by
its name (α "alpha", µ "micro", Δ "delta").
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Callable, Iterator
from typing import Final

from libs.text.espeak import espeak_engine

RUNS_REMEMBERED: Final = 4096
"""Runs whose espeak-ng reading a voice's `UnreadWords.of_voice` remembers."""
LETTER_WORD: Final = "letter"
"""The word espeak-ng says before a letter it names (in an English voice)."""
MAX_RUN_CHARS: Final = 32
"""A longer run is judged by its first this many characters (a run is one language)."""
_STRESS: Final = frozenset("ˈˌ")
_LANGUAGE_FLAG: Final = re.compile(r"\([a-z]{2,3}(?:-[a-z0-9]+)*\)")


def is_foreign_letter(character: str) -> bool:
    """Whether `character` is a letter outside the Latin script."""
    if character.isascii() or not character.isalpha():
        return False
    return not unicodedata.name(character, "").startswith("LATIN")


def foreign_runs(text: str) -> Iterator[tuple[int, int]]:
    """(start, end) of each run of letters outside the Latin script in `text`, with the combining
    marks that follow them (vowel signs and viramas are marks)."""
    start = None
    for index, character in enumerate(text):
        if is_foreign_letter(character) or (start is not None and unicodedata.category(character).startswith("M")):
            if start is None:
                start = index
        elif start is not None:
            yield start, index
            start = None
    if start is not None:
        yield start, len(text)


def script_name(character: str) -> str:
    """The script of a letter as its Unicode name begins ("Cyrillic", "Arabic", "CJK", ...)."""
    word = unicodedata.name(character, "").split(" ", 1)[0]
    return word if word.isupper() and len(word) <= 3 else word.title()


def foreign_scripts(text: str) -> list[str]:
    """The scripts of the letters outside the Latin script in `text`, in order of first use."""
    names = dict.fromkeys(script_name(character) for character in text if is_foreign_letter(character))
    return list(names)


def _is_punctuation(character: str) -> bool:
    return unicodedata.category(character).startswith("P")


def _unstressed(phonemes: str) -> str:
    return "".join(phoneme for phoneme in phonemes if phoneme not in _STRESS)


class UnreadWords:
    """Finds the runs of a text that a voice's espeak-ng reads only as letter names."""

    def __init__(self, read_alone: Callable[[str], str]) -> None:
        """`read_alone(text)`: espeak-ng's phonemes for `text` on its own in the voice, as it writes
        them (word boundaries as spaces, language flags kept); it is called once per distinct run,
        so it should remember. Nothing is read until the first text with a run."""
        self._read_alone = read_alone
        self._letter: str | None = None

    @classmethod
    def of_voice(cls, espeak_voice: str, max_word_chars: int) -> UnreadWords:
        """For the text processes' espeak-ng in `espeak_voice`, each run read once (its long words
        broken at `max_word_chars`, as the front end breaks them)."""

        @functools.lru_cache(maxsize=RUNS_REMEMBERED)
        def read_alone(text: str) -> str:
            return " ".join(clause.phonemes for clause in espeak_engine().clauses(text, espeak_voice, max_word_chars))

        return cls(read_alone)

    def is_unread(self, run: str) -> bool:
        """Whether espeak-ng names or spells the letters of `run` instead of reading it."""
        run = run[:MAX_RUN_CHARS]
        letters = sum(1 for character in run if character.isalpha())
        reading = self._read_alone(run)
        if self._letter is None:
            self._letter = _unstressed(_LANGUAGE_FLAG.sub("", self._read_alone(LETTER_WORD)))
        phonemes = _LANGUAGE_FLAG.sub("", reading)
        if self._letter and self._letter in _unstressed(phonemes):
            return True
        if letters < 2:
            return False
        words = sum(1 for word in phonemes.split(" ") if word)
        return words >= letters or not _LANGUAGE_FLAG.search(reading)

    def spans(self, text: str) -> list[tuple[int, int]]:
        """(start, end) of every run of `text` that is passed over. A run that starts its clause (at
        the start, after punctuation, or after another run passed over) takes the punctuation after
        it along: it was that run's, and left alone ("。 , !") espeak-ng would read it by name."""
        spans: list[tuple[int, int]] = []
        for start, end in foreign_runs(text):
            if not self.is_unread(text[start:end]):
                continue
            before = start
            while before > 0 and text[before - 1].isspace():
                before -= 1
            if before == 0 or _is_punctuation(text[before - 1]) or (spans and spans[-1][1] == before):
                while end < len(text) and (text[end].isspace() or _is_punctuation(text[end])):
                    end += 1
            spans.append((start, end))
        return spans

    def blanked(self, text: str) -> str:
        """`text` with every run that is passed over made spaces (so that no word is shown for it)."""
        pieces, position = [], 0
        for start, end in self.spans(text):
            pieces += [text[position:start], " " * (end - start)]
            position = end
        return "".join(pieces) + text[position:]
