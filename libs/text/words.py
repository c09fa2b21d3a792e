"""Which phoneme ids of a sentence speak which written word, so word times can come from the model's
own durations.

espeak-ng separates the words it speaks with a space phoneme, so the ids of each spoken word are
known exactly. Written words do not always map one to one: espeak-ng reads "23" as two words, and
runs unstressed words into the next ("on the point" is said "ɔnðə pˈɔɪnt"). When the counts differ,
the written words, each as espeak-ng says it on its own, are paired with the spoken words by the
lengths of their sounds (one written word to up to three spoken ones, or up to three written words
to one spoken one); written words said as one share its phonemes in proportion to their own. Every
span starts and ends on a phoneme id boundary, so the times stay exact to a frame.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import accumulate
from typing import Final

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
    return [(word[0][1], word[-1][2]) for word in _spoken_words(phonemes, phoneme_id_map)]


def word_spans(
    text: str,
    phonemes: Sequence[str],
    phoneme_id_map: Mapping[str, Sequence[int]],
    phonemes_of: Callable[[str], Sequence[str]],
) -> tuple[WordSpan, ...]:
    """The written words of a sentence with the phoneme ids that speak each (see the module's note).

    `phonemes_of(word)` is what espeak-ng says for one written word on its own; it is asked only
    when the sentence's written and spoken words do not pair off one to one."""
    written = written_words(text)
    spoken = _spoken_words(phonemes, phoneme_id_map)
    if not written or not spoken:
        return ()
    if len(written) == len(spoken):
        return tuple(WordSpan(word, said[0][1], said[-1][2]) for word, said in zip(written, spoken, strict=False))
    alone = [_sounds(phonemes_of(word)) for word in written]
    said = [_sounds(phoneme for phoneme, _, _ in word) for word in spoken]
    spans: list[WordSpan] = []
    for (first_w, end_w), (first_s, end_s) in _aligned(alone, said):
        if end_w - first_w == 1:
            spans.append(WordSpan(written[first_w], spoken[first_s][0][1], spoken[end_s - 1][-1][2]))
        else:  # several written words said as one: split its phonemes in proportion to theirs
            spans.extend(_split(written[first_w:end_w], alone[first_w:end_w], spoken[first_s]))
    return tuple(spans)


_MAX_GROUP: Final = 3
"""Most words on one side of a pairing: "twenty-three thousand" for one written word, or three
unstressed words espeak-ng runs together ("as of the")."""
_STRESS: Final = frozenset("ˈˌ")


def _aligned(alone: Sequence[str], said: Sequence[str]) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """Written words (their sounds on their own) paired with spoken words: each pairing is one
    written word to one to three spoken words, or two or three written words to one spoken word,
    chosen so that the lengths of the sounds agree best (dynamic programming over both sequences;
    espeak-ng reduces words it runs together, so lengths, not exact sounds, decide)."""
    n, m = len(alone), len(said)
    written_at = [0, *accumulate(len(sound) for sound in alone)]  # sound length before each word
    spoken_at = [0, *accumulate(len(sound) for sound in said)]
    infinity = float("inf")
    cost = [[infinity] * (m + 1) for _ in range(n + 1)]
    step: list[list[tuple[int, int]]] = [[(0, 0)] * (m + 1) for _ in range(n + 1)]
    cost[0][0] = 0.0
    written_next, spoken_next = _next_sounding(alone), _next_sounding(said)
    for i in range(n + 1):
        # Only pairings near the diagonal are looked at: a sentence's words pair off in order, a
        # few at a time, so the alignment never strays far from it (linear, not quadratic, in words).
        center = i * m // n if n else 0
        for j in range(max(0, center - _BAND), min(m, center + _BAND) + 1):
            here = cost[i][j]
            if here == infinity:
                continue
            for a, b in _PAIRINGS:
                if i + a > n or j + b > m:
                    continue
                written_length = written_at[i + a] - written_at[i]
                spoken_length = spoken_at[j + b] - spoken_at[j]
                pairing = abs(written_length - spoken_length) / max(written_length, spoken_length, 1) + 0.25 * (a + b - 2)
                w, v = written_next[i], spoken_next[j]  # the groups' first sounds, "" for none
                if (alone[w][0] if w < i + a else "") != (said[v][0] if v < j + b else ""):
                    pairing += 0.5
                if here + pairing < cost[i + a][j + b]:
                    cost[i + a][j + b] = here + pairing
                    step[i + a][j + b] = (a, b)
    pairs = []
    i, j = n, m
    while i or j:
        a, b = step[i][j]
        if (a, b) == (0, 0):  # cannot happen while every pairing size is allowed; be safe
            break
        pairs.append(((i - a, i), (j - b, j)))
        i, j = i - a, j - b
    return pairs[::-1]


_BAND: Final = 8
"""How far from the diagonal (in spoken words) the alignment looks."""


def _next_sounding(sounds: Sequence[str]) -> list[int]:
    """For each index, the index of the first word from there on that has a sound (len: none)."""
    following, found = [len(sounds)] * (len(sounds) + 1), len(sounds)
    for index in range(len(sounds) - 1, -1, -1):
        if sounds[index]:
            found = index
        following[index] = found
    return following


_PAIRINGS: Final = tuple((a, 1) for a in range(1, _MAX_GROUP + 1)) + tuple((1, b) for b in range(2, _MAX_GROUP + 1))


def _split(words: Sequence[str], sounds: Sequence[str], spoken: Sequence[tuple[str, int, int]]) -> list[WordSpan]:
    """Spans for `words` said as the one spoken word `spoken` ((phoneme, first id, end id) each),
    cut at phoneme boundaries in proportion to each word's sounds on its own."""
    total = max(sum(len(sound) for sound in sounds), 1)
    spans, start, taken = [], 0, 0
    for index, (word, sound) in enumerate(zip(words, sounds, strict=False)):
        taken += len(sound)
        left = len(words) - index - 1
        end = len(spoken) - left if left == 0 else round(len(spoken) * taken / total)
        end = min(max(end, start + 1), len(spoken) - left)  # at least one phoneme each, if there are enough
        if end <= start:
            continue
        spans.append(WordSpan(word, spoken[start][1], spoken[end - 1][2]))
        start = end
    return spans


def _spoken_words(phonemes: Sequence[str], phoneme_id_map: Mapping[str, Sequence[int]]) -> list[list[tuple[str, int, int]]]:
    """Each spoken word as its phonemes with their [first, end) ids (the pad after each included)."""
    pad = len(phoneme_id_map[PAD])
    position = len(phoneme_id_map[BOS]) + pad
    words: list[list[tuple[str, int, int]]] = []
    current: list[tuple[str, int, int]] = []
    for phoneme in phonemes:
        ids = phoneme_id_map.get(phoneme)
        if ids is None:
            continue  # skipped by the id mapping too
        width = len(ids) + pad
        if phoneme == WORD_BREAK or _is_punctuation(phoneme):
            if current:
                words.append(current)
                current = []
        else:
            current.append((phoneme, position, position + width))
        position += width
    if current:
        words.append(current)
    return words


def _sounds(phonemes: Iterable[str]) -> str:
    """The phonemes that are sounds: no stress marks, word breaks or punctuation."""
    return "".join(p for p in phonemes if p not in _STRESS and p != WORD_BREAK and not _is_punctuation(p))


def _strip_punctuation(token: str) -> str:
    start, end = 0, len(token)
    while start < end and _is_punctuation(token[start]):
        start += 1
    while end > start and _is_punctuation(token[end - 1]):
        end -= 1
    return token[start:end]


def _is_punctuation(character: str) -> bool:
    return unicodedata.category(character).startswith("P")
