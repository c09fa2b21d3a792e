"""E-mail addresses, web addresses and phone numbers, read out part by part."""

from __future__ import annotations

import re
from typing import Final

from libs.text.normalizer import numbers

_DOMAIN_WORDS: Final = {"com": "com", "org": "org", "net": "net", "io": "I O", "edu": "E D U", "gov": "gov"}


def spell(text: str) -> str:
    """An e-mail or web address part by part: "john.doe_1" -> "john dot doe underscore one"."""
    words: list[str] = []
    for piece in re.findall(r"[A-Za-z]+|\d+|[^A-Za-z\d]", text):
        if piece.isdecimal():
            words.append(numbers.digit_by_digit(piece) if len(piece) > 2 else numbers.cardinal(piece))
        elif piece.isalpha():
            words.append(_DOMAIN_WORDS.get(piece.lower(), piece) if words and words[-1] == "dot" else piece)
        else:
            words.append(_SYMBOL_WORDS.get(piece, ""))
    return " ".join(word for word in words if word)


_SYMBOL_WORDS: Final = {
    ".": "dot",
    "_": "underscore",
    "-": "dash",
    "+": "plus",
    "@": "at",
    "/": "slash",
    ":": "colon",
    "?": "question mark",
    "=": "equals",
    "&": "and",
    "#": "hash",
    "~": "tilde",
    "%": "percent",
}


def email(match: re.Match[str]) -> str:
    return spell(match.group("email"))


def url(match: re.Match[str]) -> str:
    address = re.sub(r"^https?://", "", match.group("url"))
    address = address.rstrip("/")
    if address.startswith("www."):
        return "W W W dot " + spell(address[4:])
    return spell(address)


def phone(match: re.Match[str]) -> str:
    """Digit groups said digit by digit; a "+" before the country code is "plus" ("+1 555 ...")."""
    written = match.group("phone")
    groups = re.findall(r"\d+", written)
    return ("plus " if written.startswith("+") else "") + ", ".join(numbers.digit_by_digit(group) for group in groups)
