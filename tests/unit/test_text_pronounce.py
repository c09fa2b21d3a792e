"""Pronunciation control: inline phonemes, lexicons and the voice's inventory (libs.text.pronounce,
libs.text.lexicon)."""

from __future__ import annotations

import logging
import os

import pytest

from libs.text.errors import TextError
from libs.text.lexicon import LexiconFile, parse_lexicon_file_text
from libs.text.phoneme_ids import default_voice_config_path, load_phoneme_id_map
from libs.text.pronounce import (
    MAX_INLINE_BLOCK_CHARS,
    PLACEHOLDER,
    InvalidLexiconError,
    InvalidPhonemeError,
    Override,
    check_inline_phonemes,
    parse_lexicon_entries,
    plan_pronunciations,
    restore_text,
    substitute_phonemes,
)


@pytest.fixture(scope="module")
def inventory() -> dict[str, tuple[int, ...]]:
    return load_phoneme_id_map(default_voice_config_path())


def test_inline_block_and_lexicon_word_become_placeholders_in_order() -> None:
    plan = plan_pronunciations("Say [[ h ə l ˈoʊ ]] to Nguyen.", {"nguyen": tuple("ŋwˈɪn")})
    assert plan.text == f"Say {PLACEHOLDER} to {PLACEHOLDER}."
    assert [override.phonemes for override in plan.overrides] == [tuple("həlˈoʊ"), tuple("ŋwˈɪn")]


def test_lexicon_matches_whole_words_in_any_case_only() -> None:
    plan = plan_pronunciations("NGUYEN and Nguyenville and nguyen's", {"nguyen": tuple("ŋwˈɪn")})
    assert plan.text == f"{PLACEHOLDER} and Nguyenville and nguyen's"


def test_a_chosen_span_inside_an_inline_block_is_ignored() -> None:
    text = "I [[ ɹ ˈɛ d ]] it."
    plan = plan_pronunciations(text, {}, [(text.index("["), text.index("]") + 2, tuple("x"))])
    assert [override.phonemes for override in plan.overrides] == [tuple("ɹˈɛd")]


def test_placeholder_phonemes_are_swapped_in_order_and_stress_variants_match() -> None:
    phonemes = list("ðə zˈɪziʲ ɪz zɪzi.")
    overrides = [Override("a", tuple("ˈeɪ")), Override("b", tuple("bˈiː"))]
    assert "".join(substitute_phonemes(phonemes, overrides)) == "ðə ˈeɪ ɪz bˈiː."


def test_a_placeholder_espeak_did_not_read_as_one_word_is_an_error() -> None:
    with pytest.raises(ValueError):
        substitute_phonemes(list("zˈɪzilˈaɪk"), [Override("x", tuple("ˈeɪ"))])


def test_restore_gives_back_the_written_words() -> None:
    overrides = [Override("Nguyen", tuple("ŋwˈɪn"))]
    assert restore_text(f"Ask {PLACEHOLDER} today.", overrides) == "Ask Nguyen today."


def test_inline_phonemes_outside_the_inventory_name_the_symbol(inventory) -> None:
    check_inline_phonemes("Say [[ h ə l ˈoʊ ]].", inventory)
    with pytest.raises(InvalidPhonemeError) as raised:
        check_inline_phonemes("Say [[ h ə l ˈoʊ ]] and [[ g ˈoʊ ]].", inventory)  # ASCII g, not IPA ɡ
    assert "'g'" in str(raised.value) and "U+0067" in str(raised.value)
    assert "[[ g ˈoʊ ]]" in str(raised.value)
    with pytest.raises(InvalidPhonemeError):
        check_inline_phonemes("An empty [[ ]] block.", inventory)


def test_an_inline_block_longer_than_a_word_is_refused_not_read_as_text(inventory) -> None:
    word = "h ə l ˈoʊ "
    check_inline_phonemes("[[ " + word * (MAX_INLINE_BLOCK_CHARS // len(word) - 1) + "]]", inventory)
    with pytest.raises(TextError, match=f"at most {MAX_INLINE_BLOCK_CHARS} characters"):
        check_inline_phonemes("Say [[ " + word * (MAX_INLINE_BLOCK_CHARS // len(word) + 1) + "]].", inventory)


def test_lexicon_entries_are_checked(inventory) -> None:
    assert parse_lexicon_entries({"Nguyen": "ŋ w ˈɪ n"}, inventory, "lexicon") == {"nguyen": tuple("ŋwˈɪn")}
    with pytest.raises(InvalidPhonemeError) as raised:
        parse_lexicon_entries({"bird": "bˈɝd"}, inventory, "lexicon")
    assert "'ɝ'" in str(raised.value) and "bird" in str(raised.value)
    with pytest.raises(InvalidLexiconError):
        parse_lexicon_entries({"two words": "tˈuː"}, inventory, "lexicon")
    with pytest.raises(InvalidLexiconError):
        parse_lexicon_entries({"word": ""}, inventory, "lexicon")


def test_lexicon_file_names_the_bad_line(inventory) -> None:
    with pytest.raises(InvalidLexiconError) as raised:
        parse_lexicon_file_text("# names\nNguyen ŋwˈɪn\nbroken\n", inventory, "names.tsv")
    assert "line 3" in str(raised.value)


def test_lexicon_file_reloads_when_changed_and_keeps_the_last_good_version(tmp_path, inventory, caplog) -> None:
    path = tmp_path / "lexicon.tsv"
    path.write_text("Nguyen ŋwˈɪn\n", encoding="utf-8")
    lexicon = LexiconFile(path, inventory, check_s=0)
    assert lexicon.entries() == {"nguyen": tuple("ŋwˈɪn")}
    path.write_text("Nguyen ŋwˈɪn\nkubectl kˈuːbkəntɹˌoʊl\n", encoding="utf-8")
    os.utime(path, ns=(1, 10**18))
    assert lexicon.entries()["kubectl"] == tuple("kˈuːbkəntɹˌoʊl")
    path.write_text("Nguyen ŋwˈɝn\n", encoding="utf-8")
    os.utime(path, ns=(1, 2 * 10**18))
    with caplog.at_level(logging.ERROR):
        assert "kubectl" in lexicon.entries()
    assert "keeping the last good version" in caplog.text


def test_a_lexicon_file_that_is_bad_at_first_is_read_once_it_is_fixed(tmp_path, inventory) -> None:
    path = tmp_path / "lexicon.tsv"
    path.write_text("Nguyen g\n", encoding="utf-8")
    with pytest.raises(InvalidPhonemeError):
        LexiconFile(path, inventory)
    lenient = LexiconFile(path, inventory, check_s=0, strict=False)
    assert lenient.entries() == {}
    path.write_text("Nguyen ŋwˈɪn\n", encoding="utf-8")
    os.utime(path, ns=(1, 10**18))
    assert lenient.entries() == {"nguyen": tuple("ŋwˈɪn")}


def test_a_request_lexicon_is_checked_with_the_other_options_and_its_error_names_the_field() -> None:
    from libs.synthesis.options import resolve_options
    from libs.voice.registry import default_registry
    from libs.wire.errors import InvalidRequestError

    fields = dict(voice="", speed=0, encoding=0, sample_rate_hz=0, speaker_id=0, request_id="", include_alignment=False)
    options = resolve_options(default_registry(), **fields, lexicon={"Nguyen": "ŋ w ˈɪ n"})
    assert options.lexicon == {"nguyen": tuple("ŋwˈɪn")}
    assert resolve_options(default_registry(), **fields).lexicon == {}
    with pytest.raises(InvalidRequestError, match="did you mean 'ɡ'") as refused:
        resolve_options(default_registry(), **fields, lexicon={"go": "g ˈoʊ"})
    assert refused.value.field == "lexicon"
    assert isinstance(refused.value.__cause__, InvalidPhonemeError)
