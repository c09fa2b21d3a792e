"""English number words: cardinals, ordinals, years, digit strings and decimals, as a person says them.

Every function takes digits as a string, so a number of any length is handled in time linear in
its digits; past `MAX_CARDINAL_DIGITS` a number is read digit by digit ("a serial number"), as a
person reads a long code.
"""

from __future__ import annotations

from typing import Final

MAX_CARDINAL_DIGITS: Final = 15
"""Longest digit string read as one number (hundreds of trillions); longer ones are read digit by digit."""

_ONES: Final = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen"]
_TENS: Final = ["_", "_", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]
_SCALES: Final = ("", "thousand", "million", "billion", "trillion")
_ORDINAL_WORDS: Final = {
    "one": "first",
    "two": "second",
    "three": "third",
    "five": "fifth",
    "eight": "eighth",
    "nine": "ninth",
    "twelve": "twelfth",
}


def _below_thousand(value: int) -> list[str]:
    words: list[str] = []
    hundreds, rest = divmod(value, 100)
    if hundreds:
        words += [_ONES[hundreds], "hundred"]
    if rest >= 20:
        tens, ones = divmod(rest, 10)
        words.append(f"{_TENS[tens]}-{_ONES[ones]}" if ones else _TENS[tens])
    elif rest or not words:
        words.append(_ONES[rest])
    return words


def cardinal(digits: str) -> str:
    """"1234" -> "one thousand two hundred thirty-four"; digit strings past MAX_CARDINAL_DIGITS are read digit by digit."""
    digits = digits.lstrip("0") or "0"
    if len(digits) > MAX_CARDINAL_DIGITS:
        return digit_by_digit(digits)
    value = int(digits)
    if value == 0:
        return "zero"
    groups: list[str] = []
    scale = 0
    while value:
        value, group = divmod(value, 1000)
        if group:
            words = _below_thousand(group)
            if _SCALES[scale]:
                words.append(_SCALES[scale])
            groups.append(" ".join(words))
        scale += 1
    return " ".join(reversed(groups))


def ordinal_word(words: str) -> str:
    """The ordinal of cardinal words: "twenty-one" -> "twenty-first", "one hundred" -> "one hundredth"."""
    head, separator, last = words.rpartition(" ")
    stem_head, hyphen, stem = last.rpartition("-")
    if stem in _ORDINAL_WORDS:
        stem = _ORDINAL_WORDS[stem]
    elif stem.endswith("y"):
        stem = stem[:-1] + "ieth"
    else:
        stem += "th"
    return f"{head}{separator}{stem_head}{hyphen}{stem}"


def ordinal(digits: str) -> str:
    """"21" -> "twenty-first"."""
    return ordinal_word(cardinal(digits))


def plural_word(words: str) -> str:
    """Cardinal words as a plural noun: "ninety" -> "nineties", "six" -> "sixes" (decades, fractions)."""
    if words.endswith("y"):
        return words[:-1] + "ies"
    if words.endswith("x"):
        return words + "es"
    return words + "s"


def digit_by_digit(digits: str, zero: str = "zero") -> str:
    """"0123" -> "zero one two three"."""
    return " ".join(zero if digit == "0" else _ONES[int(digit)] for digit in digits if digit.isdecimal())


def year(digits: str) -> str:
    """A year as said: "1999" -> "nineteen ninety-nine", "2005" -> "two thousand five",
    "2026" -> "twenty twenty-six", "1900" -> "nineteen hundred", "800" -> "eight hundred"."""
    value = int(digits)
    if len(digits) != 4 or value < 1000:
        return cardinal(digits)
    century, rest = divmod(value, 100)
    if 2000 <= value <= 2009 or value % 1000 == 0:
        return cardinal(digits)
    if rest == 0:
        return f"{cardinal(str(century))} hundred"
    if rest < 10:
        return f"{cardinal(str(century))} oh {_ONES[rest]}"
    return f"{cardinal(str(century))} {cardinal(str(rest))}"


def decimal(integer_digits: str, fraction_digits: str) -> str:
    """"3", "14" -> "three point one four"; an empty integer part is read as "point ..."."""
    head = cardinal(integer_digits) + " " if integer_digits else ""
    return f"{head}point {digit_by_digit(fraction_digits)}"


def number(text: str) -> str:
    """A plain number as written ("1,234", "3.5", "0.25") in words."""
    text = text.replace(",", "")
    integer, _, fraction = text.partition(".")
    if fraction:
        return decimal(integer, fraction)
    return cardinal(integer)


def is_one(text: str) -> bool:
    """True when a written number is exactly one (a singular unit follows it)."""
    return text.replace(",", "").lstrip("0") in ("1", "1.0", "1.00")
