"""Text normalisation: what each rule does, and that it keeps the phonemes of ordinary text."""

from __future__ import annotations

import pytest

from libs.text.errors import EmptyTextError, InvalidTextError, TextTooLongError
from libs.text.normalize import (
    check_not_empty,
    check_text_length,
    decode_utf8,
    has_speakable_characters,
    normalize_text,
)
from libs.text.phonemize import phonemize

ORDINARY_TEXTS = [
    "The quick brown fox jumps over the lazy dog.",
    "On January 5th, 2024, the price rose to $1,234.56.",
    "Dr. Smith met Mr. Jones at 10:30 a.m., didn't he?",
    'She said, "It\'s over." Then she left!',
    "Items: apples, pears; bananas (and grapes).",
    "First paragraph.\n\nSecond paragraph.\nA new line.",
    "Wait... what? No - yes.",
    "Naïve café owners in São Paulo.",
]


@pytest.mark.parametrize("text", ORDINARY_TEXTS)
def test_ordinary_text_is_unchanged(text):
    assert normalize_text(text) == text


@pytest.mark.parametrize(
    ("typographic", "plain"),
    [
        ("I don’t know.", "I don't know."),
        ("She said “hello” to me.", 'She said "hello" to me.'),
        ("‘Quoted’ words.", "'Quoted' words."),
        ("«Bonjour» he said.", '"Bonjour" he said.'),
        ("Wait… what?", "Wait... what?"),
        ("A\u00a0B costs $5.", "A B costs $5."),
        ("Hello  \t world.", "Hello world."),
        ("Hello. \n \n\n World.", "Hello.\n\nWorld."),
        ("Hello.\r\nWorld.", "Hello.\nWorld."),
        ("co\u00adoperate now.", "cooperate now."),
    ],
)
def test_typographic_forms_keep_phonemes(typographic, plain):
    """These rules change characters but not what espeak-ng says."""
    assert normalize_text(typographic) == plain
    assert phonemize(typographic) == phonemize(plain)


def test_decomposed_accents_are_composed_so_espeak_reads_the_word():
    decomposed = "cafe\u0301"
    assert normalize_text(decomposed) == "café"
    assert phonemize(normalize_text(decomposed)) == phonemize("café")
    assert phonemize(decomposed) != phonemize("café")  # the reason for NFC


def test_zero_width_characters_are_removed_and_controls_part_words():
    text = "\ufeffzero\u200bwidth\u200d \u202ebidi\u202c\x00 bell\x07 ok\udcff."
    assert normalize_text(text) == "zerowidth bidi bell ok."
    assert normalize_text("hello\x00world\x1bagain") == "hello world again"  # two words a program ran together


def test_unicode_hyphens_become_ascii_so_the_word_stays_one_word():
    assert normalize_text("x\u2011ray and re\u2010enter") == "x-ray and re-enter"
    assert phonemize("x\u2011ray") != phonemize("x-ray")
    assert phonemize(normalize_text("x\u2011ray")) == phonemize("x-ray")


def test_modifier_apostrophe_becomes_an_apostrophe():
    assert normalize_text("I donʼt know.") == "I don't know."
    assert phonemize(normalize_text("I donʼt know.")) == [list("aɪ dˈoʊnt nˈoʊ.")]


def test_unspaced_em_dash_gets_the_clause_break_of_a_spaced_one():
    assert normalize_text("Wait—what?") == "Wait — what?"
    assert phonemize(normalize_text("Wait—what?")) == phonemize("Wait — what?")
    assert ";" in phonemize(normalize_text("Wait—what?"))[0]


def test_html_character_references_become_their_characters_and_ampersands_in_words_stay():
    assert normalize_text("Tom &amp; Jerry said &quot;it&#39;s &#x2014; fine&quot;.") == 'Tom & Jerry said "it\'s — fine".'
    assert normalize_text("AT&T, R&D and &bogus; stay") == "AT&T, R&D and &bogus; stay"
    assert normalize_text("a&nbsp;b&#0;c") == "a b\ufffdc"  # NBSP collapses to a space; a NUL reference is not a NUL
    assert phonemize(normalize_text("It&#39;s")) == phonemize("It's")


def test_letters_in_other_forms_of_their_alphabet_become_the_plain_letters():
    """espeak-ng reads a fullwidth or a mathematical bold letter by its code point ("letter f f
    three four"); as plain letters they are the word they spell."""
    assert normalize_text("ＴＯＫＹＯ ２０２０") == "TOKYO 2020"
    assert normalize_text("𝐁𝐨𝐥𝐝 𝘐𝘵𝘢𝘭𝘪𝘤 ℂ") == "Bold Italic C"
    assert phonemize(normalize_text("𝐇𝐞𝐥𝐥𝐨")) == phonemize("Hello")
    assert normalize_text("Ⓗⓔⓛⓛⓞ 🅷🅸 ① 5㎏") == "Hello HI 1 5kg"  # in a circle or a square
    assert normalize_text("25℃ or 77℉, Chapter Ⅳ") == "25°C or 77°F, Chapter IV"  # one character each


def test_marks_drawn_over_plain_letters_are_removed_but_not_a_languages_or_ipas():
    """Strikethrough, underline and "Zalgo" text are combining marks on plain letters; espeak-ng read
    them as other letters ("strike" with a final vowel). Marks that are a language's or IPA's stay."""
    assert normalize_text("s\u0336t\u0336r\u0336i\u0336k\u0336e\u0336 u\u0332p") == "strike up"
    assert phonemize(normalize_text("H\u0337\u0322\u031be\u0336l\u0335l\u0338o\u0334")) == phonemize("Hello")
    assert normalize_text("e\u0301") == "\u00e9"  # composed first: an accent of a language
    assert normalize_text("\u1eb9\u0301 [[ n\u0329 ]]") == "\u1eb9\u0301 [[ n\u0329 ]]"


def test_superscripts_and_small_capitals_stay_for_they_are_ipa():
    assert normalize_text("[[ pʰ ɪ ʀ ]]") == "[[ pʰ ɪ ʀ ]]"


def test_emoji_are_read_by_their_whole_names():
    """A presentation selector made espeak-ng say "red" for "❤️", a skin tone "thumbs medium", and
    emoji side by side ran together as one word; joined sequences and flags keep their names."""
    assert phonemize(normalize_text("❤\ufe0f")) == phonemize("❤") == phonemize("red heart")
    assert phonemize(normalize_text("👍🏽")) == phonemize("thumbs up")
    assert normalize_text("👍👍") == "👍 👍"
    assert phonemize(normalize_text("👩\u200d💻")) == phonemize("woman technologist")  # the joiner is kept
    assert phonemize(normalize_text("🏳\ufe0f\u200d🌈")) == phonemize("rainbow flag")
    assert normalize_text("🇺🇸🇬🇧🇫🇷") == "🇺🇸 🇬🇧 🇫🇷"  # a flag is a pair of regional indicators
    assert normalize_text("a\u200db") == "ab"  # a joiner anywhere else is removed as before


def test_fullwidth_punctuation_and_other_compatibility_forms_stay():
    """The Mandarin front end splits sentences at fullwidth punctuation; fractions, superscripts and
    ligatures are written forms of their own (libs.text.normalizer reads "x²" as "x squared")."""
    assert normalize_text("你好，世界！") == "你好，世界！"
    assert normalize_text("½ x² ﬁ ™") == "½ x² ﬁ ™"


def test_line_and_paragraph_separators_become_newlines():
    assert normalize_text("One.\u2028Two.\u2029Three.") == "One.\nTwo.\n\nThree."


def test_trailing_blank_line_is_kept_because_piper_drops_the_full_stop_there():
    assert normalize_text("Hello.\n\n\n") == "Hello.\n\n"
    assert phonemize("Hello.\n\n") == [list("həlˈoʊ")]
    assert phonemize("Hello.") == [list("həlˈoʊ.")]


def test_speakable_characters():
    assert has_speakable_characters("a")
    assert has_speakable_characters("42")
    assert has_speakable_characters("😀")
    assert not has_speakable_characters("")
    assert not has_speakable_characters(" ... ?! \n")


def test_check_not_empty_raises_for_punctuation_only():
    with pytest.raises(EmptyTextError, match="empty"):
        check_not_empty("?! ...")
    check_not_empty("ok")


def test_check_text_length_states_the_limit():
    check_text_length("x" * 10, 10)
    with pytest.raises(TextTooLongError, match="11 characters long; the limit is 10") as error:
        check_text_length("x" * 11, 10)
    assert error.value.max_chars == 10 and error.value.length_chars == 11


def test_decode_utf8_accepts_valid_text():
    assert decode_utf8("héllo 😀".encode()) == "héllo 😀"


@pytest.mark.parametrize(
    ("data", "offset"),
    [(b"abc\xff", 3), (b"\xc3", 0), ("héllo".encode()[:2] + b"x", 1), (b"ok \xed\xa0\x80", 3)],
)
def test_decode_utf8_reports_the_offset_of_the_first_bad_byte(data, offset):
    with pytest.raises(InvalidTextError, match=f"byte offset {offset}") as error:
        decode_utf8(data)
    assert error.value.byte_offset == offset
