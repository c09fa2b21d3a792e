"""How a run of Chinese characters is read: numbered pinyin per character, words for prosody.

1. jieba cuts the run into words, and pypinyin reads each word with its phrase dictionary (银行
   yin2 hang2, 行走 xing2 zou3); a character outside every phrase gets its most common reading.
2. `polyphones.PHRASES` puts in words and idioms that dictionary lacks or reads in an older sense.
3. jieba also tags each word with its part of speech; `polyphones` rules read
   the function words and one-character verbs from those neighbours (跑得快 de5, 我们得走 dei3,
   很长 chang2, 长得快 zhang3, 按时还 huan2, 那只猫 zhi1).
4. A reduplicated one-syllable verb's second syllable is neutral (想想 xiang3 xiang5).
5. 一 and 不 get their dictionary tones (yi1, bu4): pypinyin's phrases write some with tone
   sandhi already, and sandhi is applied once, later, to every word alike (libs.text.zh.sandhi).

The words jieba finds are the prosodic words: tone sandhi works inside them, and the phonemes run
a word's syllables together as espeak-ng writes a word of its dictionary.
"""

from __future__ import annotations

import functools
import logging
import re
from dataclasses import dataclass
from typing import Final

from libs.text.zh.polyphones import Context, apply_context_rules, apply_phrases, neutral_reduplication

HAN: Final = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+")
"""A run of CJK ideographs (the basic block, extension A and the compatibility block)."""
_PINYIN: Final = re.compile(r"^[a-z]+[1-5]$")
# Function words that lean on the word before them (one prosodic word with it).
CLITICS: Final = frozenset("的地得了着过们吗呢吧啊呀么")


@dataclass(frozen=True)
class ReadWord:
    """One prosodic word of a Han run."""

    text: str
    """Its characters."""
    tag: str
    """jieba's part-of-speech tag of its first word ("v", "n", "uj", ...)."""
    syllables: tuple[str, ...]
    """Citation reading, one numbered-pinyin syllable per character ("" where none is known)."""


@functools.cache
def _jieba():
    """jieba's tokenizer with part-of-speech tags, loaded once per process (about 0.8 s)."""
    import jieba
    import jieba.posseg

    jieba.setLogLevel(logging.WARNING)
    jieba.initialize()
    return jieba.posseg


def _pypinyin(words: list[str]) -> list[str]:
    """pypinyin's readings of a run cut into jieba's words: a word in its phrase dictionary is read
    as that phrase, any other with pypinyin's own segmentation inside the word. A phrase never
    spans two of jieba's words, so 他在行走 is not read with the phrase 在行 (zai4 hang2)."""
    from pypinyin import Style, lazy_pinyin
    from pypinyin.constants import PHRASES_DICT

    def no_reading(chars: str) -> list[str]:
        return [""] * len(chars)

    readings: list[str] = []
    for word in words:
        read = lazy_pinyin([word] if word in PHRASES_DICT else word, style=Style.TONE3, neutral_tone_with_five=True, errors=no_reading)
        if len(read) != len(word):  # never seen; read character by character rather than misalign
            read = [(lazy_pinyin(ch, style=Style.TONE3, neutral_tone_with_five=True, errors=no_reading) or [""])[0] for ch in word]
        readings.extend(reading if _PINYIN.match(reading) else "" for reading in read)
    return readings


def tagged_words(run: str) -> list[tuple[str, str]]:
    """jieba's words of a Han run with their part-of-speech tags."""
    return [(pair.word, pair.flag) for pair in _jieba().cut(run, HMM=True)]


def read_run(run: str, after: str = "") -> list[ReadWord]:
    """The prosodic words of one run of Han characters with their citation readings; `after` is
    the text that follows the run (a clause end or not matters to some rules)."""
    words = tagged_words(run)
    readings = _pypinyin([word for word, _ in words])
    word_of: list[int] = []
    starts: list[tuple[str, str, int]] = []
    position = 0
    for index, (word, tag) in enumerate(words):
        starts.append((word, tag, position))
        word_of.extend([index] * len(word))
        position += len(word)
    apply_phrases(run, readings, frozenset(start for _, _, start in starts) | {len(run)})
    apply_context_rules(Context(run, readings, word_of, starts, after))
    neutral_reduplication(run, readings, [words[word_of[index]][1] for index in range(len(run))])
    for index, character in enumerate(run):
        if character == "一" and readings[index].startswith("yi"):
            readings[index] = "yi1"
        elif character == "不" and readings[index] in ("bu2", "bu4"):
            readings[index] = "bu4"
    return _prosodic_words(words, readings)


def _prosodic_words(words: list[tuple[str, str]], readings: list[str]) -> list[ReadWord]:
    """jieba's words with each clitic (的, 了, 们, ...) joined to the word before it."""
    grouped: list[ReadWord] = []
    position = 0
    for word, tag in words:
        syllables = tuple(readings[position : position + len(word)])
        position += len(word)
        if grouped and len(word) == 1 and word in CLITICS and tag[:1] in ("u", "y", "k"):
            previous = grouped[-1]
            grouped[-1] = ReadWord(previous.text + word, previous.tag, previous.syllables + syllables)
        else:
            grouped.append(ReadWord(word, tag, syllables))
    return grouped
