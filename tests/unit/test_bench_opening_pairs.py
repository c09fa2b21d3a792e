"""The paired opening benchmark speaks the same sentences every run, each an opening clause, a comma and a main clause."""

from __future__ import annotations

import pytest

from bench.opening_pairs import MAINS, OPENERS, main, sentences


def test_the_sentences_are_the_same_every_run_and_all_different() -> None:
    first = sentences(len(OPENERS) * len(MAINS))
    assert first == sentences(len(OPENERS) * len(MAINS))
    assert len(set(first)) == len(first)
    assert sentences(5) == first[:5]


def test_each_sentence_is_an_opening_clause_and_a_main_clause() -> None:
    for sentence in sentences(20):
        opener, main_clause = sentence.split(", ")
        assert opener in OPENERS and main_clause in MAINS


@pytest.mark.parametrize("count", [1, len(OPENERS) * len(MAINS) + 1])
def test_a_count_out_of_range_is_refused(count: int) -> None:
    with pytest.raises(SystemExit):
        main(["--count", str(count)])
