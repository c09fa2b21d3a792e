"""The sentence splitter costs time linear in the text however it arrives, never holds more than its
limit, and cuts a long stretch at its best break."""

from __future__ import annotations

import sys
from collections.abc import Callable

from libs.text.sentences import IncrementalSentenceSplitter, best_break, split_sentences


def _lines_run(work: Callable[[], object]) -> int:
    """Python lines executed by `work`: a measure of its cost that does not depend on the machine."""
    count = 0

    def trace(frame, event, arg):  # type: ignore[no-untyped-def]
        nonlocal count
        if event == "line":
            count += 1
        return trace

    sys.settrace(trace)
    try:
        work()
    finally:
        sys.settrace(None)
    return count


def _feed_all(pieces: list[str], max_chunk_chars: int = 1000) -> list[str]:
    splitter = IncrementalSentenceSplitter(max_chunk_chars)
    chunks = [chunk for piece in pieces for chunk in splitter.feed(piece)]
    return chunks + splitter.flush()


def test_pieces_of_spaces_cost_linear_time() -> None:
    """400 pieces of 5,000 spaces used to be read again, all of them, on every piece."""
    small = _lines_run(lambda: _feed_all([" " * 500] * 40 + ["a B"]))
    large = _lines_run(lambda: _feed_all([" " * 500] * 80 + ["a B"]))
    assert large < 2.3 * small, (small, large)


def test_a_sentence_end_sent_character_by_character_costs_linear_time() -> None:
    small = _lines_run(lambda: _feed_all(["Hello"] + ["!"] * 300 + [" There"]))
    large = _lines_run(lambda: _feed_all(["Hello"] + ["!"] * 600 + [" There"]))
    assert large < 2.3 * small, (small, large)


def test_words_sent_one_by_one_are_read_about_once() -> None:
    """A text without a sentence end, a word per piece: each piece is scanned, not the text held."""
    pieces = [word + " " for word in ["and", "so", "it", "goes", "on", "without", "any", "end", "in", "sight"]] * 80
    characters = sum(len(piece) for piece in pieces)
    assert _lines_run(lambda: _feed_all(pieces)) < 40 * characters  # it was ~850 lines per character


def test_the_splitter_never_holds_more_than_its_limit() -> None:
    splitter = IncrementalSentenceSplitter(max_chunk_chars=100)
    for piece in [" " * 5000, "word " * 400, '"' * 3000, "!" * 3000, "x" * 3000]:
        chunks = splitter.feed(piece)
        assert len(splitter.pending_text) <= 100
        assert all(len(chunk) <= 100 for chunk in chunks)


def test_spaces_then_a_sentence_give_only_the_sentence_with_words() -> None:
    chunks = _feed_all([" " * 5000] * 40 + ["a B"])
    assert [chunk.strip() for chunk in chunks if chunk.strip()] == ["a B"]


def test_a_long_stretch_is_cut_after_clause_punctuation_then_before_a_conjunction_then_at_a_space() -> None:
    text = "one two three, four five six seven eight nine and ten eleven"
    assert best_break(text, 0, len(text)) == text.index("four")
    without_comma = text.replace(",", "")
    assert best_break(without_comma, 0, len(without_comma)) == without_comma.index("and")
    plain = "one two three four five"
    assert best_break(plain, 0, len(plain)) == plain.index("five")
    assert best_break("x" * 50, 0, 50) is None


def test_a_break_never_depends_on_text_past_the_stretch() -> None:
    # "and" at the very end may go on ("android"): it is not a conjunction until a non-letter follows.
    assert best_break("we went to the shop and", 0, 23) == len("we went to the shop ")
    assert best_break("we went to the shop android", 0, 23) == len("we went to the shop ")
    assert best_break("Dr. Smith came home late", 0, 24) != len("Dr. ")  # an abbreviation is no clause end


def test_held_text_is_spoken_up_to_its_best_break_and_never_inside_a_word() -> None:
    splitter = IncrementalSentenceSplitter()
    assert splitter.feed("The answer to your question is forty") == []
    assert splitter.cut_pending() == "The answer to your question is "
    assert splitter.pending_text == "forty"
    assert splitter.cut_pending() is None  # one word so far: it may go on
    assert splitter.feed("-two. Next") == ["forty-two. "]


def test_a_run_without_sentence_end_is_cut_at_the_limit_on_its_best_break() -> None:
    text = "alpha beta gamma, delta epsilon zeta eta theta because iota kappa lambda mu nu xi omicron pi rho"
    chunks = split_sentences(text, max_chunk_chars=60)
    assert chunks[0] == "alpha beta gamma, delta epsilon zeta eta theta "
    assert "".join(chunks) == text
