"""Numbers, dates, times, money, percentages and units written in digits, as a Mandarin speaker
reads them, in Chinese characters (cn2an turns the integers into words).

- 2024年 -> 二零二四年 (a year digit by digit); 5月1日 -> 五月一日; 15:30 -> 十五点三十分 (05 -> 零五分,
  00 -> 整点: 三点); 第3名 -> 第三名.
- 35元 -> 三十五元; ¥35, ￥35 -> 三十五元; $5 -> 五美元; €5 -> 五欧元; £5 -> 五英镑.
- 15% -> 百分之十五; 1/2 -> 二分之一; 3.14 -> 三点一四; 1,200,000 -> 一百二十万; -5 -> 负五.
- -5℃ / -5°C -> 零下五摄氏度; 3kg -> 三千克; 5km -> 五公里; 100m -> 一百米; 2L -> 两升.
- 2个 -> 两个 (两 before a measure word); 2000 -> 两千 (a leading 2 of thousands, ten thousands).
- 13812345678 (a mobile number), numbers with a leading 0 and runs of 8 or more digits are read
  digit by digit, with 1 as 幺 (yao1) in a phone number, as people say them; so are mobile numbers
  written in groups (138-0013-8000, 138 0013 8000) or after +86 (加八六), landlines with their area
  code (010-12345678, (010) 1234 5678) and chains of three or more digit groups (978-7-111-5), and
  a number dialled (拨打110 -> 拨打幺幺零, 呼叫120 -> 呼叫幺二零).
- 2024-12-05, 2024/12/05, 2024.12.05 -> 二零二四年十二月五日.
- 3-5 (between two numbers) -> 三到五.
- 〇 (a zero written as a character, 二〇二四年) -> 零; 第2名 -> 第二名 (an ordinal is never 两);
  ￥35元 -> 三十五元 (a currency written both before and after is said once).

Each rule is a replacement of a stretch of the text (start, end, words), so the words keep their
written form for word timestamps.
"""

from __future__ import annotations

import re
from typing import Final

_DIGITS: Final = "零一二三四五六七八九"
MEASURE_WORDS: Final = frozenset(
    "个只本件位条张次天年岁人口头匹辆台部把支根块片双对套份种样封间座所家场首句遍趟回倍名斤克升米吨层节项项"
)
CURRENCY_BEFORE: Final = {"¥": "元", "￥": "元", "$": "美元", "€": "欧元", "£": "英镑"}
UNITS: Final = {
    "km": "公里", "kg": "千克", "mg": "毫克", "cm": "厘米", "mm": "毫米", "ml": "毫升", "mL": "毫升",
    "m²": "平方米", "m2": "平方米", "m³": "立方米", "km/h": "公里每小时", "g": "克", "m": "米", "L": "升", "t": "吨",
    "h": "小时", "min": "分钟", "s": "秒", "GB": "G", "MB": "M",
}  # fmt: skip
_UNIT_PATTERN: Final = "|".join(re.escape(unit) for unit in sorted(UNITS, key=len, reverse=True))
_NUMBER: Final = r"\d+(?:,\d{3})*(?:\.\d+)?"
MAX_INTEGER_DIGITS: Final = 16
"""The longest integer cn2an reads as a number; a longer one is read digit by digit."""

_RULES: Final[tuple[tuple[str, re.Pattern[str]], ...]] = (
    ("date", re.compile(r"(?<![\d.\-/])(\d{4})([-/.])(\d{1,2})\2(\d{1,2})(?![\d.\-/])")),
    ("phone", re.compile(r"(?<![\d.+])(?:(\+)?86[-\s]?)?1[3-9]\d(?:[-\s]?\d{4}){2}(?![\d.])")),
    ("landline", re.compile(r"(?<![\d.])(?:\(0\d{2,3}\)\s?|0\d{2,3}[-\s])\d{3,4}[-\s]?\d{4}(?![\d.])")),
    ("digit_chain", re.compile(r"(?<![\d.\-])\d+(?:-\d+){2,}(?![\d.\-])")),
    ("dialled", re.compile(r"(?:(?<=拨打|拨通|呼叫|致电|热线)|(?<=拨))\s?\d{3,15}(?![\d.])")),
    ("zero", re.compile("〇")),
    ("year", re.compile(r"(?<![\d.])(\d{2}|\d{4})(?=年)")),
    ("time", re.compile(r"(?<![\d:])([01]?\d|2[0-4]):([0-5]\d)(?::([0-5]\d))?(?![\d:])")),
    ("temperature", re.compile(r"(-|−|零下)?(" + _NUMBER + r")\s?(?:℃|°C|°c|度C)")),
    ("percent", re.compile(r"(-|−)?(" + _NUMBER + r")\s?[%％]")),
    ("fraction", re.compile(r"(?<![\d/])(\d+)/(\d+)(?![\d/])")),
    ("money_before", re.compile(r"([¥￥$€£])\s?(" + _NUMBER + r")")),
    ("range", re.compile(r"(?<![\d.])(" + _NUMBER + r")\s?[-~～–]\s?(" + _NUMBER + r")(?![\d.])")),
    ("unit", re.compile(r"(-|−)?(" + _NUMBER + r")\s?(" + _UNIT_PATTERN + r")(?![A-Za-z])")),
    ("digits", re.compile(r"(?<![\d.,])(0\d+|\d{8,})(?![\d.,])")),
    ("number", re.compile(r"(-|−)?(?<![\d.])(" + _NUMBER + r")(?![\d])")),
)


def integer_words(digits: str) -> str:
    """An integer in Chinese (cn2an), with 两 for a leading 2 of a thousand or more; past
    MAX_INTEGER_DIGITS, digit by digit."""
    import cn2an

    if len(digits.lstrip("0")) > MAX_INTEGER_DIGITS:
        return digit_words(digits)
    words = cn2an.an2cn(digits.lstrip("0") or "0")
    if len(digits.lstrip("0")) >= 4 and words.startswith("二") and words[1:2] in ("千", "万", "亿"):
        words = "两" + words[1:]
    return words


def number_words(text: str) -> str:
    """A written number ("1,200,000", "3.14", "0.5") in Chinese."""
    integer, _, fraction = text.replace(",", "").partition(".")
    words = integer_words(integer or "0")
    if fraction:
        words += "点" + digit_words(fraction)
    return words


def digit_words(digits: str, one: str = "一") -> str:
    """Digits one by one (0 as 零, 1 as `one`)."""
    return "".join(one if digit == "1" else _DIGITS[int(digit)] for digit in digits if digit.isdecimal())


def _minutes(minutes: str) -> str:
    value = int(minutes)
    if value == 0:
        return ""
    return ("零" if value < 10 else "") + integer_words(str(value)) + "分"


def _read(kind: str, match: re.Match[str]) -> str:
    groups = match.groups()
    following = match.string[match.end() : match.end() + 2]
    if kind == "date":
        year, _, month, day = groups
        if not (1 <= int(month) <= 12 and 1 <= int(day) <= 31):
            return digit_words(match.group())
        return digit_words(year) + "年" + integer_words(str(int(month))) + "月" + integer_words(str(int(day))) + "日"
    if kind in ("phone", "landline", "digit_chain", "dialled"):
        plus = "加" if match.group().startswith("+") else ""
        return plus + digit_words(match.group(), one="幺")
    if kind == "zero":
        return "零"
    if kind == "year":
        return digit_words(groups[0])
    if kind == "time":
        hours, minutes, seconds = groups
        words = integer_words(str(int(hours))) + "点" + _minutes(minutes)
        if seconds and int(seconds):
            words += integer_words(str(int(seconds))) + "秒"
        return words
    if kind == "temperature":
        sign = "零下" if groups[0] else ""
        return sign + number_words(groups[1]) + "摄氏度"
    if kind == "percent":
        return ("负" if groups[0] else "") + "百分之" + number_words(groups[1])
    if kind == "fraction":
        return number_words(groups[1]) + "分之" + number_words(groups[0])
    if kind == "money_before":
        currency = CURRENCY_BEFORE[groups[0]]
        said_after = following.startswith(currency)  # ￥35元: the 元 that follows says it
        return _counted(number_words(groups[1]), "元") + ("" if said_after else currency)
    if kind == "range":
        return number_words(groups[0]) + "到" + number_words(groups[1])
    if kind == "unit":
        unit = UNITS[groups[2]]
        return ("负" if groups[0] else "") + _counted(number_words(groups[1]), unit) + unit
    if kind == "digits":
        return digit_words(match.group())
    sign = "负" if groups[0] else ""
    words = number_words(groups[1])
    ordinal = match.string[match.start() - 1 : match.start()] == "第"  # 第2名: 第二名, never 两
    return sign + (words if ordinal else _counted(words, following))


def _counted(words: str, following: str) -> str:
    """二 as 两 when it counts something (两个, 两千克)."""
    if words == "二" and following[:1] in MEASURE_WORDS | {"元", "美", "欧", "英", "公", "千", "升", "小", "分", "秒", "点"}:
        return "两"
    return words


def number_replacements(text: str) -> list[tuple[int, int, str]]:
    """(start, end, words) for every number in `text`, in order, none overlapping."""
    taken = [False] * len(text)
    found: list[tuple[int, int, str]] = []
    for kind, pattern in _RULES:
        for match in pattern.finditer(text):
            start, end = match.span()
            if any(taken[start:end]):
                continue
            words = _read(kind, match)
            found.append((start, end, words))
            taken[start:end] = [True] * (end - start)
    return sorted(found)


def read_numbers(text: str) -> str:
    """`text` with every number written as words."""
    for start, end, words in reversed(number_replacements(text)):
        text = text[:start] + words + text[end:]
    return text
