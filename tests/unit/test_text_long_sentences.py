"""A sentence longer than one model call may be is spoken as several: cut at clauses first (the same
phonemes), then before conjunctions or at spaces (each part ending as before a comma), evenly."""

from __future__ import annotations

import pytest

from libs.text.frontend import Sentence, TextFrontend
from libs.text.long_sentences import CONTINUATION, LOOKAHEAD_IDS, IdBudget, opening_span
from libs.text.sentences import CONJUNCTIONS
from libs.voice.registry import default_registry

MAX_IDS = 400
# Speech recognition output: no punctuation at all, 990 characters (about 2,100 ids).
UNPUNCTUATED = (
    "so i was thinking that we could go to the store and pick up some things for dinner tonight because "
    "the fridge is empty and i really do not want to order takeout again "
) * 6
UNPUNCTUATED = UNPUNCTUATED[: UNPUNCTUATED.rindex(" ", 0, 990)]
CLAUSES = (", ".join(["the first clause of a long list of things to say"] * 12) + ".").capitalize()
MIXED_SCRIPTS = "😀 مرحبا 你好 привет ש Hello " * 40
NO_SPACES = "你好世界" * 100


@pytest.fixture(scope="module")
def capped() -> TextFrontend:
    voice = default_registry().default
    return TextFrontend(voice.phoneme_id_map(), voice.espeak_voice, max_phoneme_ids=MAX_IDS)


@pytest.fixture(scope="module")
def whole() -> TextFrontend:
    voice = default_registry().default
    return TextFrontend(voice.phoneme_id_map(), voice.espeak_voice)


@pytest.mark.parametrize("text", [UNPUNCTUATED, CLAUSES, MIXED_SCRIPTS, NO_SPACES, "a" * 4000])
def test_every_sentence_fits_one_model_call(capped: TextFrontend, whole: TextFrontend, text: str) -> None:
    sentences = capped.sentences(text)
    assert max(len(sentence.phoneme_ids) for sentence in whole.sentences(text)) > MAX_IDS  # it needed cutting
    assert all(len(sentence.phoneme_ids) <= MAX_IDS for sentence in sentences)
    assert all(sentence.phoneme_ids[0] == 1 and sentence.phoneme_ids[-1] == 2 for sentence in sentences)  # ^ ... $ each


def test_a_sentence_with_clauses_is_cut_between_them_keeping_every_phoneme(capped: TextFrontend, whole: TextFrontend) -> None:
    (uncut,) = whole.sentences(CLAUSES)
    pieces = capped.sentences(CLAUSES)
    assert len(pieces) == 4  # 1,201 ids: the fewest pieces of at most 400
    assert [phoneme for piece in pieces for phoneme in piece.phonemes] == list(uncut.phonemes)
    assert all(piece.phonemes[-2:] == (",", " ") for piece in pieces[:-1])
    assert max(len(piece.phoneme_ids) for piece in pieces) - min(len(piece.phoneme_ids) for piece in pieces) <= 30


def test_unpunctuated_text_is_cut_before_conjunctions_into_even_parts(capped: TextFrontend) -> None:
    pieces = capped.sentences(UNPUNCTUATED)
    sizes = [len(piece.phoneme_ids) for piece in pieces]
    assert 6 <= len(pieces) <= 8, sizes  # 2,100 ids: at least 6 calls of 400
    assert min(sizes) >= MAX_IDS // 2, sizes
    # Where a conjunction is near the even split, the cut is before it (here one part has none near).
    starts = [piece.text.split()[0] for piece in pieces[1:]]
    assert sum(start in CONJUNCTIONS for start in starts) >= len(starts) - 1, starts
    # Each part but the last ends as before a comma (a breath, the voice held up), not a full stop.
    assert all(piece.phonemes[-2:] == CONTINUATION for piece in pieces[:-1])


def test_the_parts_cover_the_sentence_text(capped: TextFrontend) -> None:
    for text in (UNPUNCTUATED, CLAUSES, MIXED_SCRIPTS):
        assert " ".join(piece.text for piece in capped.sentences(text)).split() == text.split()


def test_a_long_sentence_gives_the_same_parts_alone_and_inside_a_paragraph(capped: TextFrontend) -> None:
    """Each part is cached as a sentence; it must get the same key wherever the sentence appears."""
    alone = capped.sentences(CLAUSES)
    in_paragraph = capped.sentences(f"It starts here. {CLAUSES} And it ends here.")
    assert in_paragraph[1:-1] == alone


def test_a_chunk_that_the_text_goes_on_after_ends_as_before_a_comma(capped: TextFrontend, whole: TextFrontend) -> None:
    (plain,) = whole.chunk_sentences("the answer to your question is")
    (held,) = capped.chunk_sentences("the answer to your question is", continues=True)
    assert held.phonemes == (*plain.phonemes, *CONTINUATION)
    (punctuated,) = capped.chunk_sentences("the answer, ", continues=True)
    assert punctuated.phonemes[-2:] == (",", " ") and punctuated.phonemes.count(",") == 1


def test_ordinary_sentences_are_not_touched(capped: TextFrontend, whole: TextFrontend) -> None:
    text = "The quick brown fox jumps over the lazy dog. Dr. Smith agrees, doesn't he? Yes!"
    assert capped.sentences(text) == whole.sentences(text)
    assert all(isinstance(sentence, Sentence) for sentence in capped.sentences(text))


# 279 and 153 phoneme ids: over and under twice an opening of 96 (OPENING_AFTER).
LONG_FIRST = (
    "On the morning of the third of March, long before the market opened, the old baker had already lit his "
    "ovens and swept the floor."
)
ORDINARY_FIRST = "Fields of frost slid past the window while most of the carriage slept."


def test_only_a_long_first_sentence_starts_with_its_opening(capped: TextFrontend) -> None:
    opened = capped.chunk_sentences(LONG_FIRST, first_max_ids=96)
    assert len(opened) >= 2 and opened[0].spoken_id_count <= 96
    assert opened[0].text == "On the morning of the third of March,"  # at a clause boundary
    assert " ".join(sentence.text for sentence in opened) == LONG_FIRST
    # No clause boundary, under twice the opening: a cut inside the clause would be heard, so it stays whole.
    assert [sentence.text for sentence in capped.chunk_sentences(ORDINARY_FIRST, first_max_ids=96)] == [ORDINARY_FIRST]
    assert [sentence.text for sentence in capped.chunk_sentences(LONG_FIRST)] == [LONG_FIRST]  # no opening asked


# 197 ids: over twice the opening's 96 (PART_OPENING_AFTER), with a clause boundary where the
# sentence pauses anyway; and one of 169 ids, under twice it.
CLAUSED_FIRST = "When the rain stopped, we walked down to the harbour to watch the boats come in before dark."
ORDINARY_CLAUSED_FIRST = "When the rain stopped, we walked down to the harbour to watch the boats come in."


def test_a_first_sentence_with_a_clause_starts_with_its_opening_and_goes_on_as_the_whole_sentence(
    capped: TextFrontend, whole: TextFrontend
) -> None:
    (sentence,) = whole.chunk_sentences(CLAUSED_FIRST)
    opening, rest = capped.chunk_sentences(CLAUSED_FIRST, first_max_ids=96)
    assert (opening.text, rest.text) == ("When the rain stopped,", "we walked down to the harbour to watch the boats come in before dark.")
    # The rest is the whole sentence's plan, of which it speaks the ids from the pause after the comma on.
    assert rest.phoneme_ids == sentence.phoneme_ids
    boundary = opening.spoken_ids[1]
    assert opening.spoken_ids == (0, boundary) and rest.spoken_ids == (boundary, len(sentence.phoneme_ids))
    assert opening.phonemes + rest.phonemes == sentence.phonemes
    assert opening.phonemes[-1] == "," and rest.phonemes[0] == " "
    # The opening's plan is the sentence's first ids, reading on past the comma to the end of a word.
    assert opening.phoneme_ids[:boundary] == sentence.phoneme_ids[:boundary]
    assert len(opening.phoneme_ids) - boundary >= LOOKAHEAD_IDS + 1 and len(opening.phoneme_ids) < len(sentence.phoneme_ids) // 2
    # Words are counted from each part's first spoken id, and together they are the sentence's.
    assert [word.text for word in opening.words + rest.words] == [word.text for word in sentence.words]
    assert [(word.first_id, word.end_id) for word in opening.words + rest.words] == [
        (word.first_id - (boundary if word.first_id >= boundary else 0), word.end_id - (boundary if word.first_id >= boundary else 0))
        for word in sentence.words
    ]
    assert all(word.end_id <= opening.spoken_id_count for word in opening.words)
    assert all(word.end_id <= rest.spoken_id_count for word in rest.words)


def test_a_first_sentence_too_short_for_an_opening_or_with_too_little_after_it_is_spoken_whole(capped: TextFrontend) -> None:
    for short in ("When the rain stopped, we walked home.", ORDINARY_CLAUSED_FIRST):
        assert [sentence.text for sentence in capped.chunk_sentences(short, first_max_ids=96)] == [short]
        assert capped.chunk_sentences(short, first_max_ids=96)[0].spoken_ids is None


def test_an_eager_opening_parts_a_first_sentence_from_one_and_a_half_times_the_opening(capped: TextFrontend) -> None:
    # 169 ids: spoken whole by default, and opened for a stream that starts alone (eager_opening).
    assert capped.chunk_sentences(ORDINARY_CLAUSED_FIRST, first_max_ids=96)[0].spoken_ids is None
    opening, rest = capped.chunk_sentences(ORDINARY_CLAUSED_FIRST, first_max_ids=96, eager_opening=True)
    assert (opening.text, rest.text) == ("When the rain stopped,", "we walked down to the harbour to watch the boats come in.")
    assert rest.spoken_ids == (opening.spoken_ids[1], len(rest.phoneme_ids))
    # Under one and a half times the opening, or without a clause to open with, it stays whole all the same;
    # and only the first sentence of a text that asks for an opening is ever opened.
    for whole_text in ("When the rain stopped, we walked home.", ORDINARY_FIRST):
        assert [sentence.text for sentence in capped.chunk_sentences(whole_text, first_max_ids=96, eager_opening=True)] == [whole_text]
    assert [sentence.text for sentence in capped.chunk_sentences(ORDINARY_CLAUSED_FIRST, eager_opening=True)] == [ORDINARY_CLAUSED_FIRST]


def test_opening_span_parts_at_the_space_after_the_clause_and_reads_on_a_word() -> None:
    ids = IdBudget(default_registry().default.phoneme_id_map(), 96)
    phonemes = tuple("ab, cd efgh ijk.")
    span = opening_span(phonemes, 4, ids)  # "ab, " is the head
    assert span is not None and span.phoneme_index == 3 and phonemes[span.phoneme_index] == " "
    # ^ _ a _ b _ , _: the space's ids start after 2 + 3 x 2 ids.
    assert span.id_index == 8
    assert span.opening_phonemes == tuple("ab, cd efgh ")  # 8 or more ids read on, to the end of a word
    assert opening_span(phonemes, 3, ids) is None  # the head does not end with a space
    assert opening_span(tuple("ab cd efgh ijk."), 3, ids) is None  # nor after a punctuation mark
    assert opening_span(tuple("ab, cd."), 4, ids) is None  # too little after it to read on
