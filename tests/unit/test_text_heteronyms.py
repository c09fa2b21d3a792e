"""Heteronyms read from their context (libs.text.heteronyms), and the tagged sets the benchmark scores."""

from __future__ import annotations

import pytest

from bench.text_front_end import (
    HETERONYMS,
    HETERONYMS_HELD_OUT,
    heteronym_accuracy,
    load_heteronym_cases,
    our_front_end,
    piper_front_end,
)
from libs.text.heteronyms import HETERONYMS as KNOWN_HETERONYMS
from libs.text.heteronyms import heteronym_readings, readings


@pytest.mark.parametrize(
    ("sentence", "word", "reading"),
    [
        ("I read that book last summer.", "read", "past"),
        ("I will read it tonight.", "read", "present"),
        ("The old pipes were made of lead.", "lead", "metal"),
        ("I object to that proposal.", "object", "verb"),
        ("The object fell.", "object", "noun"),
        ("Please record your name.", "record", "verb"),
        ("The differences were so minute that nobody noticed.", "minute", "tiny"),
        ("He wore a bow tie.", "bow", "ribbon"),
        ("She dove into the lake.", "dove", "dived"),
        ("The shops close at six.", "close", "verb"),
    ],
)
def test_context_chooses_the_reading(sentence: str, word: str, reading: str) -> None:
    found = [item for item in heteronym_readings(sentence) if item.word.lower() == word]
    assert [item.reading for item in found] == [reading]
    assert sentence[found[0].start : found[0].end].lower() == word


def test_without_a_cue_the_word_is_left_to_espeak() -> None:
    assert list(heteronym_readings("Record.")) == []


def test_at_least_fifty_heteronyms_have_two_readings() -> None:
    assert len(KNOWN_HETERONYMS) >= 50
    assert all(len(set(readings(word).values())) == 2 for word in KNOWN_HETERONYMS)


def test_tagged_sets_are_large_enough_and_name_known_readings() -> None:
    cases = load_heteronym_cases(HETERONYMS) + load_heteronym_cases(HETERONYMS_HELD_OUT)
    assert len(cases) >= 200
    assert len({case.word.lower() for case in cases}) >= 50
    for case in cases:
        assert case.reading in readings(case.word), case
        assert case.word.lower() in case.sentence.lower()


def test_our_front_end_reads_the_held_out_set_better_than_espeak() -> None:
    cases = load_heteronym_cases(HETERONYMS_HELD_OUT)
    ours, _ = heteronym_accuracy(cases, our_front_end())
    theirs, _ = heteronym_accuracy(cases, piper_front_end())
    assert ours >= 0.9 * len(cases)
    assert ours > theirs
