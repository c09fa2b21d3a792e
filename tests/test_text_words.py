"""Written words matched to the phoneme ids that speak them, on the real phonemiser."""

from __future__ import annotations

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

    def spoken_words_of(word: str) -> int:
        return sum(len(spoken_word_spans(s.phonemes, id_map)) for s in frontend.sentences(word))

    return sentence, word_spans(sentence.text, sentence.phonemes, id_map, spoken_words_of)


def test_plain_words_map_one_to_one_onto_disjoint_id_ranges(frontend: TextFrontend) -> None:
    sentence, spans = _spans(frontend, "Hello there, my old friend!")
    assert [span.text for span in spans] == ["Hello", "there", "my", "old", "friend"]
    ids = sentence.phoneme_ids
    assert all(0 < span.first_id < span.end_id <= len(ids) - 1 for span in spans)
    assert all(a.end_id <= b.first_id for a, b in zip(spans, spans[1:]))
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
