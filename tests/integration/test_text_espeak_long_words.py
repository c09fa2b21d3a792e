"""espeak-ng 1.52 aborts the process on a word that stacks many suffixes; words are broken before
espeak-ng sees them, and ordinary text is left exactly as it was."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from libs.text.long_words import DEFAULT_MAX_WORD_CHARS, break_long_words

# Each is one espeak-ng word whose suffixes ("'s", "ness"; "?", U+2032 and U+2019 read as apostrophes)
# pile up past its 200-byte phoneme buffer.
CRASHING_WORDS = [
    "s'" * 100,
    "dog" + "'s" * 80,
    "good" + "ness" * 70,
    "s?" * 100,
    "s\u2032" * 100,
    "s\u2019" * 100,
]

_PHONEMIZE = "import sys; from libs.text.phonemize import phonemize_sentences; print(len(phonemize_sentences(sys.stdin.read(), max_word_chars=int(sys.argv[1]))))"


def _phonemize_in_a_process(text: str, max_word_chars: int) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _PHONEMIZE, str(max_word_chars)], input=text, capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize("word", CRASHING_WORDS[:3])
def test_the_unbroken_word_really_crashes_espeak_ng(word: str) -> None:
    """The cause, kept visible: if a newer espeak-ng fixes it, this test says so."""
    result = _phonemize_in_a_process(word, max_word_chars=5000)
    assert result.returncode != 0 and "overflow" in result.stderr


@pytest.mark.parametrize("word", CRASHING_WORDS)
def test_with_words_broken_espeak_ng_reads_it(word: str) -> None:
    result = _phonemize_in_a_process(f"Before {word} after.", DEFAULT_MAX_WORD_CHARS)
    assert result.returncode == 0, result.stderr[-300:]
    assert int(result.stdout) >= 1


def test_text_without_long_words_is_returned_unchanged() -> None:
    text = "Pneumonoultramicroscopicsilicovolcanoconiosis isn't short, but it's 45 letters. https://example.com/a/b"
    assert break_long_words(text) is text


@pytest.mark.parametrize("text", [*CRASHING_WORDS, "a" * 1000, "x" * 64 + " " + "y" * 65, "ab'" * 50 + " ok"])
def test_no_word_is_left_longer_than_the_limit_and_the_length_is_kept(text: str) -> None:
    broken = break_long_words(text)
    assert len(broken) == len(text)
    words = re.findall(r"[\w'?\u2019\u2032]+", broken)
    assert max(len(word) for word in words) <= DEFAULT_MAX_WORD_CHARS
    assert sum(a != b for a, b in zip(text, broken, strict=False)) <= len(text) // DEFAULT_MAX_WORD_CHARS + 1


def test_a_word_is_broken_at_an_apostrophe_when_one_is_near() -> None:
    text = "s'" * 100
    broken = break_long_words(text)
    replaced = [text[index] for index in range(len(text)) if broken[index] != text[index]]
    assert replaced == ["'"] * 3
    assert all(part.startswith("s") for part in broken.split(" "))
