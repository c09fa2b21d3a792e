"""Splitting text into sentence chunks for synthesis, whole or as it arrives piece by piece.

A chunk is an exact slice of the text: it keeps the whitespace that follows its sentence, so the
chunks of a text joined together give the text back. That whitespace matters to espeak-ng (a blank
line after a sentence changes its terminator phoneme), so a chunk phonemised alone gives the same
phonemes as inside the whole text.

The splitter cuts only where espeak-ng also ends a sentence, never anywhere else, so phonemising
chunk by chunk gives exactly the phonemes of the whole text (what Piper does). espeak-ng cuts in a
few more places ("Dr. Smith", "J. Smith", '"Hi!" she said'); the text frontend splits a chunk further
where it does, so those places still give separate sentences but never separate chunks.

Cut points:
- after ".", "?" or "!" (a run such as "?!" or "!!" counts as one) that directly follows a letter,
  digit, closing quote or bracket, then any closing quotes or brackets, then whitespace, when the
  next character is not a lower-case letter, the clause so far has a letter or digit, and the word before a "." is not an abbreviation ("Dr.", "e.g."), an
  initial ("J.") or a list item's number at the start of its line ("1. Mix"). Two or more dots ("...") are an ellipsis, not a sentence end.
- at a blank line (paragraph), when the clause so far has a letter or digit.
- at `max_chunk_chars`, when a chunk has no cut that early, whatever follows (a long run of spaces,
  quotes or "!" included): at the best break in the stretch (`best_break`: clause punctuation,
  then before a conjunction, then a space), or at the limit when it has none. This keeps the work
  per chunk, and the text a stream holds back, bounded; espeak-ng reads such a long run as several
  clauses too, but where it breaks them may differ.

A chunk boundary is decided by the text up to the first character of the next chunk (or, for a cut
at the limit, by the chunk's own `max_chunk_chars` characters), which is what lets
`IncrementalSentenceSplitter` give the same chunks as `split_sentences` however the text is cut into
pieces. Both cost time linear in the text: the incremental splitter resumes its scan where the last
piece left it, instead of reading the pending text again.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

DEFAULT_MAX_CHUNK_CHARS: Final = 1000

_SENTENCE_END: Final = frozenset(".?!")
_CLOSERS: Final = frozenset("\"')]}>`\u00bb\u201d\u2019")
_CLOSER_CLASS: Final = re.escape("".join(sorted(_CLOSERS)))
# Punctuation where espeak-ng may end a clause and restart its "has a letter or digit" test.
_CLAUSE_PUNCTUATION: Final = frozenset(",;:\u2014")
# Runs are measured with regular expressions, which read them at C speed, and never past the chunk
# limit: a run of spaces or "!" that a stream sends one character at a time is read again on every
# piece, but only fast and at most `max_chunk_chars` of it.
_SPACE_RUN: Final = re.compile(r"\s*")
_MARK_RUN: Final = re.compile(r"[.?!]*")
_CLOSER_RUN: Final = re.compile("[" + _CLOSER_CLASS + "]*")
_ABBREVIATIONS: Final = frozenset(
    ["mr", "mrs", "ms", "mx", "dr", "prof", "sr", "jr", "st", "mt", "ft", "rev", "hon", "gen", "col", "lt", "sgt", "capt", "cmdr", "gov", "sen", "rep", "pres", "vs", "etc", "eg", "ie", "cf", "al", "approx", "dept", "est", "fig", "figs", "no", "nos", "vol", "vols", "pp", "ch", "sec", "inc", "ltd", "co", "corp", "bros", "jan", "feb", "mar", "apr", "jun", "jul", "aug", "sep", "sept", "oct", "nov", "dec", "mon", "tue", "tues", "wed", "thu", "thur", "thurs", "fri", "sat", "sun", "am", "pm", "para", "paras", "rm", "apt", "art", "eq", "ste", "op", "tel", "pt", "ave", "blvd", "rd", "ln", "hwy", "univ", "misc", "govt", "intl", "appt"]
)

# Where a long stretch of text without a sentence end is best cut, best first (see `best_break`).
# After clause punctuation (and the whitespace that follows it) a speaker pauses anyway: espeak-ng
# ends a clause at each of these marks (the dashes too), and a sentence end the splitter could not
# yet confirm is one. A new clause often starts with a conjunction; a cut just before one falls
# where a reader breathes. Each kind is found by a regular expression, at C speed.
CONJUNCTIONS: Final = frozenset(
    ["and", "but", "or", "nor", "so", "yet", "because", "which", "who", "whom", "whose", "that", "while", "whereas", "although", "though", "when", "whenever", "where", "wherever", "if", "unless", "until", "since", "then", "after", "before"]
)
_CLAUSE_BREAKS: Final = re.compile(r"[,;:.?!\u2014\u2013-][" + _CLOSER_CLASS + r"]*\s+")
# A word after whitespace, followed by a character that is not a letter inside the stretch read;
# a cut before a conjunction is where such a word starts. (Each word is matched once and looked up
# in a set: an alternation of the conjunctions, or a pattern that starts with a run of spaces, would
# be tried again at every position of a long run of spaces.)
_WORD_AFTER_SPACE: Final = re.compile(r"(?<=\s)[^\W\d_]+(?=[\W\d_])")
_SPACE_BREAKS: Final = re.compile(r"\s+")


def _word_before(text: str, index: int, floor: int) -> str:
    """The run of non-space characters that ends just before `text[index]` (not before `floor`)."""
    start = index
    while start > floor and not text[start - 1].isspace():
        start -= 1
    return text[start:index]


def _is_abbreviation(text: str, dot_index: int, floor: int, floor_starts_line: bool = False) -> bool:
    """True when the "." at `dot_index` most likely ends an abbreviation, an initial, or the number of
    an item of a numbered list (at the start of its line: the front end reads "1. Mix" as "one, Mix",
    libs.text.normalizer.lines). Only `text[floor:]` is read; `floor_starts_line` says whether a line
    starts at `floor`."""
    word = _word_before(text, dot_index, floor).lstrip("\"'([{`\u00ab\u201c\u2018")
    if "." in word:  # "e.g", "U.S", "a.m": dotted abbreviations
        return True
    if len(word) == 1 and word.isalpha():  # an initial: "J. R. R. Tolkien"
        return True
    if 1 <= len(word) <= 3 and word.isdigit() and _starts_line(text, dot_index - len(word), floor, floor_starts_line):
        return True
    return word.lower() in _ABBREVIATIONS


def _starts_line(text: str, index: int, floor: int, floor_starts_line: bool) -> bool:
    """Whether only spaces or tabs stand between the start of its line and `index` (reading no further
    back than `floor`, where a line starts when `floor_starts_line`)."""
    while index > floor and text[index - 1] in " \t":
        index -= 1
    return text[index - 1] == "\n" if index > floor else floor_starts_line


def best_break(
    text: str, low: int, high: int, target: int | None = None, floor: int | None = None, floor_starts_line: bool = False
) -> int | None:
    """The best place in [low, high] to cut `text` when it has no sentence end there, or None.

    A cut always falls just after whitespace, so no word is split: best after clause punctuation
    (", ; :", a dash, an unconfirmed sentence end, not an abbreviation's "."), then just before a
    conjunction ("and", "but", "because", "which", ...), then at any space; among cuts of the best
    kind, the one nearest `target` (default `high`). Only `text[floor:high]` is read (`floor`
    defaults to `low`), so the answer does not depend on text that has not arrived yet;
    `floor_starts_line` says whether a line starts at `floor`.
    """
    floor = low if floor is None else floor
    target = high if target is None else target
    for kind in (_CLAUSE_BREAKS, _WORD_AFTER_SPACE, _SPACE_BREAKS):
        chosen: int | None = None
        for match in kind.finditer(text, floor, high):
            if kind is _WORD_AFTER_SPACE:
                if match.group().lower() not in CONJUNCTIONS:
                    continue
                cut = match.start()
            else:
                cut = match.end()
            if cut < low or cut <= floor:
                continue
            if kind is _CLAUSE_BREAKS and text[match.start()] == "." and _is_abbreviation(text, match.start(), floor, floor_starts_line):
                continue
            if chosen is None or abs(cut - target) < abs(chosen - target):
                chosen = cut
        if chosen is not None:
            return chosen
    return None


def is_cut_short(chunk: str) -> bool:
    """True when `chunk` does not end a sentence or a paragraph: the text goes on after it (a cut
    at the chunk limit, or a stream's text spoken before its sentence ended)."""
    body = chunk.rstrip()
    if chunk.count("\n", len(body)) >= 2:
        return False
    body = body.rstrip("".join(_CLOSERS))
    return not body or body[-1] not in _SENTENCE_END


@dataclass
class _Scan:
    """How far the scan of the chunk that starts at `start` has got: it resumes at `index` with
    `has_alnum` (whether the clause so far has a letter or digit) when more text arrives.
    `line_start`: whether a line starts where the chunk does (the text's start, or after a line break)."""

    start: int
    index: int
    has_alnum: bool = False
    line_start: bool = True


def _limit_cut(text: str, start: int, limit: int, line_start: bool) -> int:
    """Where a chunk that reaches `limit` without a sentence end is cut: its best break, preferably
    in its second half, else at the limit (a single long word)."""
    middle = start + (limit - start) // 2
    for low in (middle, start + 1):
        cut = best_break(text, low, limit, floor=start, floor_starts_line=line_start)
        if cut is not None:
            return cut
    return limit


def _next_cut(text: str, scan: _Scan, final: bool, max_chunk_chars: int) -> int | None:
    """End of the chunk that starts at `scan.start`; None when more text is needed to decide (then
    `scan` says where to resume).

    With `final` the end of `text` is the end of the input and the last chunk ends there.
    """
    start = scan.start
    limit = start + max_chunk_chars
    length = len(text)
    index, has_alnum = scan.index, scan.has_alnum
    while index < length and index < limit:
        # Everything before `index` is settled; a construct that needs more text starts again here.
        scan.index, scan.has_alnum = index, has_alnum
        character = text[index]
        if character.isalnum():
            has_alnum = True
            index += 1
            continue
        if character in _CLAUSE_PUNCTUATION:
            after = index + 1
            if after >= length and not final:
                return None  # the next character decides whether a clause ends here
            if after >= length or text[after].isspace() or text[after] in _CLOSERS:
                has_alnum = False  # espeak-ng may start a new clause here
            index = after
            continue
        if character.isspace():
            run_end = _SPACE_RUN.match(text, index, limit).end()
            if run_end >= limit:
                index = limit
                break
            if run_end == length and not final:
                return None  # the run may go on, and it belongs to this chunk
            if has_alnum and text.count("\n", index, run_end) >= 2 and run_end < length:
                return run_end
            index = run_end
            continue
        if character in _SENTENCE_END:
            run_end = _MARK_RUN.match(text, index, limit).end()
            closers_end = _CLOSER_RUN.match(text, run_end, limit).end()
            space_end = _SPACE_RUN.match(text, closers_end, limit).end()
            if space_end >= limit:
                index = limit
                break
            if space_end == length:
                if not final:
                    return None  # the next character decides
                return length
            dots = text.count(".", index, run_end)
            before = text[index - 1] if index > start else " "
            is_end = (
                has_alnum
                and (before.isalnum() or before in _CLOSERS)  # espeak-ng folds ",?" or ";!" into ", ;"
                and dots < 2
                and space_end > closers_end
                and not text[space_end].islower()
                and not (text[index] == "." and _is_abbreviation(text, index, start, scan.line_start))
            )
            if is_end:
                return space_end
            if dots >= 2 or closers_end > run_end or space_end > closers_end:
                has_alnum = False  # espeak-ng may start a new clause here; never cut too early
            index = closers_end
            continue
        index += 1
    if index >= limit:
        return _limit_cut(text, start, limit, scan.line_start)
    if final:
        return length
    scan.index, scan.has_alnum = index, has_alnum
    return None


def split_sentences(text: str, max_chunk_chars: int = DEFAULT_MAX_CHUNK_CHARS) -> list[str]:
    """Sentence chunks of `text`; "".join(chunks) == text."""
    chunks: list[str] = []
    start = 0
    while start < len(text):
        end = _next_cut(text, _Scan(start, start, line_start=start == 0 or text[start - 1] == "\n"), final=True, max_chunk_chars=max_chunk_chars)
        assert end is not None and end > start
        chunks.append(text[start:end])
        start = end
    return chunks


class IncrementalSentenceSplitter:
    """Sentence chunks of text that arrives in pieces (tokens from a language model).

    `feed` returns the chunks that are complete, `flush` the rest at the end of the input. However
    the text is cut into pieces, the chunks are those `split_sentences` gives for the whole text.
    It never holds more than `max_chunk_chars` characters after a `feed`: a longer stretch without
    a sentence end is cut at its best break. `cut_pending` gives a stream's caller the text held so
    far, up to its best break, when it will not wait any longer for the sentence to end.
    """

    def __init__(self, max_chunk_chars: int = DEFAULT_MAX_CHUNK_CHARS) -> None:
        if max_chunk_chars < 1:
            raise ValueError("max_chunk_chars must be positive")
        self._max_chunk_chars = max_chunk_chars
        self._pending = ""
        self._scan = _Scan(0, 0)

    def feed(self, text_piece: str) -> list[str]:
        """Add `text_piece`; return the chunks it completes (possibly none)."""
        self._pending += text_piece
        return self._cut(final=False)

    def flush(self) -> list[str]:
        """End of input: return the remaining chunks and start over empty."""
        chunks = self._cut(final=True)
        self._pending, self._scan = "", _Scan(0, 0)
        return chunks

    def cut_pending(self) -> str | None:
        """The text held so far up to its best break (never inside a word that may go on), which
        is then no longer held; None when there is no break yet (a single word so far)."""
        length = len(self._pending)
        cut = None
        for low in (length // 2, 1):
            cut = best_break(self._pending, low, length, floor=0, floor_starts_line=self._scan.line_start)
            if cut is not None:
                break
        if cut is None:
            return None
        chunk = self._pending[:cut]
        self._pending, self._scan = self._pending[cut:], _Scan(0, 0, line_start=chunk.endswith("\n"))
        return chunk

    @property
    def pending_text(self) -> str:
        """Text received but not yet returned in a chunk."""
        return self._pending

    def _cut(self, final: bool) -> list[str]:
        chunks: list[str] = []
        text = self._pending
        while self._scan.start < len(text):
            end = _next_cut(text, self._scan, final, self._max_chunk_chars)
            if end is None:
                break
            chunks.append(text[self._scan.start : end])
            self._scan = _Scan(end, end, line_start=text[end - 1] == "\n")
        if self._scan.start:  # keep only what is pending, and the scan's place in it
            shift = self._scan.start
            self._pending = text[shift:]
            self._scan = _Scan(0, self._scan.index - shift, self._scan.has_alnum, self._scan.line_start)
        return chunks
