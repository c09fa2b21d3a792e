"""Mandarin tone sandhi: the tones a speaker says, from the citation tones of each prosodic word.

- 不 bu4 is said bu2 before a fourth tone (不是 bu2 shi4, 不对 bu2 dui4), bu4 elsewhere.
- 一 yi1 is said yi2 before a fourth tone (一个 yi2 ge4), yi4 before the other tones (一天 yi4
  tian1, 一起 yi4 qi3), and keeps yi1 where it is a number: at the end of a word (统一), after 第
  or 初 (第一, 初一), before 月, 日, 号 (dates), and inside a number (十一).
- Third-tone chains inside a prosodic word: two third tones say the first as a second tone (你好
  ni2 hao3); in three, the first keeps its tone when it is a word of its own before a two-syllable
  word (小 + 雨伞: xiao3 yu2 san3), else both first ones rise (展览馆 zhan2 lan2 guan3); in longer
  chains every one but the last rises. A reduplicated third-tone verb rises before its neutral
  copy (想想 xiang2 xiang5). Between words nothing changes: the word is the unit of a chain.

Neutral tones (5) stop a chain; a syllable with no reading ("") is left alone.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Final

NUMBER_CHARS: Final = frozenset("零一二两三四五六七八九十百千万亿幺")
_YI_AS_NUMBER_AFTER: Final = frozenset("第初十")
_YI_AS_NUMBER_BEFORE: Final = frozenset("月日号")


def _tone(syllable: str) -> int:
    return int(syllable[-1]) if syllable else 0


def _with_tone(syllable: str, tone: int) -> str:
    return syllable[:-1] + str(tone)


def spoken_tones(
    chars: str, syllables: Sequence[str], is_one_word: Callable[[str], bool] | None = None
) -> list[str]:
    """The syllables of one prosodic word (`chars`, citation `syllables`) as they are said.
    `is_one_word(text)` says whether a stretch of characters is a word of its own (jieba's
    dictionary), to read a chain of three third tones as 1 + 2 or 2 + 1."""
    spoken = list(syllables)
    for index, character in enumerate(chars):
        following = syllables[index + 1] if index + 1 < len(syllables) else ""
        if character == "不" and spoken[index] == "bu4":
            if _tone(following) == 4:
                spoken[index] = "bu2"
        elif character == "一" and spoken[index] == "yi1":
            spoken[index] = _yi(chars, index, following)
    _third_tones(chars, spoken, is_one_word)
    return spoken


def _yi(chars: str, index: int, following: str) -> str:
    before = chars[index - 1] if index else ""
    after = chars[index + 1] if index + 1 < len(chars) else ""
    if not following or before in _YI_AS_NUMBER_AFTER or after in _YI_AS_NUMBER_BEFORE:
        return "yi1"
    if (after in NUMBER_CHARS and after not in "百千万亿") or (before in NUMBER_CHARS and before != "一"):
        return "yi1"
    if before and before == after:  # 看一看: the verb's light copy
        return "yi5"
    # 个 is ge4 even where it is said light (这个 zhe4 ge5): 一个 is yi2 ge4 either way.
    return "yi2" if _tone(following) == 4 or after == "个" else "yi4"


def _third_tones(chars: str, spoken: list[str], is_one_word: Callable[[str], bool] | None) -> None:
    index = 0
    while index < len(spoken):
        if _tone(spoken[index]) != 3:
            index += 1
            continue
        end = index
        while end + 1 < len(spoken) and _tone(spoken[end + 1]) == 3:
            end += 1
        length = end - index + 1
        if length == 1:
            # 想想: a third tone before its own neutral copy rises.
            if index + 1 < len(spoken) and chars[index + 1] == chars[index] and _tone(spoken[index + 1]) == 5:
                spoken[index] = _with_tone(spoken[index], 2)
        elif length == 2:
            spoken[index] = _with_tone(spoken[index], 2)
        elif length == 3:
            one_plus_two = is_one_word is not None and is_one_word(chars[index + 1 : end + 1]) and not is_one_word(chars[index : index + 2])
            if not one_plus_two:
                spoken[index] = _with_tone(spoken[index], 2)
            spoken[index + 1] = _with_tone(spoken[index + 1], 2)
        else:
            for position in range(index, end):
                spoken[position] = _with_tone(spoken[position], 2)
        index = end + 1
