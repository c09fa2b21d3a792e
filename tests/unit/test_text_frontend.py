"""The gateway's entry point: sentences, phoneme ids, errors that say what to fix, and robustness."""

from __future__ import annotations

import json
import logging
from dataclasses import FrozenInstanceError

import pytest

from libs.text.errors import TextError
from libs.text.frontend import (
    DEFAULT_MAX_TEXT_CHARS,
    EmptyTextError,
    InvalidTextError,
    Sentence,
    TextFrontend,
    TextTooLongError,
    decode_utf8,
)
from libs.text.phoneme_ids import (
    default_voice_config_path,
    load_espeak_voice,
    load_phoneme_id_map,
    missing_phonemes,
    phonemes_to_ids,
)
from libs.text.phonemize import phonemize


@pytest.fixture(scope="module")
def phoneme_id_map():
    return load_phoneme_id_map(default_voice_config_path())


@pytest.fixture(scope="module")
def frontend(phoneme_id_map) -> TextFrontend:
    return TextFrontend(phoneme_id_map, "en-us")


def test_default_voice_config_gives_its_map_and_espeak_voice(phoneme_id_map):
    assert load_espeak_voice(default_voice_config_path()) == "en-us"
    assert phoneme_id_map["_"] == (0,) and phoneme_id_map["^"] == (1,) and phoneme_id_map["$"] == (2,)
    assert phoneme_id_map[" "] == (3,)
    assert len(phoneme_id_map) == 151


def test_ids_are_bos_pad_then_each_phoneme_and_pad_then_eos(phoneme_id_map):
    ids = phonemes_to_ids(["h", "ə", "l", "ˈ", "o", "ʊ", "."], phoneme_id_map)
    assert ids == [1, 0, 20, 0, 59, 0, 24, 0, 120, 0, 27, 0, 100, 0, 10, 0, 2]


def test_unknown_phonemes_are_skipped_and_logged_as_piper_does(phoneme_id_map, caplog):
    with caplog.at_level(logging.WARNING, logger="libs.text.phoneme_ids"):
        ids = phonemes_to_ids(["a", "Ж", "b", "Ж"], phoneme_id_map)
    assert ids == [1, 0, 14, 0, 15, 0, 2]
    assert "Missing phoneme from id map: Ж" in caplog.text
    assert missing_phonemes(["a", "Ж", "b", "Ж", "☃"], phoneme_id_map) == ["Ж", "☃"]


def test_map_without_required_symbols_is_rejected(tmp_path):
    config = tmp_path / "voice.onnx.json"
    config.write_text(json.dumps({"phoneme_id_map": {"a": [5]}, "espeak": {"voice": "en-us"}}))
    with pytest.raises(ValueError, match="lacks the required symbol"):
        load_phoneme_id_map(config)


def test_sentences_carry_text_phonemes_and_ids(frontend, phoneme_id_map):
    sentences = frontend.sentences("Hello, world. How are you?")
    assert [sentence.text for sentence in sentences] == ["Hello, world.", "How are you?"]
    assert "".join(sentences[0].phonemes) == "həlˈoʊ, wˈɜːld."
    assert "".join(sentences[1].phonemes) == "hˈaʊ ɑːɹ juː?"
    for sentence in sentences:
        assert sentence.phoneme_ids == tuple(phonemes_to_ids(sentence.phonemes, phoneme_id_map))
    with pytest.raises(FrozenInstanceError):
        sentences[0].text = "changed"  # type: ignore[misc]


def test_sentence_text_keeps_its_closing_quote(frontend):
    sentences = frontend.sentences('He said "hi." Then he left. "Go!" she said.')
    assert [sentence.text for sentence in sentences] == ['He said "hi."', "Then he left.", '"Go!"', "she said."]


def test_typographic_text_gives_the_phonemes_of_its_plain_form(frontend):
    assert frontend.sentences("I don’t know… “really”") == frontend.sentences('I don\'t know... "really"')


@pytest.mark.parametrize("text", ["", "   \n\t ", "?! ... ,", "\u200b\u200b"])
def test_text_with_nothing_to_say_raises_empty_text_error(frontend, text):
    with pytest.raises(EmptyTextError, match="send at least one word"):
        frontend.sentences(text)


def test_too_long_text_raises_with_the_limit(phoneme_id_map):
    frontend = TextFrontend(phoneme_id_map, max_text_chars=100)
    frontend.sentences("a" * 50 + ".")
    with pytest.raises(TextTooLongError, match="the limit is 100 characters per request") as error:
        frontend.sentences("word " * 30)
    assert error.value.max_chars == 100


def test_default_limit_is_five_thousand_characters(frontend):
    assert DEFAULT_MAX_TEXT_CHARS == 5_000
    sentence = "Each one of these sentences has 51 characters, ok. "
    assert len(sentence) == 51
    with pytest.raises(TextTooLongError, match="5001 characters long; the limit is 5000"):
        frontend.sentences(sentence * 98 + "x" * 3)
    assert len(frontend.sentences(sentence * 98)) == 98  # 4,998 characters


def test_errors_are_value_errors_the_gateway_can_catch_in_one_place():
    for error_type in (EmptyTextError, TextTooLongError, InvalidTextError):
        assert issubclass(error_type, TextError) and issubclass(error_type, ValueError)


def test_decode_utf8_from_the_frontend_module():
    assert decode_utf8(b"ok") == "ok"
    with pytest.raises(InvalidTextError, match="byte offset 2"):
        decode_utf8(b"ok\x80")


def test_very_long_text_phonemises_completely(frontend):
    sentence = "The quick brown fox jumps over the lazy dog. "
    sentences = frontend.sentences(sentence * 100)  # 4,500 characters
    assert len(sentences) == 100
    assert all(s.phonemes == sentences[0].phonemes for s in sentences)


def test_one_huge_word_does_not_hang_or_crash(frontend):
    sentences = frontend.sentences("a" * 4_000)
    assert sentences and all(isinstance(s, Sentence) for s in sentences)


@pytest.mark.parametrize(
    "text",
    [
        "\x00\x01\x02 hello",
        "\udcff lone surrogate ok",
        "混合 text 日本語 and العربية",
        "🎉🎉🎉 party",
        "a\u0301\u0302\u0303\u0304 stacked marks",
        "<speak>not ssml</speak> &amp; [[ not phonemes ]]",
        "\u202e reversed \u202c",
    ],
)
def test_odd_unicode_gives_sentences_without_errors(frontend, text):
    sentences = frontend.sentences(text)
    assert sentences and all(s.phoneme_ids[0] == 1 and s.phoneme_ids[-1] == 2 for s in sentences)


def test_phonemize_accepts_raw_nul_and_surrogates():
    assert phonemize("ok\x00ok") == phonemize("ok ok")
    assert phonemize("\ud800") == phonemize(" ")
