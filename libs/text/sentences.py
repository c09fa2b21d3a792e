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
  digit, closing quote or bracket, then any closing quotes or brackets, then whitespace, when the next character is not a lower-case letter, the clause so far
  has a letter or digit, and the word before a "." is not an abbreviation ("Dr.", "e.g.") or an
  initial ("J."). Two or more dots ("...") are an ellipsis, not a sentence end.
- at a blank line (paragraph), when the clause so far has a letter or digit.
- at `max_chunk_chars`, when a chunk has no cut that early: after the last whitespace before the
  limit, or at the limit when it has none. This keeps the work per chunk bounded; espeak-ng reads
  such a long run as several clauses too, but where it breaks them may differ.

A chunk boundary is decided by the text up to the first character of the next chunk, which is what
lets `IncrementalSentenceSplitter` give the same chunks as `split_sentences` however the text is cut
into pieces.
"""

from __future__ import annotations

from typing import Final

DEFAULT_MAX_CHUNK_CHARS: Final = 1000

_SENTENCE_END: Final = frozenset(".?!")
_CLOSERS: Final = frozenset("\"')]}>`\u00bb\u201d\u2019")
# Punctuation where espeak-ng may end a clause and restart its "has a letter or digit" test.
_CLAUSE_PUNCTUATION: Final = frozenset(",;:\u2014")
_ABBREVIATIONS: Final = frozenset(
    """
    mr mrs ms mx dr prof sr jr st mt ft rev hon gen col lt sgt capt cmdr gov sen rep pres
    vs etc eg ie cf al approx dept est fig figs no nos vol vols pp ch sec inc ltd co corp bros
    jan feb mar apr jun jul aug sep sept oct nov dec mon tue tues wed thu thur thurs fri sat sun
    am pm
    """.split()
)


def _word_before(text: str, index: int) -> str:
    """The run of non-space characters that ends just before `text[index]`."""
    start = index
    while start > 0 and not text[start - 1].isspace():
        start -= 1
    return text[start:index]


def _is_abbreviation(text: str, dot_index: int) -> bool:
    """True when the "." at `dot_index` most likely ends an abbreviation or an initial."""
    word = _word_before(text, dot_index).lstrip("\"'([{`\u00ab\u201c\u2018")
    if "." in word:  # "e.g", "U.S", "a.m": dotted abbreviations
        return True
    if len(word) == 1 and word.isalpha():  # an initial: "J. R. R. Tolkien"
        return True
    return word.lower() in _ABBREVIATIONS


def _next_cut(text: str, start: int, final: bool, max_chunk_chars: int) -> int | None:
    """End of the chunk that starts at `start`; None when more text is needed to decide.

    With `final` the end of `text` is the end of the input and the last chunk ends there.
    """
    limit = start + max_chunk_chars
    has_alnum = False
    index = start
    length = len(text)
    while index < length and index < limit:
        character = text[index]
        if character.isalnum():
            has_alnum = True
            index += 1
            continue
        if character in _CLAUSE_PUNCTUATION:
            after = index + 1
            if after >= length or text[after].isspace() or text[after] in _CLOSERS:
                has_alnum = False  # espeak-ng may start a new clause here
            index = after
            continue
        if character.isspace():
            run_end = index
            while run_end < length and text[run_end].isspace():
                run_end += 1
            if run_end == length and not final:
                return None  # the run may go on, and it belongs to this chunk
            if has_alnum and text.count("\n", index, run_end) >= 2 and run_end < length:
                return run_end
            index = run_end
            continue
        if character in _SENTENCE_END:
            run_end = index
            while run_end < length and text[run_end] in _SENTENCE_END:
                run_end += 1
            dots = text.count(".", index, run_end)
            closers_end = run_end
            while closers_end < length and text[closers_end] in _CLOSERS:
                closers_end += 1
            space_end = closers_end
            while space_end < length and text[space_end].isspace():
                space_end += 1
            if space_end == length:
                if not final:
                    return None  # the next character decides
                return length
            before = text[index - 1] if index > start else " "
            is_end = (
                has_alnum
                and (before.isalnum() or before in _CLOSERS)  # espeak-ng folds ",?" or ";!" into ", ;"
                and dots < 2
                and space_end > closers_end
                and not text[space_end].islower()
                and not (text[index] == "." and _is_abbreviation(text, index))
            )
            if is_end:
                return space_end
            if dots >= 2 or closers_end > run_end or space_end > closers_end:
                has_alnum = False  # espeak-ng may start a new clause here; never cut too early
            index = closers_end
            continue
        index += 1
    if index >= limit:
        last_space = max(text.rfind(" ", start + 1, limit), text.rfind("\n", start + 1, limit))
        return last_space + 1 if last_space > start else limit
    return length if final else None


def split_sentences(text: str, max_chunk_chars: int = DEFAULT_MAX_CHUNK_CHARS) -> list[str]:
    """Sentence chunks of `text`; "".join(chunks) == text."""
    chunks: list[str] = []
    start = 0
    while start < len(text):
        end = _next_cut(text, start, final=True, max_chunk_chars=max_chunk_chars)
        assert end is not None and end > start
        chunks.append(text[start:end])
        start = end
    return chunks


class IncrementalSentenceSplitter:
    """Sentence chunks of text that arrives in pieces (tokens from a language model).

    `feed` returns the chunks that are complete, `flush` the rest at the end of the input. However
    the text is cut into pieces, the chunks are those `split_sentences` gives for the whole text.
    """

    def __init__(self, max_chunk_chars: int = DEFAULT_MAX_CHUNK_CHARS) -> None:
        self._max_chunk_chars = max_chunk_chars
        self._pending = ""

    def feed(self, text_piece: str) -> list[str]:
        """Add `text_piece`; return the chunks it completes (possibly none)."""
        self._pending += text_piece
        chunks: list[str] = []
        start = 0
        while start < len(self._pending):
            end = _next_cut(self._pending, start, final=False, max_chunk_chars=self._max_chunk_chars)
            if end is None:
                break
            chunks.append(self._pending[start:end])
            start = end
        self._pending = self._pending[start:]
        return chunks

    def flush(self) -> list[str]:
        """End of input: return the remaining chunks and start over empty."""
        chunks = split_sentences(self._pending, self._max_chunk_chars)
        self._pending = ""
        return chunks

    @property
    def pending_text(self) -> str:
        """Text received but not yet returned in a chunk."""
        return self._pending
