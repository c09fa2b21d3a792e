"""Written forms to the words a person says: "$3.50" -> "three dollars fifty", "Jan. 15th" ->
"January fifteenth", "World War II" -> "World War two".

One regular expression of alternatives scans the text once, left to right; each match is replaced
by a function that looks at no more than a few words around it. Every alternative is bounded
(digit runs, e-mail parts and URLs have length caps), so the cost is linear in the text and each
written form grows into a bounded number of words (`MAX_EXPANSION`). Text the rules do not
recognise is left as it is, for espeak-ng to read.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Final

from libs.text.normalizer import numbers
from libs.text.normalizer.addresses import email, phone, url
from libs.text.normalizer.lines import line_replacements
from libs.text.normalizer.tables import (
    ABBREVIATIONS,
    BEFORE_NUMBER,
    CURRENCIES,
    MAGNITUDES,
    MONTH_ABBREVIATIONS,
    MONTHS,
    REGNAL_NAMES,
    ROMAN_CARDINAL_CONTEXT,
    TITLES,
    UNDOTTED_ABBREVIATIONS,
    UNITS,
    WEEKDAY_ABBREVIATIONS,
)
from libs.text.offsets import Taken

MAX_EXPANSION: Final = 12
"""Most characters of words one written character can become (a 15-digit number is the worst case)."""

_NUMBER: Final = r"(?:\d{1,3}(?:,\d{3}){1,5}(?:\.\d{1,12})?|\d{1,40}(?:\.\d{1,12})?)"
_HEX_GROUP: Final = r"[0-9A-Fa-f]{1,4}"
"""One group of an IPv6 address."""
_HEX_LETTERS: Final = {"a": "eigh", "b": "B", "c": "C", "d": "D", "e": "E", "f": "F"}
"""A hexadecimal digit's letter as its name is said ("A" alone would be read as the article)."""
_UNIT_NAMES: Final = "|".join(re.escape(unit) for unit in sorted(UNITS, key=len, reverse=True))
_CURRENCY_SYMBOLS: Final = "|".join(re.escape(s) for s in sorted((c for c in CURRENCIES if not c.isalpha()), key=len, reverse=True))
_CURRENCY_CODES: Final = "|".join(code for code in CURRENCIES if code.isalpha())
_MAGNITUDE_NAMES: Final = "|".join(sorted(MAGNITUDES, key=len, reverse=True))
_MONTH_NAMES: Final = "|".join(MONTHS + [f"{short}\\.?" for short in MONTH_ABBREVIATIONS])
_WEEKDAY_NAMES: Final = "|".join(sorted(WEEKDAY_ABBREVIATIONS, key=len, reverse=True))
_SUPERSCRIPT_DIGITS: Final = "\u2070\u00b9\u00b2\u00b3\u2074-\u2079"
_VULGAR_FRACTIONS: Final = {
    "\u00bd": (1, 2), "\u2153": (1, 3), "\u2154": (2, 3), "\u00bc": (1, 4), "\u00be": (3, 4), "\u2155": (1, 5),
    "\u2156": (2, 5), "\u2157": (3, 5), "\u2158": (4, 5), "\u2159": (1, 6), "\u215a": (5, 6), "\u215b": (1, 8),
    "\u215c": (3, 8), "\u215d": (5, 8), "\u215e": (7, 8),
}  # fmt: skip
"""The fraction characters ("½", "¾", "⅛") and the fractions they write."""
_PER_WORDS: Final = "hour|hr|day|week|month|year|yr|night|person|head|unit|item|piece|page|word|minute|min|second|sec|mile|gallon|litre|liter"
"""Words that a "/" before them reads as "per" ("$5/hour", "3 pages/day")."""
_SPACED_ONLY_UNITS: Final = frozenset({"A", "B"})
_HTML_TAGS: Final = "|".join(
    sorted(
        (
            "a", "abbr", "b", "big", "blockquote", "br", "cite", "code", "del", "div", "em", "h1", "h2", "h3", "h4", "h5",
            "h6", "hr", "i", "img", "ins", "kbd", "li", "mark", "ol", "p", "pre", "q", "s", "small", "span", "strike",
            "strong", "sub", "sup", "table", "td", "th", "tr", "tt", "u", "ul",
        ),
        key=len,
        reverse=True,
    )
)  # fmt: skip
"""HTML elements that mark up text; their tags are not read (a tag that names no such element, "<Enter>", is)."""
"""Units that name a measure only when a space parts them from the number: "12A" and "221B" are a seat
and a flat, "5 A" and "512 B" amps and bytes."""
_WORD_ABBREVIATIONS: Final = "|".join(
    re.escape(word)
    for word in sorted(
        {*TITLES, *ABBREVIATIONS, *BEFORE_NUMBER, *MONTH_ABBREVIATIONS, *WEEKDAY_ABBREVIATIONS, "St", "Dr"},
        key=len,
        reverse=True,
    )
)

_PATTERN: Final = re.compile(
    # No written form starts at a letter inside a word (every alternative starts at a digit, a symbol,
    # or a word's first letter), so the scan passes those positions without trying the alternatives.
    r"(?!(?<=\w)[A-Za-z])(?:"
    + "|".join(
        [
            r"(?P<email>(?<![\w.+-])[A-Za-z0-9][A-Za-z0-9._+-]{0,63}@[A-Za-z0-9-]{1,63}(?:\.[A-Za-z0-9-]{1,63}){1,6})",
            r"(?P<url>\b(?:https?://|www\.)[^\s<>\"]{1,300}?)(?=[.,;:!?)\]]*(?:\s|$))",
            r"(?P<ipv6>(?=[0-9A-Fa-f]{0,4}:[0-9A-Fa-f:]{0,38}[0-9A-Fa-f])(?<![\w:.])(?:(?:" + _HEX_GROUP + r":){7}" + _HEX_GROUP
            + r"|(?:" + _HEX_GROUP + r"(?::" + _HEX_GROUP + r"){0,6})?::(?:" + _HEX_GROUP + r"(?::" + _HEX_GROUP + r"){0,6})?)(?![\w:]))",
            r"(?P<phone>(?<![\w+])(?:\+?1[-. ])?(?:\(\d{3}\)\s?|\d{3}[-. ])\d{3}[-. ]\d{4}(?!\d)|(?<![\w-])\d{3}-\d{4}(?![\d-]))",
            r"(?P<dash_date>(?=\d{1,2}-\d{1,2}-\d{4})\b(?P<dd_first>\d{1,2})-(?P<dd_second>\d{1,2})-(?P<dd_year>\d{4})(?![\w-]))",
            r"(?P<us_date>\b(?P<us_month>\d{1,2})/(?P<us_day>\d{1,2})/(?P<us_year>\d{4}|\d{2})\b)",
            r"(?P<iso_date>\b(?P<iso_year>\d{4})-(?P<iso_month>\d{2})-(?P<iso_day>\d{2})\b)",
            r"(?P<named_date>\b(?P<nd_month>" + _MONTH_NAMES + r")\s(?P<nd_day>\d{1,2})(?:st|nd|rd|th)?\b(?:,?\s(?P<nd_year>\d{4})\b)?)",
            r"(?P<day_month>\b(?P<dm_day>\d{1,2})(?:st|nd|rd|th)?\s(?:of\s)?(?P<dm_month>" + _MONTH_NAMES + r")(?![\w])(?:,?\s(?P<dm_year>\d{4})\b)?)",
            r"(?P<time>\b(?P<hour>\d{1,2}):(?P<minute>\d{2})(?::(?P<second>\d{2}))?(?!\d)(?:\s?(?P<ampm>[AaPp]\.?[Mm]\.?(?![\w])))?)",
            r"(?P<clock>\b(?P<clock_hour>\d{1,2})\s?(?P<clock_ampm>[ap]\.m\.|[AP]M\b|[ap]m\b))",
            r"(?P<money>(?<![\w$])(?:(?<![\w.-])(?P<money_sign>[-\u2212])(?=" + _CURRENCY_SYMBOLS + r"))?(?P<money_symbol>" + _CURRENCY_SYMBOLS + r")\s?(?P<money_amount>" + _NUMBER + r")"
            r"(?:\s?(?P<money_magnitude>" + _MAGNITUDE_NAMES + r")\b)?)",
            r"(?P<coded_money>\b(?P<cm_code>" + _CURRENCY_CODES + r")\s?(?P<cm_amount>" + _NUMBER + r")"
            r"(?:\s?(?P<cm_magnitude>" + _MAGNITUDE_NAMES + r")\b)?)",
            r"(?P<money_code>(?<![\w.])(?P<mc_amount>" + _NUMBER + r")(?:\s?(?P<mc_magnitude>" + _MAGNITUDE_NAMES + r"))?"
            r"\s(?P<mc_code>" + _CURRENCY_CODES + r")\b)",
            r"(?P<dialled>(?<=\b(?:[Dd]ial|DIAL) )\d{1,15}(?![\w.,-]\d)|(?<=\b(?:[Cc]all|CALL|[Tt]ext|TEXT|[Rr]ing) )(?:[2-9]11|999|112|000|988)\b(?![.,]\d))",
            r"(?P<intl_phone>(?=\+\d)(?<![\w+])\+(?P<country_code>\d{1,3})(?:[ .-](?:\(\d{1,5}\)|\d{1,5})){2,6}(?![\w]|[.-]\d))",
            r"(?P<digit_chain>(?=\d{1,6}-\d)(?<![\w.-])\d{1,6}(?:-\d{1,6}){2,6}(?![\w-]|\.\d))",
            r"(?P<height>(?=\d{1,2}['\u2032])(?<![\w.'])(?P<feet>\d{1,2})['\u2032]\s?(?P<inches>\d{1,2})(?:\"|\u2033|'')(?!\w))",
            r"(?P<decade>(?<![\w.])(?:'|\u2019)?(?P<decade_digits>\d{2}|1\d{3}|20\d{2})s\b)",
            r"(?P<ordinal>(?<![\w.])(?P<ordinal_digits>\d{1,15})(?:st|nd|rd|th)\b)",
            r"(?P<fraction>(?<![\w./])(?:(?P<whole>\d{1,6})\s)?(?P<numerator>\d{1,3})/(?P<denominator>\d{1,3})(?:(?:st|nd|rd|th)s?(?!\w))?(?![\d/]))",
            r"(?P<ratio>(?<![\w.:])(?P<ratio_a>\d{1,4}):(?P<ratio_b>\d{1,4})(?![\d:]))",
            r"(?P<version>(?<![\w.])\d{1,4}(?:\.\d{1,4}){2,5}(?![\d]))",
            r"(?P<scientific>(?=\d{1,3}(?:\.\d{1,12})?[eE])(?<![\w.])(?P<sci_mantissa>\d{1,3}(?:\.\d{1,12})?)[eE](?P<sci_exponent>[-+\u2212]?\d{1,3})"
            r"(?:\s?(?P<sci_unit>" + _UNIT_NAMES + r")(?![\w/²³'\u2019])|(?!\w|\.\d)))",
            r"(?P<vulgar_fraction>(?=\d{0,6}\s?[" + "".join(_VULGAR_FRACTIONS) + r"])(?<![\w.])(?:(?P<vf_whole>\d{1,6})\s?)?(?P<vf_char>[" + "".join(_VULGAR_FRACTIONS) + r"])"
            r"(?:\s?(?P<vf_unit>" + _UNIT_NAMES + r")(?![\w/²³'\u2019]))?)",
            r"(?P<measure>(?<![\w.])(?P<measure_sign>[-\u2212])?(?P<measure_amount>" + _NUMBER + r")"
            r"(?:\s?(?P<measure_magnitude>thousand|million|billion))?\s?(?P<unit>" + _UNIT_NAMES + r")(?![\w/²³'\u2019]))",
            r"(?P<percent>(?<![\w.%])(?P<percent_sign>[-\u2212])?(?P<percent_amount>" + _NUMBER + r")\s?%)",
            r"(?P<range_dash>(?=\s?[-\u2013\u2014])(?:(?<=\d)|(?<=\d%)|(?<=\d[ap]m)|(?<=\d[AP]M)|(?<=\d [ap]m)|(?<=\d [AP]M)|(?<=\.m\.))\s?[-\u2013\u2014]\s?(?=[$€£]?\d))",
            r"(?P<magnitude>(?=\d)(?<![\w.,])(?P<mag_amount>\d{1,4}(?:\.\d{1,3})?)(?P<mag_suffix>M|bn|k)(?![\w]))",
            r"(?P<number>(?:(?<=^)|(?<=[\s(\[\"'~]))(?P<number_sign>[-\u2212])?(?P<signed_amount>" + _NUMBER + r")(?![\w]|\.\d)"
            r"|(?<![\w.,])(?P<amount>" + _NUMBER + r"|\.\d{1,12})(?![\w]|\.\d))",
            r"(?P<day_range>\b(?P<day_from>" + _WEEKDAY_NAMES + r")\.?\s?[-\u2013]\s?(?P<day_to>" + _WEEKDAY_NAMES + r")\b(?:\.(?=\s[a-z]))?)",
            r"(?P<sharp>(?<![\w#])(?P<sharp_note>[A-G])#(?![\w#]))",
            r"(?P<roman>\b(?P<roman_numeral>[IVXLCDM]{1,12})\b)",
            r"(?P<abbreviation>(?<![\w.])(?P<abbreviation_word>" + _WORD_ABBREVIATIONS + r"|[A-Za-z](?:\.[A-Za-z]){1,3})(?P<abbreviation_dot>\.)?(?![\w]))",
            r"(?P<ampersand>(?<=\s)&(?=\s))",
            r"(?P<hash_number>#(?=\d))",
            r"(?P<stop_before_comma>(?<=[A-Za-z])\.(?=[,;:]))",
            r"(?P<hashtag>(?<![\w#&/])#(?P<hashtag_word>[A-Za-z][A-Za-z0-9_]{0,60})\b)",
            r"(?P<per>(?=/)(?<=[\w%])/(?=(?:" + _PER_WORDS + r")s?\b))",
            r"(?P<with>(?=[Ww]/)(?<![\w/])[Ww]/(?P<with_out>[Oo])?(?=\s))",
            r"(?P<approximately>(?<![\w~])~\s?(?=[-\u2212]?[$€£]?\d))",
            r"(?P<comparison>(?=[<>])(?:(?<=[\w)%] )[<>](?= )|(?<![<>=-])[<>]\s?(?=[-\u2212]?[$€£]?\.?\d)))",
            r"(?P<caret_power>(?=\^)(?<=[\w)\]])\^(?P<caret_exponent>[-+\u2212]?\d{1,15}|[A-Za-z])(?!\w|\.\d))",
            r"(?P<ellipsis>(?=[ \t]?\.\.\.)(?<!\.)[ \t]?\.{3,}[ \t]*)",
            r"(?P<times>(?=[ \t]?\*)(?:(?<=\d)|(?<=\b[A-Za-z]))[ \t]?\*[ \t]?(?=\d|[A-Za-z]\b))",
            r"(?P<line_mark>(?=[ \t]*[#*+])(?:(?<=\n)|(?<![\s\S]))[ \t]*(?:#{1,6}|[*+])[ \t]+)",
            r"(?P<emphasis>(?=[*_~])(?:(?<![\w*_~])(?:\*{1,3}|_{1,2}|~~)(?=[^\s*_~])|(?<=[^\s*_~])(?:\*{1,3}|_{1,2}|~~)(?![\w*_~])))",
            r"(?P<link>(?=\[)\[(?P<link_text>[^\[\]\n]{1,200})\]\((?:https?://|www\.|/|#|mailto:)[^\s()]{0,300}\))",
            r"(?P<tag>(?=<)</?(?:" + _HTML_TAGS + r")(?:\s[^<>\n]{0,200})?/?>)",
            r"(?P<superscript_power>(?=[\u207a\u207b" + _SUPERSCRIPT_DIGITS + r"])(?<=[\w)\]])(?P<superscript_exponent>[\u207a\u207b]?[" + _SUPERSCRIPT_DIGITS + r"]{1,4})(?![" + _SUPERSCRIPT_DIGITS + r"]))",
        ]
    )
    + ")"
)

_ROMAN_VALUES: Final = {"I": 1, "V": 5, "X": 10, "L": 50, "C": 100, "D": 500, "M": 1000}
_VALID_ROMAN: Final = re.compile(r"M{0,3}(?:CM|CD|D?C{0,3})(?:XC|XL|L?X{0,3})(?:IX|IV|V?I{0,3})")
_YEAR_CUES: Final = frozenset(
    ["in", "since", "by", "from", "until", "till", "of", "year", "years", "circa", "during", "before", "after", "around", "between", "and", "to", "the", "early", "mid", "late", "spring", "summer", "autumn", "fall", "winter", "christmas"]
)
_RATIO_CUES: Final = frozenset(["a", "an", "ratio", "odds", "scale", "mix", "mixed", "won", "lost", "beat", "score"])
_FRACTION_NAMES: Final = {2: ("half", "halves"), 4: ("quarter", "quarters")}
_PREVIOUS_WORD: Final = re.compile(r"([A-Za-z]+)\W{0,3}$")
_NEXT_WORD: Final = re.compile(r"\W{0,2}([A-Za-z]+)")
_NEXT_IS_CAPITALISED: Final = re.compile(r"[ \t]+[A-Z]")
_SENTENCE_GOES_ON: Final = re.compile(r"\s+[a-z0-9]|[,;:)\]]")
"""After an abbreviation's full stop: a lower-case word or a number, or punctuation within a sentence
("Baker St., London": the comma is the pause, and a full stop kept before it would end the sentence)."""
_YEAR_RANGE_START: Final = re.compile(r"(?:^|\D)(?:1\d|20)\d{2}\s?[-\u2013\u2014]\s?$")
_SUPERSCRIPT_TO_ASCII: Final = str.maketrans("\u2070\u00b9\u00b2\u00b3\u2074\u2075\u2076\u2077\u2078\u2079\u207a\u207b", "0123456789+-")
_POWER_BASE: Final = re.compile(r"(?:\d|[)\]]|(?<![A-Za-z])[A-Za-z]{1,2})$")
"""What a superscript raises to a power: a number, a bracket, or a symbol of one or two letters ("x²",
"mc²"). After a longer word it is a footnote's mark and stays as written."""
_COMPARISON_WORDS: Final = {"<": "less than", ">": "greater than"}
_MAGNITUDE_SUFFIXES: Final = {"M": "million", "bn": "billion", "k": "thousand"}
_CLOSING_MARKS: Final = frozenset("\"')]")

_PAUSE_MARKS: Final = frozenset(".,;:?!")


def expand_written_forms(text: str) -> str:
    """`text` with every written form the rules know replaced by the words a person says."""
    pieces, position = [], 0
    for start, end, words in written_form_replacements(text):
        pieces += [text[position:start], words]
        position = end
    return "".join(pieces) + text[position:]


def written_form_replacements(text: str) -> list[tuple[int, int, str]]:
    """Each written form of `text` the rules change: (start, end, the words said), in order; the line
    rules of lists, tables and headings (libs.text.normalizer.lines) among them."""
    lines = line_replacements(text)
    taken = Taken(len(text), lines) if lines else None
    replacements = []
    for match in _PATTERN.finditer(text):
        start, end = match.span()
        if taken is not None and taken.overlaps(start, end):
            continue  # a table row's pipe or a list's marker: the line rules say it
        spoken = _expand(match)
        if spoken != match.group():
            replacements.append((start, end, spoken))
    return sorted(replacements + lines, key=lambda replacement: (replacement[0], replacement[1])) if lines else replacements


def _expand(match: re.Match[str]) -> str:
    kind = match.lastgroup
    assert kind is not None
    return _EXPANDERS[kind](match)


def _previous_word(match: re.Match[str]) -> str:
    found = _PREVIOUS_WORD.search(match.string, max(0, match.start() - 24), match.start())
    return found.group(1) if found else ""


def _next_word(match: re.Match[str]) -> str:
    found = _NEXT_WORD.match(match.string, match.end(), match.end() + 24)
    return found.group(1) if found else ""


def _ends_sentence(match: re.Match[str]) -> bool:
    """True when the full stop that ends `match` also ends a sentence (end of text, or neither a lower-case
    word nor punctuation within a sentence next)."""
    return not _SENTENCE_GOES_ON.match(match.string, match.end(), match.end() + 4)


def _date(month: int, day: int, year: str | None) -> str | None:
    if not (1 <= month <= 12 and 1 <= day <= 31):
        return None
    words = f"{MONTHS[month - 1]} {numbers.ordinal(str(day))}"
    if year:
        words += f", {numbers.year(year)}"
    return words


def _month_first_date(first: str, second: str, year: str) -> str | None:
    """A date written month first, or day first where that is the only reading ("25/12/2026")."""
    return _date(int(first), int(second), year) or _date(int(second), int(first), year)


def _us_date(match: re.Match[str]) -> str:
    year = match.group("us_year")
    if len(year) == 2:
        year = ("20" if int(year) < 50 else "19") + year
    spoken = _month_first_date(match.group("us_month"), match.group("us_day"), year)
    return spoken if spoken is not None else match.group()


def _dash_date(match: re.Match[str]) -> str:
    spoken = _month_first_date(match.group("dd_first"), match.group("dd_second"), match.group("dd_year"))
    return spoken if spoken is not None else _digit_groups(match.group())


def _digit_groups(text: str) -> str:
    """The groups of digits in `text` read digit by digit, a pause between them: an ISBN, a part or
    account number, a phone number."""
    return ", ".join(numbers.digit_by_digit(group) for group in re.findall(r"\d+", text))


def _intl_phone(match: re.Match[str]) -> str:
    return "plus " + _digit_groups(match.group())


def _digit_chain(match: re.Match[str]) -> str:
    return _digit_groups(match.group())


def _iso_date(match: re.Match[str]) -> str:
    spoken = _date(int(match.group("iso_month")), int(match.group("iso_day")), match.group("iso_year"))
    return spoken if spoken is not None else match.group()


def _month(name: str) -> str:
    name = name.rstrip(".")
    return MONTH_ABBREVIATIONS.get(name, name)


def _named_date(match: re.Match[str]) -> str:
    words = f"{_month(match.group('nd_month'))} {numbers.ordinal(match.group('nd_day'))}"
    if match.group("nd_year"):
        words += f", {numbers.year(match.group('nd_year'))}"
    return words


def _day_month(match: re.Match[str]) -> str:
    words = f"the {numbers.ordinal(match.group('dm_day'))} of {_month(match.group('dm_month'))}"
    if _previous_word(match).lower() == "the":
        words = words[len("the ") :]
    if match.group("dm_year"):
        words += f", {numbers.year(match.group('dm_year'))}"
    return words


def _clock_words(hour: int, minute: int) -> str:
    if minute == 0:
        return f"{numbers.cardinal(str(hour))}"
    if minute < 10:
        return f"{numbers.cardinal(str(hour))} oh {numbers.cardinal(str(minute))}"
    return f"{numbers.cardinal(str(hour))} {numbers.cardinal(str(minute))}"


def _am_pm(match: re.Match[str], written: str) -> str:
    """"a.m." or "p.m." as espeak-ng reads them well; the last full stop is left out when one
    follows the match ("9am." must not become "a.m.."). Before a capitalised word ("3pm EST", "9am
    John left") it is "AM" or "PM", said the same: espeak-ng ends a sentence at "p.m. E"."""
    morning = written.lower().startswith("a")
    if _NEXT_IS_CAPITALISED.match(match.string, match.end()):
        return "AM" if morning else "PM"
    words = "a.m." if morning else "p.m."
    return words[:-1] if match.string[match.end() : match.end() + 1] == "." else words


def _time(match: re.Match[str]) -> str:
    hour, minute = int(match.group("hour")), int(match.group("minute"))
    if hour > 24 or minute > 59 or (not match.group("ampm") and _previous_word(match).lower() in _RATIO_CUES):
        return _ratio_words(match.group("hour"), match.group("minute"))
    ampm = match.group("ampm")
    words = _clock_words(hour, minute)
    if minute == 0 and not ampm:
        words += " o'clock" if hour <= 12 else " hundred"
    if match.group("second"):
        words += f" and {numbers.cardinal(match.group('second'))} seconds"
    if ampm:
        words += " " + _am_pm(match, ampm)
    return words


def _clock(match: re.Match[str]) -> str:
    return f"{numbers.cardinal(match.group('clock_hour'))} {_am_pm(match, match.group('clock_ampm'))}"


def _money_words(symbol: str, amount: str, magnitude: str | None) -> str:
    major, majors, minor, minors = CURRENCIES[symbol]
    amount = amount.replace(",", "")
    if magnitude:
        return f"{numbers.number(amount)} {MAGNITUDES[magnitude]} {majors}"
    whole, _, fraction = amount.partition(".")
    whole = whole.lstrip("0")
    if len(fraction) != 2:
        if fraction:
            return f"{numbers.number(amount)} {majors}"
        return f"{numbers.cardinal(whole or '0')} {major if whole == '1' else majors}"
    cents = fraction.lstrip("0")
    if not whole:
        return f"{numbers.cardinal(cents or '0')} {minor if cents == '1' else minors}"
    head = f"{numbers.cardinal(whole)} {major if whole == '1' else majors}"
    return f"{head} {numbers.cardinal(cents)}" if cents else head


def _money(match: re.Match[str]) -> str:
    """"$5" is "five dollars"; "-$5" (a loss, a refund) "minus five dollars"."""
    words = _money_words(match.group("money_symbol"), match.group("money_amount"), match.group("money_magnitude"))
    return "minus " + words if match.group("money_sign") else words


def _coded_money(match: re.Match[str]) -> str:
    return _money_words(match.group("cm_code"), match.group("cm_amount"), match.group("cm_magnitude"))


def _money_code(match: re.Match[str]) -> str:
    return _money_words(match.group("mc_code"), match.group("mc_amount"), match.group("mc_magnitude"))


def _decade(match: re.Match[str]) -> str:
    digits = match.group("decade_digits")
    if not digits.endswith("0"):
        return match.group()  # "747s": planes, not a decade
    words = numbers.cardinal(digits) if len(digits) == 2 else numbers.year(digits)
    return numbers.plural_word(words)


def _ordinal(match: re.Match[str]) -> str:
    return numbers.ordinal(match.group("ordinal_digits"))


def _fraction(match: re.Match[str]) -> str:
    numerator, denominator = int(match.group("numerator")), int(match.group("denominator"))
    whole = match.group("whole")
    if denominator == 0 or (numerator == 24 and denominator == 7) or (numerator == denominator and not whole):
        return f"{numbers.cardinal(match.group('numerator'))} {numbers.cardinal(match.group('denominator'))}"
    if denominator == 1 or denominator > 100:
        words = f"{numbers.cardinal(match.group('numerator'))} over {numbers.cardinal(match.group('denominator'))}"
    else:
        words = _fraction_words(numerator, denominator, bool(whole))
    if whole:
        return f"{numbers.cardinal(whole)} and {words}"
    return words


def _fraction_words(numerator: int, denominator: int, after_whole: bool) -> str:
    """"one third", "three quarters"; "a half" after a whole number ("two and a half")."""
    singular, plural = _FRACTION_NAMES.get(denominator) or (
        numbers.ordinal(str(denominator)),
        numbers.plural_word(numbers.ordinal(str(denominator))),
    )
    if numerator == 1:
        return f"a {singular}" if after_whole else f"one {singular}"
    return f"{numbers.cardinal(str(numerator))} {plural}"


def _vulgar_fraction(match: re.Match[str]) -> str:
    """"½" as "one half", "2½ cups" as "two and a half cups", "¾ tsp" as "three quarters of a teaspoon"."""
    numerator, denominator = _VULGAR_FRACTIONS[match.group("vf_char")]
    whole, unit = match.group("vf_whole"), match.group("vf_unit")
    words = _fraction_words(numerator, denominator, bool(whole))
    if whole:
        words = f"{numbers.cardinal(whole)} and {words}"
    if not unit:
        return words
    singular, plural = UNITS[unit]
    if whole:
        return f"{words} {plural}"
    if (numerator, denominator) == (1, 2):
        return f"half {_article(singular)} {singular}"
    return f"{words} of {_article(singular)} {singular}"


def _article(word: str) -> str:
    return "an" if word[:1] in "aeiou" or word.startswith("hour") else "a"


def _ratio_words(first: str, second: str) -> str:
    return f"{numbers.cardinal(first)} to {numbers.cardinal(second)}"


def _ratio(match: re.Match[str]) -> str:
    return _ratio_words(match.group("ratio_a"), match.group("ratio_b"))


def _version(match: re.Match[str]) -> str:
    parts = match.group("version").split(".")
    if len(parts[0]) <= 3 and not parts[0].startswith("0") and all(len(part) == 3 for part in parts[1:]):
        return numbers.cardinal("".join(parts))  # "1.000.000": thousands parted by full stops
    if len(parts) == 4 and all(int(part) <= 255 and (part == "0" or not part.startswith("0")) for part in parts):
        return " dot ".join(numbers.cardinal(part) for part in parts)  # an IPv4 address
    return " point ".join(numbers.cardinal(part) for part in parts)


def _ipv6(match: re.Match[str]) -> str:
    """An IPv6 address group by group, each character said: "2001:db8::1" -> "two zero zero one colon
    D B eight double colon one". What is no address (more than eight groups, no digit) is left as it is."""
    address = match.group()
    halves = address.split("::")  # the pattern allows one "::" at most, and eight groups without one
    groups = sum(1 for group in address.replace("::", ":").split(":") if group)
    if (len(halves) == 2 and groups > 7) or not any(c.isdecimal() for c in address):
        return address  # eight groups and a "::" is no address; nor is "cafe::bead", a name in code

    def said(half: str) -> str:
        return " colon ".join(
            " ".join(numbers.cardinal(c) if c.isdecimal() else _HEX_LETTERS[c.lower()] for c in group) for group in half.split(":") if group
        )

    return " double colon ".join(said(half) for half in halves).strip()


def _measure(match: re.Match[str]) -> str:
    amount = match.group("measure_amount")
    if match.group("unit") in _SPACED_ONLY_UNITS and not match.group().endswith(" " + match.group("unit")):
        return match.group()  # "12A", "221B": a name, which espeak-ng reads as a number and a letter
    singular, plural = UNITS[match.group("unit")]
    magnitude = match.group("measure_magnitude")
    sign = "minus " if match.group("measure_sign") else ""
    if match.group("unit") == "x":
        return f"{sign}{numbers.number(amount)} times"
    unit = singular if numbers.is_one(amount) and not magnitude else plural
    middle = f" {magnitude}" if magnitude else ""
    return f"{sign}{numbers.number(amount)}{middle} {unit}"


def _percent(match: re.Match[str]) -> str:
    sign = "minus " if match.group("percent_sign") else ""
    return f"{sign}{numbers.number(match.group('percent_amount'))} percent"


def _range_dash(match: re.Match[str]) -> str:
    return " to "


def _is_year(match: re.Match[str], digits: str) -> bool:
    if len(digits) != 4 or not (1000 <= int(digits) <= 2099):
        return False
    if _YEAR_RANGE_START.search(match.string[max(0, match.start() - 8) : match.start()]):
        return True  # the end of a range of years, "2020-2021"
    previous = _previous_word(match)
    if (previous.lower() in _YEAR_CUES and (previous.lower() in ("year", "in", "since", "circa") or int(digits) >= 1100)) or previous in MONTHS or previous.rstrip(".") in MONTH_ABBREVIATIONS:
        return True
    following = match.string[match.end() : match.end() + 3]
    return following == "" or following[0] in ".,;:!?)-\u2013" or following.lstrip().startswith(("BC", "AD", "CE"))


def _number(match: re.Match[str]) -> str:
    if match.group("signed_amount") is not None:
        amount = match.group("signed_amount")
        sign = "minus " if match.group("number_sign") else ""
    else:
        amount = match.group("amount")
        sign = ""
    if amount.startswith("."):
        return sign + numbers.decimal("", amount[1:])
    if not sign and "," not in amount and "." not in amount and _is_year(match, amount):
        return numbers.year(amount)
    return sign + numbers.number(amount)


def _roman_value(numeral: str) -> int | None:
    if not _VALID_ROMAN.fullmatch(numeral):
        return None
    total = 0
    for index, letter in enumerate(numeral):
        value = _ROMAN_VALUES[letter]
        following = _ROMAN_VALUES[numeral[index + 1]] if index + 1 < len(numeral) else 0
        total += -value if value < following else value
    return total or None


def _roman(match: re.Match[str]) -> str:
    numeral = match.group("roman_numeral")
    previous = _previous_word(match)
    preceded_by_space = match.string[max(0, match.start() - 1) : match.start()] == " "
    if not preceded_by_space:
        return numeral
    value = _roman_value(numeral)
    if value is None:
        return numeral
    if previous in REGNAL_NAMES and (value > 1 or match.string[match.end() : match.end() + 1] in ("", ",", ".", " ")):
        if previous in ("Jr", "Sr"):
            return numeral
        return f"the {numbers.ordinal(str(value))}"
    if previous.lower() in ROMAN_CARDINAL_CONTEXT:
        return numbers.cardinal(str(value))
    return numeral


def _abbreviation(match: re.Match[str]) -> str:
    word = match.group("abbreviation_word")
    dotted = match.group("abbreviation_dot") is not None
    following = match.string[match.end() : match.end() + 2]
    next_is_capitalised = len(following) == 2 and following[0] == " " and following[1].isupper()
    next_is_number = len(following) == 2 and following[0] == " " and following[1].isdigit()
    if word in ("St", "Dr"):
        return _street_or_title(match, word, dotted, next_is_capitalised)
    if word in TITLES and (dotted or next_is_capitalised):
        return TITLES[word]
    if word in BEFORE_NUMBER and dotted and next_is_number:
        return BEFORE_NUMBER[word]
    if (word in MONTH_ABBREVIATIONS or word in WEEKDAY_ABBREVIATIONS) and dotted:
        name = MONTH_ABBREVIATIONS.get(word) or WEEKDAY_ABBREVIATIONS[word]
        return name + "." if _ends_sentence(match) else name  # "Closed on Sat." keeps its full stop
    expansion = ABBREVIATIONS.get(word)
    if expansion is not None and (dotted or "." in word or word in UNDOTTED_ABBREVIATIONS):
        words, may_end_sentence = expansion
        if dotted and may_end_sentence and _ends_sentence(match):
            return words + "."
        return words
    return match.group()


def _street_or_title(match: re.Match[str], word: str, dotted: bool, next_is_capitalised: bool) -> str:
    """"St. Mary" is Saint Mary and "Dr. Who" Doctor Who; after a name or a number ("Elm St.",
    "42 Oak Dr.") they are Street and Drive."""
    previous_text = match.string[max(0, match.start() - 2) : match.start()]
    after_name = len(previous_text) == 2 and previous_text[1] == " " and (previous_text[0].isalnum())
    previous = _previous_word(match)
    if (after_name and previous[:1].isupper()) or previous_text[:1].isdigit():
        words = "Street" if word == "St" else "Drive"
        return words + "." if dotted and _ends_sentence(match) else words
    if next_is_capitalised:
        return "Saint" if word == "St" else "Doctor"
    return match.group()


def _height(match: re.Match[str]) -> str:
    feet, inches = match.group("feet"), match.group("inches")
    return (
        f"{numbers.cardinal(feet)} {'foot' if feet == '1' else 'feet'}"
        f" {numbers.cardinal(inches)} {'inch' if inches == '1' else 'inches'}"
    )


def _exponent_words(exponent: str) -> str:
    """An exponent of digits (a sign allowed) or one letter: "minus nineteen", "x"."""
    sign = "minus " if exponent[:1] in ("-", "\u2212") else ""
    value = exponent.lstrip("+-\u2212")
    return sign + (numbers.cardinal(value) if value.isdecimal() else value)


def _power_words(exponent: str) -> str:
    """"squared", "cubed", or "to the power of" the exponent."""
    words = _exponent_words(exponent)
    return {"two": "squared", "three": "cubed"}.get(words, f"to the power of {words}")


def _scientific(match: re.Match[str]) -> str:
    words = f"{numbers.number(match.group('sci_mantissa'))} times ten to the power of {_exponent_words(match.group('sci_exponent'))}"
    unit = match.group("sci_unit")
    return f"{words} {UNITS[unit][1]}" if unit else words


def _caret_power(match: re.Match[str]) -> str:
    return " " + _power_words(match.group("caret_exponent"))


def _superscript_power(match: re.Match[str]) -> str:
    if not _POWER_BASE.search(match.string[max(0, match.start() - 3) : match.start()]):
        return match.group()
    return " " + _power_words(match.group("superscript_exponent").translate(_SUPERSCRIPT_TO_ASCII))


def _day_range(match: re.Match[str]) -> str:
    return f"{WEEKDAY_ABBREVIATIONS[match.group('day_from')]} to {WEEKDAY_ABBREVIATIONS[match.group('day_to')]}"


def _per(match: re.Match[str]) -> str:
    return " per "


def _with(match: re.Match[str]) -> str:
    return "without" if match.group("with_out") else "with"


def _approximately(match: re.Match[str]) -> str:
    return "about "


def _comparison(match: re.Match[str]) -> str:
    """"<" and ">" between spaced operands or before a number (espeak-ng says nothing for them)."""
    words = _COMPARISON_WORDS[match.group()[0]]
    if match.group()[1:] or match.string[match.end() : match.end() + 1] == " ":
        return words + match.group()[1:]
    return words + " "


def _ampersand(match: re.Match[str]) -> str:
    return "and"


def _hash_number(match: re.Match[str]) -> str:
    """"#5" is "number 5"; after a word ("ID#5") with a space before it too."""
    return " number " if match.string[match.start() - 1 : match.start()].isalnum() else "number "


_HASHTAG_WORD_BREAK: Final = re.compile(r"(?<=[a-z])(?=[A-Z0-9])|(?<=[A-Z])(?=[A-Z][a-z])|(?<=[0-9])(?=[A-Za-z])|_")


def _dialled(match: re.Match[str]) -> str:
    """What is dialled is said digit by digit ("dial 100"), and so is a service number called or
    texted ("call 911" is "nine one one", "ring 999" "nine nine nine")."""
    return numbers.digit_by_digit(match.group())


def _sharp(match: re.Match[str]) -> str:
    """"C#" and "F#" are "C sharp" and "F sharp", the languages and the notes (espeak-ng says "hash")."""
    return match.group("sharp_note") + " sharp"


def _stop_before_comma(match: re.Match[str]) -> str:
    """The full stop of an abbreviation before a comma ("3 lbs., 2 oz."): the comma is the pause, and
    espeak-ng, reading ".," as a full stop, drops it."""
    return ""


def _hashtag(match: re.Match[str]) -> str:
    """"#BlackLivesMatter" is "hashtag Black Lives Matter", as people read a hashtag aloud (espeak-ng
    says "hash" and runs the words together): its words are where the capitals, digits and
    underscores are."""
    return "hashtag " + " ".join(word for word in _HASHTAG_WORD_BREAK.split(match.group("hashtag_word")) if word)


def _magnitude(match: re.Match[str]) -> str:
    """"10M users", "2.5M", "1.2bn", "10k steps": a number of millions, billions or thousands."""
    return numbers.number(match.group("mag_amount")) + " " + _MAGNITUDE_SUFFIXES[match.group("mag_suffix")]


def _times(match: re.Match[str]) -> str:
    return " times "


def _markup(match: re.Match[str]) -> str:
    """Markdown's emphasis, heading and bullet marks are not read (espeak-ng says "asterisk" and
    "hash" for them, as LLM output writes them); an HTML tag is a word break."""
    return " " if match.lastgroup == "tag" else ""


def _link(match: re.Match[str]) -> str:
    """A markdown link is read as its text, not its address."""
    return match.group("link_text")


def _ellipsis(match: re.Match[str]) -> str:
    """An ellipsis as the pause it is. espeak-ng reads "..." as nothing at all and runs the words on
    each side of it together ("wait... what" as one word): between words it is a comma's pause, before
    a capital or at the end a sentence end, and before other punctuation or after none it is dropped."""
    text, start, end = match.string, match.start(), match.end()
    before, after = text[start - 1 : start], text[end : end + 1]
    if not (before.isalnum() or before in _CLOSING_MARKS) or after in _PAUSE_MARKS:
        return ""
    if after in ("", "\n"):
        return "."
    if after in _CLOSING_MARKS:
        return ","
    return ". " if after.isupper() and match.group()[-1].isspace() else ", "


_EXPANDERS: Final[dict[str, Callable[[re.Match[str]], str]]] = {
    "email": email,
    "url": url,
    "ipv6": _ipv6,
    "phone": phone,
    "dash_date": _dash_date,
    "us_date": _us_date,
    "iso_date": _iso_date,
    "named_date": _named_date,
    "day_month": _day_month,
    "time": _time,
    "clock": _clock,
    "money": _money,
    "coded_money": _coded_money,
    "money_code": _money_code,
    "intl_phone": _intl_phone,
    "digit_chain": _digit_chain,
    "height": _height,
    "decade": _decade,
    "ordinal": _ordinal,
    "fraction": _fraction,
    "ratio": _ratio,
    "version": _version,
    "scientific": _scientific,
    "vulgar_fraction": _vulgar_fraction,
    "measure": _measure,
    "percent": _percent,
    "range_dash": _range_dash,
    "number": _number,
    "day_range": _day_range,
    "roman": _roman,
    "abbreviation": _abbreviation,
    "ampersand": _ampersand,
    "hash_number": _hash_number,
    "hashtag": _hashtag,
    "stop_before_comma": _stop_before_comma,
    "sharp": _sharp,
    "dialled": _dialled,
    "per": _per,
    "with": _with,
    "approximately": _approximately,
    "comparison": _comparison,
    "caret_power": _caret_power,
    "superscript_power": _superscript_power,
    "ellipsis": _ellipsis,
    "magnitude": _magnitude,
    "times": _times,
    "line_mark": _markup,
    "emphasis": _markup,
    "link": _link,
    "tag": _markup,
}
