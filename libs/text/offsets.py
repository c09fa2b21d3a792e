"""Where a piece of rewritten text came from: the edits a rewrite made, to map positions in the new
text back to the text it was made from (written forms expanded, words replaced by placeholders)."""

from __future__ import annotations

import bisect
from dataclasses import dataclass


@dataclass(frozen=True)
class Edit:
    """`old[old_start:old_end]` became `new[new_start:new_end]`."""

    old_start: int
    old_end: int
    new_start: int
    new_end: int


class EditMap:
    """The edits of one rewrite, in order (they do not overlap)."""

    def __init__(self, edits: list[Edit]) -> None:
        self._edits = edits
        self._new_starts = [edit.new_start for edit in edits]

    def old_position(self, new_position: int, is_end: bool) -> int:
        """The position in the old text of `new_position`; one inside a rewritten stretch maps to
        the stretch's old start (a span's start) or old end (a span's end)."""
        index = bisect.bisect_right(self._new_starts, new_position) - 1
        if index < 0:
            return new_position
        edit = self._edits[index]
        if new_position >= edit.new_end:
            return edit.old_end + (new_position - edit.new_end)
        if new_position == edit.new_start or not is_end:
            return edit.old_start
        return edit.old_end


class Taken:
    """The characters of a text that some replacements (start, end, new text) already replace, so
    that others can give way to them (an insertion, which replaces none, takes nothing). Each test
    is a search in C over the stretch tested: linear in the text however many there are."""

    def __init__(self, length: int, replacements: list[tuple[int, int, str]]) -> None:
        self._marks = bytearray(length)
        for start, end, _ in replacements:
            self._marks[start:end] = b"\x01" * (end - start)

    def overlaps(self, start: int, end: int) -> bool:
        """Whether any character of [start, end) is taken."""
        return self._marks.find(1, start, end) >= 0


def edits_of_replacements(old: str, replacements: list[tuple[int, int, str]]) -> tuple[str, list[Edit]]:
    """`old` with each (start, end, new text) replacement made (in order, not overlapping), and the edits."""
    pieces: list[str] = []
    edits: list[Edit] = []
    position = 0
    new_length = 0
    for start, end, text in replacements:
        pieces.append(old[position:start])
        new_length += start - position
        pieces.append(text)
        edits.append(Edit(start, end, new_length, new_length + len(text)))
        new_length += len(text)
        position = end
    pieces.append(old[position:])
    return "".join(pieces), edits
