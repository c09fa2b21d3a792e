"""What a listener heard of a streamed text, and when each character of it is spoken.

A voice agent that is interrupted needs to cut its own transcript where the listener stopped
hearing. The client says how much of a stream's audio it played; the words heard are those whose
audio ended by then (their end, in milliseconds as the client was told, at most that), and the text
heard is the text the client sent, up to the end of the last of them (with the punctuation that
clings to it), so it can be cut from the agent's own copy as it is.

Words come from the model's own durations (libs.synthesis.output.word_times) as written in the
request, so each is found in the text sent by looking for it after the previous one. Characters get
times for callers that want them per character (ElevenLabs' `alignment`): a word's characters share
its time evenly, and the spaces and punctuation between words take the gap between them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from libs.synthesis.output import WordTime

MS_DECIMALS: Final = 3
"""Milliseconds are sent with this many decimals (a microsecond); a word heard is compared as sent."""


def ms(seconds: float) -> float:
    """`seconds` in milliseconds, as every time is sent to socket clients."""
    return round(seconds * 1000, MS_DECIMALS)


@dataclass(frozen=True)
class Heard:
    """What the listener heard of a stream."""

    played_ms: float
    """How much of the stream's audio counts as played (what the client said, at most what was sent)."""
    text: str
    """The text sent, up to the end of the last word heard (empty when none was)."""
    words: tuple[WordTime, ...]
    """The words heard, in order."""


@dataclass(frozen=True)
class CharTimes:
    """Each character of a piece of the text sent and when it is spoken, in milliseconds."""

    chars: tuple[str, ...]
    start_ms: tuple[float, ...]
    duration_ms: tuple[float, ...]


class Transcript:
    """The text one stream was sent and its words as they are spoken."""

    def __init__(self) -> None:
        self._pieces: list[str] = []
        self._text = ""
        self._words: list[WordTime] = []
        self._spans: list[tuple[int, int] | None] = []  # each word's [start, end) in the text, None where not found
        self._cursor = 0  # where the next word is looked for
        self._aligned_to = 0  # characters already given times (`char_times`)
        self.sent_chars = 0

    def add_text(self, piece: str) -> None:
        """More text the client sent."""
        self._pieces.append(piece)
        self.sent_chars += len(piece)

    def add_words(self, words: Sequence[WordTime]) -> None:
        """A sentence's words, as they will be spoken (in order, after the earlier ones)."""
        text = self.text
        for word in words:
            found = text.find(word.text, self._cursor)
            if found < 0:
                self._spans.append(None)
            else:
                self._cursor = found + len(word.text)
                self._spans.append((found, self._cursor))
            self._words.append(word)

    @property
    def text(self) -> str:
        """Everything the client sent, joined."""
        if self._pieces:
            self._text += "".join(self._pieces)
            self._pieces.clear()
        return self._text

    def heard(self, played_ms: float) -> Heard:
        """What a listener who played `played_ms` of the audio heard."""
        count = 0
        while count < len(self._words) and ms(self._words[count].end_s) <= played_ms:
            count += 1
        words = tuple(self._words[:count])
        if not count:
            return Heard(played_ms, "", ())
        span = self._spans[count - 1]
        if span is None or any(self._spans[index] is None for index in range(count)):
            return Heard(played_ms, " ".join(word.text for word in words), words)  # not found as sent: the words themselves
        text = self.text
        end = span[1]
        while end < len(text) and not text[end].isspace() and not text[end].isalnum():
            end += 1  # the punctuation that clings to the word ("world." and "well,")
        return Heard(played_ms, text[:end], words)

    def char_times(self, words: Sequence[WordTime]) -> CharTimes:
        """Times for the characters of the text sent from where the last call ended to the end of
        the last of `words` (with the punctuation and spaces after it). `words` must be the ones
        `add_words` was just given."""
        text = self.text
        first = len(self._words) - len(words)
        spans = self._spans[first:]
        located = [(span, word) for span, word in zip(spans, words, strict=True) if span is not None]
        if not located:
            return CharTimes((), (), ())
        start = self._aligned_to
        end = located[-1][0][1]
        while end < len(text) and (text[end].isspace() or not text[end].isalnum()):
            end += 1
        chars: list[str] = []
        starts: list[float] = []
        durations: list[float] = []
        position = start
        previous_end_ms = ms(located[0][1].start_s)
        for (word_start, word_end), word in located:
            gap_ms = max(0.0, ms(word.start_s) - previous_end_ms)
            for index in range(position, max(position, word_start)):  # between words: the gap, on the first of them
                chars.append(text[index])
                starts.append(previous_end_ms)
                durations.append(gap_ms if index == position else 0.0)
            length = word_end - word_start
            step_ms = (ms(word.end_s) - ms(word.start_s)) / max(1, length)
            for offset in range(length):
                chars.append(text[word_start + offset])
                starts.append(round(ms(word.start_s) + offset * step_ms, MS_DECIMALS))
                durations.append(round(step_ms, MS_DECIMALS))
            position = max(position, word_end)
            previous_end_ms = ms(word.end_s)
        for index in range(position, end):
            chars.append(text[index])
            starts.append(previous_end_ms)
            durations.append(0.0)
        self._aligned_to = end
        return CharTimes(tuple(chars), tuple(starts), tuple(durations))
