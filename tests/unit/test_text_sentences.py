"""Sentence chunking, whole and incremental, and the per-sentence stability the mel cache relies on."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from libs.text.frontend import TextFrontend
from libs.text.phoneme_ids import default_voice_config_path
from libs.text.sentences import IncrementalSentenceSplitter, split_sentences

PARAGRAPH = (
    'Dr. Smith said "hello." Then he left at 3.14 p.m. on Jan. 5th! Was it e.g. a joke?! '
    "J. R. R. Tolkien wrote 1,234.5 pages... or so. Really?\n\n"
    "New paragraph without a stop\n\nLast one (in brackets.) The end."
)


def split_incrementally(pieces: list[str]) -> list[str]:
    splitter = IncrementalSentenceSplitter()
    chunks: list[str] = []
    for piece in pieces:
        chunks.extend(splitter.feed(piece))
    chunks.extend(splitter.flush())
    return chunks


def test_paragraph_splits_at_sentence_ends_only():
    assert split_sentences(PARAGRAPH) == [
        'Dr. Smith said "hello." ',
        "Then he left at 3.14 p.m. on Jan. 5th! ",
        "Was it e.g. a joke?! ",
        "J. R. R. Tolkien wrote 1,234.5 pages... or so. ",
        "Really?\n\n",
        "New paragraph without a stop\n\n",
        "Last one (in brackets.) ",
        "The end.",
    ]


@pytest.mark.parametrize(
    "text",
    [
        "Dr. Smith is here.",
        "See e.g. the report.",
        "Pi is 3.14 today.",
        "Version 1.2.3 is out.",
        "J. R. R. Tolkien wrote it.",
        "It cost $1,000.50 in total.",
        "He lives in the U.S. now.",
        'She said "hi!" and left.',
        "Wait... what is it?",
        "Hello\nworld, on two lines.",
    ],
)
def test_no_cut_inside_abbreviations_numbers_initials_or_ellipses(text):
    assert split_sentences(text) == [text]


@pytest.mark.parametrize(
    ("text", "chunks"),
    [
        ("Really?! Yes.", ["Really?! ", "Yes."]),
        ("Stop!!! Now.", ["Stop!!! ", "Now."]),
        ('He said "Go." Then left.', ['He said "Go." ', "Then left."]),
        ("(An aside.) Then more.", ["(An aside.) ", "Then more."]),
        ("In 2019. 2020 was next.", ["In 2019. ", "2020 was next."]),
        ("One\n\nTwo", ["One\n\n", "Two"]),
        ("One.\n\n\nTwo.", ["One.\n\n\n", "Two."]),
    ],
)
def test_cuts_after_terminators_quotes_and_paragraphs(text, chunks):
    assert split_sentences(text) == chunks


def test_chunks_join_back_to_the_text():
    assert "".join(split_sentences(PARAGRAPH)) == PARAGRAPH


def test_long_run_without_sentence_end_is_cut_at_a_space_before_the_limit():
    text = "word " * 300  # 1,500 characters, no sentence end
    chunks = split_sentences(text, max_chunk_chars=100)
    assert "".join(chunks) == text
    assert all(len(chunk) <= 100 for chunk in chunks)
    assert all(chunk.endswith(" ") for chunk in chunks)
    assert split_incrementally([text[i : i + 7] for i in range(0, len(text), 7)]) == split_sentences(text)


def test_long_word_is_cut_at_the_limit():
    assert split_sentences("x" * 250, max_chunk_chars=100) == ["x" * 100, "x" * 100, "x" * 50]


def test_incremental_returns_sentences_as_soon_as_the_next_one_starts():
    splitter = IncrementalSentenceSplitter()
    assert splitter.feed("Hello there") == []
    assert splitter.feed(". How") == ["Hello there. "]
    assert splitter.feed(" are you? I'm") == ["How are you? "]
    assert splitter.pending_text == "I'm"
    assert splitter.flush() == ["I'm"]
    assert splitter.flush() == []


def test_incremental_waits_when_the_next_character_decides():
    splitter = IncrementalSentenceSplitter()
    assert splitter.feed("See Dr. Smith. Then e.g. ") == ["See Dr. Smith. "]
    assert splitter.feed("this.") == []
    assert splitter.flush() == ["Then e.g. this."]


def test_incremental_token_by_token_equals_whole_text():
    tokens = PARAGRAPH.replace(" ", " \x00").split("\x00")  # word-sized tokens, like a language model's
    assert split_incrementally(tokens) == split_sentences(PARAGRAPH)
    assert split_incrementally(list(PARAGRAPH)) == split_sentences(PARAGRAPH)


@settings(max_examples=300, deadline=None)
@given(cuts=st.lists(st.integers(min_value=0, max_value=len(PARAGRAPH)), max_size=40))
def test_incremental_equals_whole_for_every_way_of_cutting_the_paragraph(cuts):
    bounds = [0, *sorted(cuts), len(PARAGRAPH)]
    pieces = [PARAGRAPH[start:end] for start, end in itertools.pairwise(bounds)]
    assert split_incrementally(pieces) == split_sentences(PARAGRAPH)


_ALPHABET = st.sampled_from([*list("ab Z3.,!?\"')\n"), "Dr.", "e.g.", "...", "3.14", "\n\n", " J. ", "?!"])


@settings(max_examples=300, deadline=None)
@given(parts=st.lists(_ALPHABET, max_size=40), cuts=st.lists(st.integers(min_value=0, max_value=200), max_size=20))
def test_incremental_equals_whole_for_any_text_and_any_cuts(parts, cuts):
    text = "".join(parts)
    bounds = [0, *sorted(min(cut, len(text)) for cut in cuts), len(text)]
    pieces = [text[start:end] for start, end in itertools.pairwise(bounds)]
    whole = split_sentences(text, max_chunk_chars=40)
    assert "".join(whole) == text
    splitter = IncrementalSentenceSplitter(max_chunk_chars=40)
    chunks = [chunk for piece in pieces for chunk in splitter.feed(piece)] + splitter.flush()
    assert chunks == whole


@pytest.fixture(scope="module")
def frontend() -> TextFrontend:
    return TextFrontend.from_voice_config(default_voice_config_path())


def test_a_sentence_gets_the_same_ids_alone_and_inside_a_paragraph(frontend):
    """The gateway caches mel per sentence; a sentence must give the same key wherever it appears."""
    paragraph = (
        "The weather is nice today. Dr. Smith agrees, doesn't he? Call me at 3:30 p.m. tomorrow! "
        '"Quoted," she said. It costs $4.50. Numbers like 1,234.5 stay whole. Really?! Yes.'
    )
    in_context = frontend.sentences(paragraph)
    assert len(in_context) >= 8
    for sentence in in_context:
        alone = frontend.sentences(sentence.text)
        assert [s.phoneme_ids for s in alone] == [sentence.phoneme_ids], sentence.text


def test_streamed_chunks_give_the_same_sentences_as_the_whole_text(frontend):
    tokens = PARAGRAPH.replace(" ", " \x00").split("\x00")
    streamed = [sentence for chunk in split_incrementally(tokens) for sentence in frontend.sentences(chunk)]
    assert streamed == frontend.sentences(PARAGRAPH)


def test_a_list_number_at_the_start_of_a_line_is_not_a_sentence_end_whatever_the_pieces() -> None:
    """"1. Mix" is read "one, Mix": no cut after a line's list number, in the whole text or in any
    pieces of it; after a sentence on the same line "3." is an ordinary sentence end."""
    text = "Steps:\n1. Mix it.\n2. Bake it. 3. Eat it.\n\n4. Rest.\n"
    whole = split_sentences(text)
    assert whole == ["Steps:\n1. Mix it.\n", "2. Bake it. ", "3. ", "Eat it.\n\n", "4. Rest.\n"]
    for cut in range(1, len(text)):
        splitter = IncrementalSentenceSplitter()
        pieces = splitter.feed(text[:cut]) + splitter.feed(text[cut:]) + splitter.flush()
        assert pieces == whole, cut
