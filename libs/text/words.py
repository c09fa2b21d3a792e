"""Which phoneme ids of a sentence speak which written word, so word times can come from the model's
own durations.

espeak-ng separates the words it speaks with a space phoneme, so the ids of each spoken word are
known exactly. Written words do not always map one to one: espeak-ng reads "23" as two words and
"e.g." as two. So each written word is matched to as many spoken words as espeak-ng makes of it on
its own (`spoken_words_of`); when the two counts still disagree (context changes a reading), the
remaining spoken words go, in order, to the remaining written words. The times stay exact: every
span starts and ends on a phoneme id boundary.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from typing import Callable, Final, Mapping, Sequence

from libs.text.phoneme_ids import BOS, PAD

WORD_BREAK: Final = " "
_TOKEN: Final = re.compile(r"\S+")


@dataclass(frozen=True)
class WordSpan:
    """A written word and the phoneme ids that speak it."""

    text: str
    """The word as written, without the punctuation around it."""
    first_id: int
    """Index of its first phoneme id in the sentence's ids."""
    end_id: int
    """Index just past its last phoneme id (and the pad after it)."""


def written_words(text: str) -> list[str]:
    """The words of `text` as written: whitespace-separated, punctuation around each stripped."""
    words = []
    for token in _TOKEN.findall(text):
        word = _strip_punctuation(token)
        if word:
            words.append(word)
    return words


def spoken_word_spans(phonemes: Sequence[str], phoneme_id_map: Mapping[str, Sequence[int]]) -> list[tuple[int, int]]:
    """[first, end) id ranges of each word espeak-ng spoke, in the id layout `^ _ p1 _ ... pn _ $`
    (punctuation phonemes belong to no word)."""
    pad = len(phoneme_id_map[PAD])
    position = len(phoneme_id_map[BOS]) + pad
    spans: list[tuple[int, int]] = []
    start: int | None = None
    end = position
    for phoneme in phonemes:
        ids = phoneme_id_map.get(phoneme)
        if ids is None:
            continue  # skipped by the id mapping too
        width = len(ids) + pad
        if phoneme == WORD_BREAK or _is_punctuation(phoneme):
            if start is not None:
                spans.append((start, end))
                start = None
        else:
            if start is None:
                start = position
            end = position + width
        position += width
    if start is not None:
        spans.append((start, end))
    return spans


def word_spans(
    text: str,
    phonemes: Sequence[str],
    phoneme_id_map: Mapping[str, Sequence[int]],
    spoken_words_of: Callable[[str], int],
) -> tuple[WordSpan, ...]:
    """The written words of a sentence with the phoneme ids that speak each (see the module's note)."""
    written = written_words(text)
    spoken = spoken_word_spans(phonemes, phoneme_id_map)
    if not written or not spoken:
        return ()
    counts = [1] * len(written) if len(written) == len(spoken) else [max(0, spoken_words_of(word)) for word in written]
    spans: list[WordSpan] = []
    next_spoken = 0
    for index, (word, count) in enumerate(zip(written, counts)):
        remaining_written = len(written) - index - 1
        # Leave at least one spoken word for each written word still to come, and give the last
        # written word whatever is left.
        available = len(spoken) - next_spoken - remaining_written
        take = available if remaining_written == 0 else min(max(count, 1), available)
        if take <= 0:
            break
        first, end = spoken[next_spoken][0], spoken[next_spoken + take - 1][1]
        spans.append(WordSpan(word, first, end))
        next_spoken += take
    return tuple(spans)


def _strip_punctuation(token: str) -> str:
    start, end = 0, len(token)
    while start < end and _is_punctuation(token[start]):
        start += 1
    while end > start and _is_punctuation(token[end - 1]):
        end -= 1
    return token[start:end]


def _is_punctuation(character: str) -> bool:
    return unicodedata.category(character).startswith("P")
