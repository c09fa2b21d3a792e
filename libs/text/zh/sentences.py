"""Chinese text cut into sentence chunks.

Chinese puts no space after a full stop, so the English splitter (libs.text.sentences), which waits
for whitespace, does not apply. A sentence ends after a run of 。！？ (or ASCII ! ?, or a "." that
is not inside a number), with the closing quotes and brackets after it; a blank line ends one too.
A chunk is an exact slice of the text and keeps the whitespace after its sentence, so the chunks
joined give the text back. A sentence longer than `max_chunk_chars` is cut after its last clause
mark (，、；：) before the limit, else at the limit.
"""

from __future__ import annotations

import re
from typing import Final

SENTENCE_END: Final = re.compile(
    r"(?:[。！？!?]+|(?<!\d)\.(?!\d)|…{1,2}|\.{3,6})[\"'”’」』）)\]】》]*\s*|\n\s*\n\s*"
)
CLAUSE_MARKS: Final = re.compile(r"[，、；：,;:][\"'”’」』）)\]】》]*\s*")


def split_zh_sentences(text: str, max_chunk_chars: int) -> list[str]:
    """`text` cut after each sentence end and at most every `max_chunk_chars` characters."""
    chunks: list[str] = []
    start = 0
    for match in SENTENCE_END.finditer(text):
        if match.end() <= start or match.end() == match.start():
            continue
        chunks.extend(_bounded(text[start : match.end()], max_chunk_chars))
        start = match.end()
    if start < len(text):
        chunks.extend(_bounded(text[start:], max_chunk_chars))
    return [chunk for chunk in chunks if chunk]


def _bounded(chunk: str, max_chunk_chars: int) -> list[str]:
    pieces: list[str] = []
    while len(chunk) > max_chunk_chars:
        cut = 0
        for match in CLAUSE_MARKS.finditer(chunk, 0, max_chunk_chars):
            cut = match.end()
        if cut <= 0:
            cut = max_chunk_chars
        pieces.append(chunk[:cut])
        chunk = chunk[cut:]
    pieces.append(chunk)
    return pieces
