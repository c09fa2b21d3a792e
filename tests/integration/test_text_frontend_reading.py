"""The front end reading text as a person does: written forms as words in each sentence's text and
phonemes, heteronyms, inline phonemes and lexicons, word spans over the spoken words, long
sentences still cut; and Piper's reading untouched when reading is off."""

from __future__ import annotations

from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from libs.synthesis.text_side import TextLimits, TextSide
from libs.text.frontend import TextFrontend
from libs.text.phonemize import phonemize
from libs.text.phonemizer_pool import PhonemizerPool
from libs.text.pronounce import InvalidPhonemeError
from libs.text.reading import ReadingRules
from libs.voice.registry import default_registry

READING = ReadingRules(written_forms=True, heteronyms=True)


@pytest.fixture(scope="module")
def frontend() -> TextFrontend:
    voice = default_registry().default
    return TextFrontend(voice.phoneme_id_map(), voice.espeak_voice, max_phoneme_ids=400, reading=READING)


def _phonemes(text: str) -> str:
    return "".join(phoneme for sentence in phonemize(text) for phoneme in sentence)


def test_written_forms_are_spoken_and_shown_as_words(frontend: TextFrontend) -> None:
    (sentence,) = frontend.sentences("It costs $3.50 on 12/25/2026.")
    assert sentence.text == "It costs three dollars fifty on December twenty-fifth, twenty twenty-six."
    assert "".join(sentence.phonemes) == _phonemes(sentence.text)


def test_a_written_form_and_its_spoken_words_get_the_same_ids(frontend: TextFrontend) -> None:
    """Cache keys are made of ids, so "$3.50" and "three dollars fifty" share a cache entry."""
    (written,) = frontend.sentences("It costs $3.50.")
    (spoken,) = frontend.sentences("It costs three dollars fifty.")
    assert written.phoneme_ids == spoken.phoneme_ids


def test_a_written_word_spans_the_ids_of_its_spoken_words(frontend: TextFrontend) -> None:
    (sentence,) = frontend.sentences("It costs $3.50 today, Dr. Lee.")
    assert [word.text for word in sentence.words] == ["It", "costs", "$3.50", "today", "Dr", "Lee"]
    (spoken,) = frontend.sentences("It costs three dollars fifty today, Doctor Lee.")
    three, fifty = spoken.words[2], spoken.words[4]
    assert (sentence.words[2].first_id, sentence.words[2].end_id) == (three.first_id, fifty.end_id)
    assert all(a.end_id <= b.first_id for a, b in zip(sentence.words, sentence.words[1:], strict=False))


def test_heteronyms_are_read_from_their_context(frontend: TextFrontend) -> None:
    (past,) = frontend.sentences("I read that book last summer.")
    (metal,) = frontend.sentences("The old pipes were made of lead.")
    assert "ɹˈɛd" in "".join(past.phonemes)
    assert "lˈɛd" in "".join(metal.phonemes)


def test_inline_phonemes_are_spoken_as_written(frontend: TextFrontend) -> None:
    (sentence,) = frontend.sentences("Say [[ h ə l ˈoʊ ]] to me.")
    assert "".join(sentence.phonemes) == "sˈeɪ həlˈoʊ tə mˌiː."
    assert sentence.text == "Say həlˈoʊ to me."


def test_inline_phonemes_the_voice_lacks_are_refused_before_phonemising(frontend: TextFrontend) -> None:
    with pytest.raises(InvalidPhonemeError, match="'g'"):
        frontend.chunks("Say [[ g ˈoʊ ]] now.")


def test_a_lexicon_word_gets_its_phonemes_in_every_sentence(frontend: TextFrontend) -> None:
    lexicon = {"nguyen": tuple("ŋwˈɪn")}
    sentences = frontend.chunk_sentences("Ask Nguyen. Then NGUYEN answers.", lexicon=lexicon)
    assert [sentence.text for sentence in sentences] == ["Ask Nguyen.", "Then NGUYEN answers."]
    assert all("ŋwˈɪn" in "".join(sentence.phonemes) for sentence in sentences)


def test_a_long_sentence_is_still_cut_under_the_id_limit_with_its_chosen_words(frontend: TextFrontend) -> None:
    text = "On 3/4/2025 we read [[ h ə l ˈoʊ ]] to Nguyen " + "and then again to Nguyen " * 20 + "at 9:05 p.m."
    sentences = frontend.chunk_sentences(text, lexicon={"nguyen": tuple("ŋwˈɪn")})
    assert len(sentences) > 1
    assert all(len(sentence.phoneme_ids) <= 400 for sentence in sentences)
    spoken = "".join("".join(sentence.phonemes) for sentence in sentences)
    assert spoken.count("ŋwˈɪn") == 21 and "həlˈoʊ" in spoken
    assert "zɪzi" not in spoken.replace("ˈ", "")


def test_reading_off_gives_piper_phonemes() -> None:
    voice = default_registry().default
    piper_like = TextFrontend(voice.phoneme_id_map(), voice.espeak_voice)
    (sentence,) = piper_like.sentences("It costs $3.50.")
    assert sentence.text == "It costs $3.50."
    assert [list(sentence.phonemes)] == phonemize("It costs $3.50.")



async def test_the_text_processes_read_with_the_request_lexicon_and_the_server_file(pool: PhonemizerPool, tmp_path) -> None:
    lexicon_file = tmp_path / "lexicon.tsv"
    lexicon_file.write_text("Nguyen ŋ w ˈɪ n\nkubectl kˈuːbkəntɹˌoʊl\n", encoding="utf-8")
    text_side = TextSide(ThreadPoolExecutor(1), 5000, TextLimits(lexicon_file=str(lexicon_file)), pool)
    voice = default_registry().default
    request_lexicon = {"kubectl": tuple("kjˈuːbkʌtəl")}
    sentences = [s async for s in await text_side.sentences(voice, "Nguyen runs kubectl at 9 p.m.", request_lexicon)]
    (sentence,) = sentences
    assert sentence.text == "Nguyen runs kubectl at nine p.m."
    phonemes = "".join(sentence.phonemes)
    assert "ŋwˈɪn" in phonemes and "kjˈuːbkʌtəl" in phonemes  # the request's entry wins over the file's


def test_a_word_that_sounds_like_the_placeholder_keeps_its_own_phonemes(frontend: TextFrontend) -> None:
    """"Zizi" reads as the placeholder does; the sentence is then made piece by piece."""
    (sentence,) = frontend.sentences("Zizi said [[ h ə l ˈoʊ ]] to me.")
    assert sentence.text == "Zizi said həlˈoʊ to me."
    assert "".join(sentence.phonemes) == "zˈɪzi sˈɛd həlˈoʊ tə mˌiː."


async def test_a_streamed_ssml_document_is_refused_with_what_to_do(pool: PhonemizerPool) -> None:
    from libs.wire.errors import InvalidRequestError

    text_side = TextSide(ThreadPoolExecutor(1), 5000, TextLimits(), pool)

    async def pieces() -> AsyncIterator[str]:
        yield "<speak>Hello"
        yield "</speak>"

    with pytest.raises(InvalidRequestError, match="send an SSML document whole"):
        [sentence async for sentence in text_side.incremental_sentences(default_registry().default, pieces())]


def test_words_the_voice_only_names_letter_by_letter_are_passed_over(frontend: TextFrontend) -> None:
    """espeak-ng reads an ideograph as "Chinese letter", Thai as "Thai letter e28", Arabic by
    letter names and Russian spelled; a person reading the text aloud passes them over."""
    for foreign in ("你好", "こんにちは", "สวัสดี", "مرحبا", "Привет", "καλημέρα", "ꀀꀁ"):
        (sentence,) = frontend.sentences(f"Say {foreign} to her.")
        assert "".join(sentence.phonemes) == _phonemes("Say to her."), foreign
        assert [word.text for word in sentence.words] == ["Say", "to", "her"], foreign


def test_scripts_the_voice_reads_and_lone_named_letters_are_kept(frontend: TextFrontend) -> None:
    """espeak-ng switches to Hindi and Korean and reads them as words; a lone Greek letter or the
    micro sign is read by its name, as a symbol in a formula is."""
    for kept in ("नमस्ते friend", "안녕 friend", "The angle α is 2π.", "It took 5 µs, Δt."):
        (sentence,) = frontend.sentences(kept)
        assert "".join(sentence.phonemes) == _phonemes(sentence.text), kept
    (greek,) = frontend.sentences("The angle α is small.")
    assert "ˈælfə" in "".join(greek.phonemes)


def test_piper_reading_still_names_the_letters() -> None:
    """Reading as Piper reads (reading off) keeps its phonemes, names and all."""
    voice = default_registry().default
    piper = TextFrontend(voice.phoneme_id_map(), voice.espeak_voice)
    (sentence,) = piper.sentences("Say 你好 to her.")
    assert "".join(sentence.phonemes) == _phonemes("Say 你好 to her.")


def test_a_numbered_list_is_read_item_by_item_with_its_numbers(frontend: TextFrontend) -> None:
    """"1. Mix" was a sentence "one." and a sentence "Mix", and items without full stops ran together."""
    sentences = frontend.sentences("Steps:\n1. Mix the flour\n2. Bake it\n\nThen eat.")
    assert [sentence.text.strip() for sentence in sentences] == ["Steps:\none, Mix the flour.", "two, Bake it", "Then eat."]
    assert [word.text for word in sentences[0].words] == ["Steps", "1", "Mix", "the", "flour"]
