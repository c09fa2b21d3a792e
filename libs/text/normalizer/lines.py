"""The line structure of markdown, as LLM output writes it, read as a person reads it aloud.

A list, a table or a heading is written one item per line, often without a full stop; espeak-ng
runs such lines together into one sentence ("Second step bullet one a quote done") and reads a
table's rows as one string of words. Line by line:

- a list item (after "-", "*", "+", "•", "◦", "‣", or a number and "." or ")") and a heading end with
  a full stop when they end without punctuation and a line follows, so each is a sentence of its own
  (before a blank line or at the end of the text the sentence ends anyway); an
  item whose text goes on on the next line (not an item, a heading, a table row or a blank line)
  ends where its text does, and a quote (">") is prose, whose lines wrap;
- a numbered item keeps its number, said with a comma after it ("1. Mix" is "one, Mix"); the other
  markers are not read ("*", "+" and "#" are the written forms' own `line_mark`);
- a table row is its cells with a comma between them ("| Bob | 42 |" is "Bob, forty-two."); the row
  under the header ("|---|:--:|") and a code fence ("```python") are not read at all.

Every rule is a replacement of a stretch of the text (start, end, words), so the words keep their
written form for word timestamps; an insertion is a stretch of no characters.
"""

from __future__ import annotations

import re
from typing import Final

_FENCE: Final = re.compile(r"[ \t]*(?:```|~~~)[\w+.#-]*[ \t]*")
_TABLE_RULE: Final = re.compile(r"[ \t]*\|?(?:[ \t]*:?-{1,}:?[ \t]*\|)+(?:[ \t]*:?-{1,}:?[ \t]*)?")
_TABLE_ROW: Final = re.compile(r"[ \t]*\|.*\|[ \t]*")
_ITEM: Final = re.compile(r"[ \t]*(?:(?P<bullet>[-\u2022\u25e6\u2023])|(?P<marker>[*+]|#{1,6}|>)|(?P<number>\d{1,3})(?P<number_mark>[.)]))[ \t]+(?=\S)")
_ENDS_SPOKEN: Final = re.compile(r"[.!?:;,][\"')\]]*[ \t]*$")
_TRAILING_SPACE: Final = re.compile(r"[ \t]*$")


def line_replacements(text: str) -> list[tuple[int, int, str]]:
    """Each change the line rules make to `text`: (start, end, the words said), in order."""
    replacements: list[tuple[int, int, str]] = []
    item_end: tuple[int, str] | None = None  # the last line of the list item open now: (its start, its text)

    def close_item(by_a_line: bool = True) -> None:
        """The open item ends: before another line (which would run on from it), with a full stop; at
        a blank line or the end of the text, which end its sentence anyway, as it is."""
        nonlocal item_end
        if item_end is not None and by_a_line:
            replacements.extend(_full_stop(*item_end))
        item_end = None

    start = 0
    for body in text.split("\n"):
        line_start, start = start, start + len(body) + 1
        if not body.strip():
            close_item(by_a_line=False)
            continue
        if _FENCE.fullmatch(body) or _TABLE_RULE.fullmatch(body):
            close_item()
            replacements.append((line_start, line_start + len(body), ""))
            continue
        if _TABLE_ROW.fullmatch(body):
            close_item()
            replacements += _table_row(body, line_start)
            continue
        item = _ITEM.match(body)
        if item is None:
            if item_end is not None:  # the item's text wrapped onto this line
                item_end = (line_start, body)
            continue
        close_item()
        if item.group("bullet"):
            replacements.append((line_start + item.start("bullet"), line_start + item.end(), ""))
        elif item.group("number"):
            replacements.append((line_start + item.start("number_mark"), line_start + item.end("number_mark"), ","))
        marker = item.group("marker") or ""
        if marker.startswith("#"):  # a heading is one line: a full stop when a line follows it
            following_end = text.find("\n", start)
            if text[start : following_end if following_end >= 0 else len(text)].strip():
                replacements.extend(_full_stop(line_start, body))
        elif marker != ">":  # a quote is prose, whose lines wrap and end as prose does
            item_end = (line_start, body)
    close_item(by_a_line=False)
    return sorted(replacements, key=lambda replacement: (replacement[0], replacement[1]))


def _full_stop(start: int, body: str) -> list[tuple[int, int, str]]:
    """A full stop after the line at `start`, unless it ends with punctuation."""
    if _ENDS_SPOKEN.search(body):
        return []
    end = start + _TRAILING_SPACE.search(body).start()  # type: ignore[union-attr]
    return [(end, end, ".")]


def _table_row(body: str, start: int) -> list[tuple[int, int, str]]:
    """A table row's pipes, with the spaces around them: none said before the first cell, a comma
    between cells, a full stop after the last (unless its cell ends in punctuation)."""
    replacements = []
    pipes = [index for index, character in enumerate(body) if character == "|"]
    for number, pipe in enumerate(pipes):
        before, after = pipe, pipe + 1
        while before > 0 and body[before - 1] in " \t" and number > 0:
            before -= 1
        while after < len(body) and body[after] in " \t" and number < len(pipes) - 1:
            after += 1
        if number == 0:
            said = ""
        elif number < len(pipes) - 1:
            said = ", "
        else:
            said = "" if _ENDS_SPOKEN.search(body[:before]) else "."
        replacements.append((start + before, start + after, said))
    return replacements
