"""Readings of polyphones that pypinyin's phrase dictionary leaves to a default, chosen from context.

pypinyin reads a character inside a phrase it knows (银行 yin2 hang2, 行走 xing2 zou3) and falls back to
the character's most common reading elsewhere. That fallback is wrong for the function words a
phrase dictionary cannot hold (得 after a verb, 地 after an adverb, 着 as a result), for verbs used
on their own (长 "grow" against 长 "long", 还 "give back" against 还 "still") and for measure
words (一只猫). The rules here decide those from the words around the character: the previous and
next jieba words with their part-of-speech tags, and the characters next to it. Each rule is a
grammatical pattern, not a sentence; `PHRASES` adds words and idioms the phrase dictionary lacks
or reads in an older sense.

Readings are citation readings (numbered pinyin, neutral tone 5); tone sandhi comes later
(libs.text.zh.sandhi).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

PHRASES: Final[dict[str, str]] = {
    # Words and idioms pypinyin 0.55 reads in another sense, or does not know.
    "不得了": "bu4 de2 liao3",
    "大夫": "dai4 fu5",
    "正月": "zheng1 yue4",
    "和面": "huo2 mian4",
    "和泥": "huo2 ni2",
    "露一手": "lou4 yi1 shou3",
    "露馅": "lou4 xian4",
    "量杯": "liang2 bei1",
    "量体温": "liang2 ti3 wen1",
    "好学": "hao4 xue2",
    "空白": "kong4 bai2",
    "几行": "ji3 hang2",
    "一行字": "yi1 hang2 zi4",
    "结果子": "jie1 guo3 zi5",
    "又吐又泻": "you4 tu4 you4 xie4",
    "上吐下泻": "shang4 tu4 xia4 xie4",
    "折本": "she2 ben3",
    "肚子": "du4 zi5",
    "相片": "xiang4 pian4",
    "照片": "zhao4 pian4",
    "头发": "tou2 fa4",
    "选为": "xuan3 wei2",
    "称为": "cheng1 wei2",
    "成为": "cheng2 wei2",
    "作为": "zuo4 wei2",
    "认为": "ren4 wei2",
    "以为": "yi3 wei2",
    "行当": "hang2 dang4",
    "为人民": "wei4 ren2 min2",
}

PERSONS: Final = frozenset(["我", "你", "您", "他", "她", "它", "我们", "你们", "他们", "她们", "咱们", "大家", "谁", "自己", "人家"])
DEGREE_ADVERBS: Final = frozenset(["很", "太", "真", "挺", "更", "最", "非常", "特别", "十分", "这么", "那么", "多么", "好", "又", "越来越", "比较", "有点", "有点儿"])
NUMERALS: Final = frozenset("一二两三四五六七八九十百千万几每半这那哪某")
# Verbs whose result is "reached", 着 zhao2: 睡着, 找着, 猜着, 想不着, 够得着.
ZHAO_VERBS: Final = frozenset("睡找猜想够摸见借买用打点抓逮")
SURNAMES: Final[dict[str, str]] = {
    "曾": "zeng1", "单": "shan4", "解": "xie4", "仇": "qiu2", "朴": "piao2", "查": "zha1", "区": "ou1",
    "乐": "yue4", "缪": "miao4", "覃": "qin2", "盖": "ge3", "召": "shao4", "华": "hua4", "任": "ren2",
}
_CLAUSE_END: Final = "，。！？；：、,.!?;:"


@dataclass
class Context:
    """One Han run: its characters, their readings (changed in place) and its jieba words."""

    chars: str
    """The run's characters."""
    readings: list[str]
    """One numbered-pinyin reading per character."""
    word_of: list[int]
    """Index of the jieba word each character belongs to."""
    words: list[tuple[str, str, int]]
    """(word, part-of-speech tag, index of its first character) in order."""
    after: str = ""
    """What follows the run in the sentence (punctuation, nothing): tells a clause end."""

    def char(self, index: int) -> str:
        return self.chars[index] if 0 <= index < len(self.chars) else ""

    def word_at(self, index: int) -> tuple[str, str]:
        """(word, tag) of the character at `index`."""
        word, tag, _ = self.words[self.word_of[index]]
        return word, tag

    def previous_word(self, index: int) -> tuple[str, str]:
        """(word, tag) of the jieba word before the one holding `index` ("", "") at the start."""
        position = self.word_of[index] - 1
        return self.words[position][:2] if position >= 0 else ("", "")

    def next_word(self, index: int) -> tuple[str, str]:
        """(word, tag) of the jieba word after the one holding `index` ("", "") at the end."""
        position = self.word_of[index] + 1
        return self.words[position][:2] if position < len(self.words) else ("", "")

    def alone(self, index: int) -> bool:
        """True when the character is a jieba word of its own."""
        return len(self.word_at(index)[0]) == 1

    def clause_ends_after(self, index: int) -> bool:
        """True when nothing but a clause end follows the character."""
        return index == len(self.chars) - 1 and (not self.after or self.after[0] in _CLAUSE_END)


def _is_verb_or_adjective(tag: str) -> bool:
    return tag[:1] in ("v", "a") or tag in ("d", "l", "i")


def _de(context: Context, index: int) -> str | None:
    """得: de5 after a verb or adjective (跑得快), dei3 "must" after a person (我们得走), de2 "get"
    before 了 with a person before it (他得了第一)."""
    if not context.alone(index):
        return None
    previous, previous_tag = context.previous_word(index)
    following = context.char(index + 1)
    if previous in PERSONS or previous_tag == "r" or previous in ("还", "就", "也", "都", "总", "必须", "非") or not previous:
        return "de2" if following == "了" else "dei3"
    if _is_verb_or_adjective(previous_tag) or previous_tag == "m":
        return "de5"
    return None


def _di(context: Context, index: int) -> str | None:
    """地: de5 after an adverb or a reduplication (慢慢地, 一个一个地), as jieba tags it (uv)."""
    word, tag = context.word_at(index)
    if word == "地" and tag == "uv":
        return "de5"
    previous = context.previous_word(index)[0]
    if word == "地" and len(previous) >= 2 and previous[-1] == previous[-2]:
        return "de5"
    if word == "地" and context.chars[max(0, index - 4) : index].count("个") == 2:
        return "de5"
    return None


def _zhe(context: Context, index: int) -> str | None:
    """着: zhao2 for a reached result (睡着了, 想不着, 找着), else the phrase dictionary's."""
    before = context.char(index - 1)
    if before in ZHAO_VERBS and (context.char(index + 1) == "了" or context.clause_ends_after(index)):
        return "zhao2"
    if before in ("不", "得") and context.char(index - 2) in ZHAO_VERBS:
        return "zhao2"
    return None


def _chang(context: Context, index: int) -> str | None:
    """长: chang2 "long" after a degree adverb or at a clause end (很长, 又黑又长), zhang3 "grow"
    before 得, 着, 了, 大, 出, 高 (长得快, 长着)."""
    if not context.alone(index):
        return None
    previous = context.previous_word(index)[0]
    following = context.char(index + 1)
    if following in ("得", "着", "了", "大", "出", "高", "成"):
        return "zhang3"
    if previous in DEGREE_ADVERBS or context.clause_ends_after(index) or following == "长":
        return "chang2"
    return None


def _huan(context: Context, index: int) -> str | None:
    """还: huan2 "give back" before what is given back or at a clause end (按时还, 还钱, 还给)."""
    if not context.alone(index):
        return None
    following = context.next_word(index)[0]
    if following[:1] in ("给", "钱", "款", "债", "账", "书") or context.clause_ends_after(index):
        return "huan2"
    return None


def _zhi(context: Context, index: int) -> str | None:
    """只: zhi1, a measure word, after a numeral or demonstrative (那只猫) unless a verb follows."""
    if context.char(index - 1) in NUMERALS and context.next_word(index)[1][:1] not in ("v", "d", "p", ""):
        return "zhi1"
    return None


def _gan(context: Context, index: int) -> str | None:
    """干: gan1 "dry" after 已经/都/快/没/晒/很 at a clause end (衣服已经干了)."""
    previous = context.previous_word(index)[0]
    following = context.char(index + 1)
    if context.alone(index) and previous in ("已经", "都", "快", "没", "还没", "晒", "吹", "很", "太", "擦") and (
        following == "了" or context.clause_ends_after(index)
    ):
        return "gan1"
    return None


def _jiao_teach(context: Context, index: int) -> str | None:
    """教 on its own is the verb "teach", jiao1 (教我们, 教书); the noun reading lives in words."""
    return "jiao1" if context.alone(index) else None


def _jiao_sleep(context: Context, index: int) -> str | None:
    """觉 after 睡, 午, 好 or the measure 一 is "sleep", jiao4 (睡了一个好觉, 一觉醒来)."""
    before = context.char(index - 1)
    if before in ("睡", "午", "好") or (before == "一" and context.char(index + 1) != "得"):
        return "jiao4"
    return None


def _shu_count(context: Context, index: int) -> str | None:
    """数 as "count", shu3, in 数了数 / 数一数 / 数数 and before 着, 过, 不."""
    if context.char(index + 1) in ("了", "一") and context.char(index + 2) == "数":
        return "shu3"
    if context.char(index - 2) == "数" and context.char(index - 1) in ("了", "一"):
        return "shu3"
    if context.alone(index) and context.char(index + 1) in ("着", "过", "不") and context.word_at(index)[1] != "m":
        return "shu3"
    return None


def _dang_pawn(context: Context, index: int) -> str | None:
    """当 at a clause end after 了 with 把 before it is "pawn", dang4 (把衣服当了)."""
    if context.char(index + 1) == "了" and "把" in context.chars[:index] and (
        index + 2 == len(context.chars) and (not context.after or context.after[0] in _CLAUSE_END)
    ):
        return "dang4"
    return None


def _bei_carry(context: Context, index: int) -> str | None:
    """背 before 着 or 起 is "carry on the back", bei1 (背着书包)."""
    return "bei1" if context.char(index + 1) in ("着", "起") else None


def _surname(context: Context, index: int) -> str | None:
    """A surname after 姓 takes its surname reading (姓曾 zeng1, 姓单 shan4)."""
    if context.char(index - 1) == "姓":
        return SURNAMES.get(context.chars[index])
    return None


def _jia_holiday(context: Context, index: int) -> str | None:
    """假 after a duration or after 放, 请, 休 in its clause is "holiday", jia4 (放了三天假)."""
    if context.char(index - 1) in ("天", "周", "月") and context.chars[max(0, index - 5) : index].find("放") >= 0:
        return "jia4"
    if context.alone(index) and context.char(index - 1) in ("放", "请", "休"):
        return "jia4"
    return None


def _gong_confess(context: Context, index: int) -> str | None:
    """供 before 出, 认, 述, 词, 奉, 品 is "confess / offer", gong4."""
    return "gong4" if context.char(index + 1) in ("出", "认", "述", "词", "奉", "品") else None


def _chong_blunt(context: Context, index: int) -> str | None:
    """冲 after a degree adverb ("blunt", 说话很冲) or before 着 ("towards"), chong4."""
    if context.previous_word(index)[0] in DEGREE_ADVERBS or context.char(index + 1) == "着":
        return "chong4"
    return None


def _jie_bear(context: Context, index: int) -> str | None:
    """结 before 了/出/满 and then a fruit is "bear fruit", jie1 (结了很多果子)."""
    if context.char(index + 1) in ("了", "出", "满") and any(fruit in context.chars[index + 2 : index + 7] for fruit in ("果", "瓜", "籽")):
        return "jie1"
    return None


def _qia_stuck(context: Context, index: int) -> str | None:
    """卡 before 在, 住 is "stuck", qia3 (鱼刺卡在喉咙里), unless it is a noun (我的卡在哪)."""
    if context.char(index + 1) in ("在", "住") and context.char(index - 1) not in ("的", "张", "这", "那", "行", "用", "车", "房"):
        return "qia3"
    return None


def _she_break(context: Context, index: int) -> str | None:
    """折 "snap / lose money", she2: after 吹, 压, 撅, 弄, 摔, 碰 before 了, and 折了 ... 钱."""
    if context.char(index + 1) == "了" and (
        context.char(index - 1) in ("吹", "压", "撅", "弄", "摔", "碰") or "钱" in context.chars[index + 2 : index + 6]
    ):
        return "she2"
    return None


def _zhuan_spin(context: Context, index: int) -> str | None:
    """转 before 得, 着, 圈, 个不停 is "spin", zhuan4 (车轮转得很快)."""
    return "zhuan4" if context.alone(index) and context.char(index + 1) in ("得", "着", "圈") else None


def _cheng_fill(context: Context, index: int) -> str | None:
    """盛 "ladle out", cheng2, before a bowl or food (盛了一碗饭, 盛汤)."""
    rest = context.chars[index + 1 : index + 5]
    if any(thing in rest for thing in ("碗", "饭", "汤", "粥", "勺")):
        return "cheng2"
    return None


def _feng_sew(context: Context, index: int) -> str | None:
    """缝 as a verb, feng2, before 一下, 好, 上, 补, 了 (缝一下); the noun "seam" is feng4."""
    following = context.chars[index + 1 : index + 3]
    if context.alone(index) and (following[:1] in ("好", "上", "补", "了", "衣") or following == "一下"):
        return "feng2"
    return None


def _tu_vomit(context: Context, index: int) -> str | None:
    """吐 "vomit", tu4, beside 又 / 呕 / 泻 or before 血."""
    if context.char(index + 1) in ("血",) or (context.char(index - 1) == "又" and "泻" in context.chars[index:]):
        return "tu4"
    return None


def _tiao_adjust(context: Context, index: int) -> str | None:
    """调 "adjust", tiao2, before 低, 高, 大, 小, 好, 整 (把温度调低); "transfer" stays diao4."""
    word = context.word_at(index)[0]
    if (context.alone(index) or (len(word) == 2 and word[0] == "调")) and context.char(index + 1) in ("低", "高", "大", "小", "好", "整", "亮", "暗"):
        return "tiao2"
    return None


def _liang_measure(context: Context, index: int) -> str | None:
    """量 as a verb "measure", liang2, before 一下, 一量, 了 (量一下水)."""
    following = context.chars[index + 1 : index + 3]
    if following in ("一下", "一量") or (context.alone(index) and following[:1] in ("了", "过")):
        return "liang2"
    return None


def _zhong_kind(context: Context, index: int) -> str | None:
    """种 after a numeral or demonstrative is the measure word "kind", zhong3 (这种花, 各种菜)."""
    return "zhong3" if context.char(index - 1) in NUMERALS | {"各", "某", "此", "该", "多"} else None


def _wei_as(context: Context, index: int) -> str | None:
    """为 "as, to be", wei2, right after 被选, 称, 成, 作, 认, 以 (被选为班长)."""
    return "wei2" if context.char(index - 1) in ("选", "称", "成", "作", "认", "以", "视", "改", "化", "分") else None


def _lou(context: Context, index: int) -> str | None:
    """露 "show", lou4, before 了一手, 面, 馅, 脸, 富 (colloquial uses)."""
    following = context.chars[index + 1 : index + 4]
    if following.startswith(("一手", "了一手", "面", "馅", "脸", "富")):
        return "lou4"
    return None


RULES: Final[dict[str, tuple[Callable[[Context, int], str | None], ...]]] = {
    "得": (_de,),
    "地": (_di,),
    "着": (_zhe,),
    "长": (_chang,),
    "还": (_huan,),
    "只": (_zhi,),
    "干": (_gan,),
    "教": (_jiao_teach,),
    "觉": (_jiao_sleep,),
    "数": (_shu_count,),
    "当": (_dang_pawn,),
    "背": (_bei_carry,),
    "假": (_jia_holiday,),
    "供": (_gong_confess,),
    "冲": (_chong_blunt,),
    "结": (_jie_bear,),
    "卡": (_qia_stuck,),
    "折": (_she_break,),
    "转": (_zhuan_spin,),
    "盛": (_cheng_fill,),
    "缝": (_feng_sew,),
    "吐": (_tu_vomit,),
    "调": (_tiao_adjust,),
    "量": (_liang_measure,),
    "为": (_wei_as,),
    "露": (_lou,),
    "种": (_zhong_kind,),
}


def apply_context_rules(context: Context) -> None:
    """Change `context.readings` where a rule decides a character's reading from its context."""
    for index, character in enumerate(context.chars):
        for rule in (_surname, *RULES.get(character, ())):
            reading = rule(context, index)
            if reading is not None:
                context.readings[index] = reading
                break


def apply_phrases(chars: str, readings: list[str], boundaries: frozenset[int] | None = None) -> None:
    """Put the readings of `PHRASES` in place wherever one occurs in `chars`, longest first; with
    `boundaries` (where jieba's words start and end), only where a phrase starts or ends on one, so
    a phrase inside a longer word is left alone (好学 in 好好学习)."""
    taken = [False] * len(chars)
    for phrase in sorted(PHRASES, key=len, reverse=True):
        start = chars.find(phrase)
        while start >= 0:
            end = start + len(phrase)
            on_boundary = boundaries is None or start in boundaries or end in boundaries
            if on_boundary and not any(taken[start:end]):
                readings[start:end] = PHRASES[phrase].split()
                taken[start:end] = [True] * len(phrase)
            start = chars.find(phrase, start + 1)


def neutral_reduplication(chars: str, readings: list[str], tags: list[str]) -> None:
    """The second syllable of a reduplicated one-syllable verb is neutral: 想想 xiang3 xiang5,
    笑了笑 xiao4 le5 xiao5, 看一看. `tags[i]` is the jieba tag of character i's word."""
    for index in range(1, len(chars)):
        character = chars[index]
        if (index >= 2 and chars[index - 2] == character and chars[index - 1] in ("了", "一")) or (chars[index - 1] == character and tags[index] == "v" and (index < 2 or chars[index - 2] != character)):
            readings[index] = readings[index][:-1] + "5"
