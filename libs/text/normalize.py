"""Text normalisation before phonemisation.

Piper hands text to espeak-ng unchanged, and our phonemes must equal Piper's, so every rule here
either leaves espeak-ng's phonemes unchanged (checked in tests/unit/test_text_normalize.py) or repairs a
form that espeak-ng reads wrongly:

- Unicode NFC. espeak-ng reads a decomposed "café" (e + U+0301) as "kˈeɪf"; composed it is "kæfˈeɪ".
- Combining marks left on a plain letter after NFC are removed outside inline phoneme blocks: no
  letter of a language takes them there (every accented Latin letter composes), and they are what
  strikethrough ("s̶t̶r̶i̶k̶e̶"), underline and "Zalgo" text are drawn with; espeak-ng read "strike" in
  strikethrough as "strikeh" and "under" underlined with a trilled r. Marks on other letters (Yoruba's
  "ẹ́", Hindi's vowel signs) and inside `[[ ]]` (IPA's "n̩") stay.
- Letters and digits written in another form of their alphabet become the plain ones: fullwidth
  ("ＴＯＫＹＯ ２０２０", as East Asian text writes Latin), halfwidth, and the mathematical styles that
  social media uses for bold and italic ("𝐁𝐨𝐥𝐝", "𝘐𝘵𝘢𝘭𝘪𝘤", "ℂ"), and letters, digits and units in
  a circle or a square ("Ⓗⓔⓛⓛⓞ", "🅷🅴🅻🅻🅾", "①", "㎏"). espeak-ng reads each of those by its code point
  ("letter f f three four"). Only letters, digits and enclosed forms: fullwidth punctuation stays,
  for the Mandarin front end splits sentences at it; superscripts and small capitals stay, for
  they are IPA in inline phonemes ("pʰ", "ɪ").
- Invisible format characters are removed (zero-width spaces and joiners, bidi marks, soft hyphens,
  BOM, lone surrogates). espeak-ng treats a zero-width space as a word break, which splits words the
  reader sees as one. Control characters (a NUL, a bell, an escape) become a space: nothing shows
  them inside a word, and "hello\x00world" is two words run together by a program, not one (a NUL
  would also end the C string early).
- Line breaks become "\\n" and every other kind of space a plain space; a run of whitespace keeps
  only what espeak-ng reacts to: a blank line (paragraph: a sentence end), a single line break (after
  a full stop it ends the sentence even before a lower-case word), or one space. Whitespace at the
  ends is kept in the same collapsed form, because a blank line after the last sentence changes its
  terminator in Piper ("Hello.\\n\\n" ends without the "." phoneme).
- Emoji are read by espeak-ng's own names for them ("red heart", "thumbs up"), which the forms
  around an emoji break: a presentation selector (U+FE0F, as phones send "❤️") makes espeak-ng say
  only "red", a skin tone (U+1F3FB-U+1F3FF) "thumbs medium", and two emoji side by side run
  together as one word ("thumbsthumbs"). Variation selectors and skin tones are removed, emoji side
  by side get a space, and a zero-width joiner between two emoji is kept: espeak-ng names the whole
  sequence ("woman technologist", "rainbow flag"). The two regional indicators of a flag stay
  together ("🇺🇸" is "United States").
- Typographic quotes become ASCII quotes and "…" becomes "..." (same phonemes; one form for the
  sentence splitter). The modifier-letter apostrophe (U+02BC, "donʼt") becomes "'"; espeak-ng would
  spell it out letter by letter.
- Unicode hyphens (U+2010, U+2011, U+2012) become "-": espeak-ng reads "x‑ray" as two words.
- An em dash between two words without spaces ("word—word") gets spaces, so espeak-ng makes the
  same clause break (and pause) it makes for "word — word".
- HTML character references ("&amp;", "&quot;", "&#39;", "&#x2014;"), as text copied from web pages
  and web APIs carries them, become their characters (first, so the rules above apply to what they
  become); espeak-ng reads "&amp;" as "and amp" and "&#39;" as "and number thirty-nine". Only the
  complete form with its ";" is read, so "AT&T" and "R&D" stay as written.
"""

from __future__ import annotations

import html
import re
import unicodedata
from typing import Final

from libs.text.errors import EmptyTextError, InvalidTextError, TextTooLongError
from libs.text.pronounce import split_inline

_LINE_BREAKS: Final = {"\r\n": "\n", "\r": "\n", "\x85": "\n", "\u2028": "\n", "\u2029": "\n\n"}
_CHARACTER_MAP: Final = str.maketrans(
    {
        "\u201c": '"',  # left double quotation mark
        "\u201d": '"',  # right double quotation mark
        "\u201e": '"',  # double low-9 quotation mark
        "\u201f": '"',  # double high-reversed-9 quotation mark
        "\u00ab": '"',  # left-pointing double angle quotation mark
        "\u00bb": '"',  # right-pointing double angle quotation mark
        "\u2018": "'",  # left single quotation mark
        "\u2019": "'",  # right single quotation mark
        "\u201a": "'",  # single low-9 quotation mark
        "\u201b": "'",  # single high-reversed-9 quotation mark
        "\u02bc": "'",  # modifier letter apostrophe
        "\u2010": "-",  # hyphen
        "\u2011": "-",  # non-breaking hyphen
        "\u2012": "-",  # figure dash
        "\u2026": "...",  # horizontal ellipsis
        "\u2103": "\u00b0C",  # degree Celsius, as one character: "°C", which the written forms read
        "\u2109": "\u00b0F",  # degree Fahrenheit
    }
)
# Whitespace runs: the newline count decides what the run becomes.
_WHITESPACE_RUN: Final = re.compile(r"\s+")
_UNSPACED_EM_DASH: Final = re.compile(r"(?<=\w)\u2014(?=\w)")
_KEPT_CONTROLS: Final = frozenset("\n\t")
_REMOVED_CATEGORIES: Final = frozenset({"Cf", "Cs"})
"""Invisible format characters and lone surrogates."""
_CHARACTER_REFERENCE: Final = re.compile(r"&(?:[A-Za-z][A-Za-z0-9]{1,31}|#[0-9]{1,7}|#[xX][0-9A-Fa-f]{1,6});")


_ZWJ: Final = "\u200d"


def _is_presentation(character: str) -> bool:
    """A variation selector or an emoji skin tone: how a character is drawn, nothing to say."""
    code = ord(character)
    return 0xFE00 <= code <= 0xFE0F or 0xE0100 <= code <= 0xE01EF or 0x1F3FB <= code <= 0x1F3FF


def _is_emoji(character: str) -> bool:
    return unicodedata.category(character) == "So"


def _is_regional_indicator(character: str) -> bool:
    return 0x1F1E6 <= ord(character) <= 0x1F1FF


def _emoji_read_whole(text: str) -> str:
    """`text` with a space between emoji side by side (a flag's two regional indicators kept together)
    and a zero-width joiner kept only between two emoji (the module docstring's rules)."""
    out: list[str] = []
    indicators = 0  # regional indicators just before: a flag is a pair of them
    for index, character in enumerate(text):
        if character == _ZWJ:
            if out and _is_emoji(out[-1]) and index + 1 < len(text) and _is_emoji(text[index + 1]):
                out.append(character)
            continue
        pairs_a_flag = _is_regional_indicator(character) and indicators % 2 == 1
        if out and _is_emoji(character) and _is_emoji(out[-1]) and not pairs_a_flag:
            out.append(" ")
        indicators = indicators + 1 if _is_regional_indicator(character) else 0
        out.append(character)
    return "".join(out)


class _Forms(dict[int, "str | None"]):
    """`str.translate`'s table of what each character becomes, filled the first time a character is
    seen (one pass in C over every text after that): a space (controls but line breaks and tabs),
    removed (None: invisible format characters, presentation selectors and skin tones), mapped (`_CHARACTER_MAP`),
    its plain form (`_plain_form`), or itself. A zero-width joiner is kept for `_emoji_read_whole`."""

    def __missing__(self, code: int) -> str | None:
        character = chr(code)
        category = unicodedata.category(character)
        if code in _CHARACTER_MAP:
            form = _CHARACTER_MAP[code]
        elif category == "Cc" and character not in _KEPT_CONTROLS:
            form = " "
        elif character != _ZWJ and (category in _REMOVED_CATEGORIES or _is_presentation(character)):
            form = None
        else:
            form = _plain_form(character)
        if len(self) < _MAX_FORMS_KEPT:
            self[code] = form
        return form


class _EmojiKinds(dict[int, str]):
    """`str.translate`'s table that writes each emoji as "e" and anything else as "." (filled as `_Forms`)."""

    def __missing__(self, code: int) -> str:
        kind = "e" if _is_emoji(chr(code)) else "."
        if len(self) < _MAX_FORMS_KEPT:
            self[code] = kind
        return kind


_MAX_FORMS_KEPT: Final = 65_536
"""Characters whose form each table remembers at most (a text of every code point cannot grow them
past this)."""
_FORMS: Final = _Forms()
_EMOJI_KINDS: Final = _EmojiKinds()


_LETTER_FORMS: Final = ("<wide>", "<narrow>", "<font>")
"""Unicode's decomposition tags of a letter or digit drawn in another form (NFKC gives the plain one)."""


_MARK_ON_PLAIN_LETTER: Final = re.compile(r"(?<=[A-Za-z])[\u0300-\u036f\u1ab0-\u1aff\u1dc0-\u1dff\u20d0-\u20ff\ufe20-\ufe2f]+")
"""Combining marks (the Unicode blocks of them) right after a plain ASCII letter."""
_ENCLOSED_FORMS: Final = ("<circle>", "<square>")
"""Unicode's decomposition tags of a letter, digit or short word drawn in a circle or a square."""
_ENCLOSED_LATIN_LETTER: Final = re.compile(r"LATIN (CAPITAL|SMALL) LETTER ([A-Z])$")
"""The name's end of an enclosed Latin letter with no decomposition ("NEGATIVE SQUARED LATIN CAPITAL LETTER H")."""


def _plain_form(character: str) -> str:
    decomposition = unicodedata.decomposition(character)
    category = unicodedata.category(character)
    if decomposition.startswith(_LETTER_FORMS) and category[0] in "LN":
        return unicodedata.normalize("NFKC", character)
    if decomposition.startswith(_ENCLOSED_FORMS) and category in ("So", "No"):
        return unicodedata.normalize("NFKC", character)
    if category == "Nl" and unicodedata.name(character, "").startswith("ROMAN NUMERAL"):
        return unicodedata.normalize("NFKC", character)  # "Ⅻ" is "XII", which the written forms read
    if category == "So":
        enclosed = _ENCLOSED_LATIN_LETTER.search(unicodedata.name(character, ""))
        if enclosed is not None:
            return enclosed.group(2) if enclosed.group(1) == "CAPITAL" else enclosed.group(2).lower()
    return character


def _collapse_whitespace(match: re.Match[str]) -> str:
    newlines = match.group().count("\n")
    if newlines >= 2:
        return "\n\n"
    return "\n" if newlines == 1 else " "


def normalize_text(text: str) -> str:
    """Text in the form the phonemiser expects (see the module docstring for every rule)."""
    if "&" in text:
        text = _CHARACTER_REFERENCE.sub(lambda reference: html.unescape(reference.group()), text)
    text = unicodedata.normalize("NFC", text)
    for line_break, replacement in _LINE_BREAKS.items():
        text = text.replace(line_break, replacement)
    text = text.translate(_FORMS)
    if not text.isascii():
        if _MARK_ON_PLAIN_LETTER.search(text):
            text = "".join(part if is_block else _MARK_ON_PLAIN_LETTER.sub("", part) for part, is_block in split_inline(text))
        if _ZWJ in text or "ee" in text.translate(_EMOJI_KINDS):
            text = _emoji_read_whole(text)
    text = _UNSPACED_EM_DASH.sub(" \u2014 ", text)
    # str.isspace covers every Unicode space separator (NBSP, thin space, ideographic space, ...).
    return _WHITESPACE_RUN.sub(_collapse_whitespace, text)


def has_speakable_characters(text: str) -> bool:
    """True when `text` has at least one letter, digit or symbol (anything but spaces and punctuation)."""
    return any(not (character.isspace() or unicodedata.category(character).startswith("P")) for character in text)


def check_text_length(text: str, max_chars: int) -> None:
    """Raise TextTooLongError when `text` has more than `max_chars` characters."""
    if len(text) > max_chars:
        raise TextTooLongError(len(text), max_chars)


def check_not_empty(text: str) -> None:
    """Raise EmptyTextError when `text` has nothing but spaces and punctuation."""
    if not has_speakable_characters(text):
        raise EmptyTextError("only spaces or punctuation" if text else "no characters")


def decode_utf8(data: bytes) -> str:
    """`data` decoded as UTF-8; InvalidTextError names the byte offset of the first bad byte."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise InvalidTextError(error.start, error.reason) from None
