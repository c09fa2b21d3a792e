"""Written words matched to the phoneme ids that speak them, on the real phonemiser."""

from __future__ import annotations

import itertools

import pytest

from libs.text.frontend import TextFrontend
from libs.text.words import spoken_word_spans, word_spans, written_words
from libs.voice.registry import default_registry


@pytest.fixture(scope="module")
def frontend() -> TextFrontend:
    voice = default_registry().default
    return TextFrontend(voice.phoneme_id_map(), espeak_voice=voice.espeak_voice)


def _spans(frontend: TextFrontend, text: str):  # type: ignore[no-untyped-def]
    (sentence,) = frontend.sentences(text)
    id_map = frontend.phoneme_id_map

    def phonemes_of(word: str) -> list[str]:
        return [phoneme for s in frontend.sentences(word) for phoneme in s.phonemes]

    return sentence, word_spans(sentence.text, sentence.phonemes, id_map, phonemes_of)


def test_plain_words_map_one_to_one_onto_disjoint_id_ranges(frontend: TextFrontend) -> None:
    sentence, spans = _spans(frontend, "Hello there, my old friend!")
    assert [span.text for span in spans] == ["Hello", "there", "my", "old", "friend"]
    ids = sentence.phoneme_ids
    assert all(0 < span.first_id < span.end_id <= len(ids) - 1 for span in spans)
    assert all(a.end_id <= b.first_id for a, b in itertools.pairwise(spans))
    # No word starts on a pad or on the word break between words.
    space = frontend.phoneme_id_map[" "][0]
    assert all(ids[span.first_id] not in (0, space) for span in spans)


def test_a_number_read_as_several_words_keeps_the_words_after_it_in_place(frontend: TextFrontend) -> None:
    sentence, spans = _spans(frontend, "I have 23 apples today.")
    assert [span.text for span in spans] == ["I", "have", "23", "apples", "today"]
    spoken = spoken_word_spans(sentence.phonemes, frontend.phoneme_id_map)
    assert len(spoken) == 6  # "twenty three" is two spoken words
    twenty_three = spans[2]
    assert (twenty_three.first_id, twenty_three.end_id) == (spoken[2][0], spoken[3][1])
    assert (spans[3].first_id, spans[3].end_id) == spoken[4]


def test_written_words_drop_the_punctuation_around_them() -> None:
    assert written_words('"Well," she said — "it\'s fine..."') == ["Well", "she", "said", "it's", "fine"]


def test_words_espeak_ng_runs_together_share_its_word_and_the_rest_stay_in_place(frontend: TextFrontend) -> None:
    sentence, spans = _spans(frontend, "The old lighthouse on the point has not guided a ship in forty years.")
    spoken = spoken_word_spans(sentence.phonemes, frontend.phoneme_id_map)
    assert len(spoken) < len(spans) == 14  # "on the" and "has not" are each said as one word
    by_word = {span.text: (span.first_id, span.end_id) for span in spans}
    # The two words said as one split it, in order, with no gap and no overlap.
    merged = next(ids for ids in spoken if ids[0] == by_word["on"][0])
    assert by_word["on"][0] == merged[0] and by_word["on"][1] == by_word["the"][0] and by_word["the"][1] == merged[1]
    # Every word after a merge keeps its own spoken word.
    assert by_word["point"] == spoken[-8]  # between the two merged pairs
    for word, ids in zip(["guided", "a", "ship", "in", "forty", "years"], spoken[-6:], strict=False):
        assert by_word[word] == ids, word
