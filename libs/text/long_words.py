"""Words too long for espeak-ng, broken before it reads them.

espeak-ng 1.52 keeps a word's suffix phonemes in a 200-byte stack buffer and, for suffixes its
English rules let stack ("'s", "ness"), appends one per suffix without a bound: a long enough word
("s'" * 68, "dog" + "'s" * 80, "good" + "ness" * 70, "s?" * 100) overflows it and the process
aborts ("buffer overflow detected"), and with it whatever process hosts it. No release on PyPI
fixes it (espeakng-loader 0.2.4, espeak-ng 1.52.0, is the newest). Breaking every word longer than
any real word removes that input for good; the phonemiser pool (libs.text.phonemizer_pool) stays
as the safety net for crashes nobody has found yet.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from typing import Final

# Each stacked suffix adds about 3 bytes of phonemes per 2 characters, so the 200-byte buffer holds
# about 130 characters of them. No word of a language we speak is near 64 characters, and 64
# characters of the densest suffix ("'s") make ~96 bytes, half the buffer.
DEFAULT_MAX_WORD_CHARS: Final = 64
# What espeak-ng reads as part of a word besides letters, marks and digits: it turns U+2019, U+00B4,
# U+2032 and a "?" or U+2018 between two letters into an apostrophe (each crashed as "s" + it, x100).
_IN_WORD_PUNCTUATION: Final = frozenset("'`?\u2018\u2019\u00b4\u2032")
_APOSTROPHE_LOOKBACK: Final = 8


@functools.lru_cache(maxsize=8)
def _long_token(min_chars: int) -> re.Pattern[str]:
    return re.compile(rf"\S{{{min_chars},}}")


def break_long_words(text: str, max_word_chars: int = DEFAULT_MAX_WORD_CHARS) -> str:
    """`text` with no word longer than `max_word_chars` characters, for espeak-ng's fixed buffers.

    A word is a run of letters, marks, digits and the punctuation espeak-ng keeps inside a word
    (apostrophes). In a longer run, the character that would make it too long becomes a space, or
    an apostrophe among the few before it, so the length of the text stays the same. Text without
    a run of `max_word_chars` non-space characters (all ordinary text) comes back unchanged, found
    by one regular-expression search.
    """
    pattern = _long_token(max_word_chars + 1)
    if pattern.search(text) is None:
        return text
    characters = list(text)
    for token in pattern.finditer(text):
        run = 0
        for index in range(token.start(), token.end()):
            character = characters[index]
            if character not in _IN_WORD_PUNCTUATION and unicodedata.category(character)[0] not in "LMN":
                run = 0
                continue
            run += 1
            if run <= max_word_chars:
                continue
            cut = index
            for back in range(index, max(index - _APOSTROPHE_LOOKBACK, token.start()), -1):
                if characters[back] in _IN_WORD_PUNCTUATION:
                    cut = back
                    break
            characters[cut] = " "
            run = index - cut
    return "".join(characters)
