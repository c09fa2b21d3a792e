"""Our phonemes and phoneme ids equal piper-tts 1.8.0's for the same text."""

from __future__ import annotations

import random

import pytest

piper_phonemize_espeak = pytest.importorskip("piper.phonemize_espeak")
piper_phoneme_ids = pytest.importorskip("piper.phoneme_ids")

from libs.text.espeak import espeak_engine  # noqa: E402
from libs.text.frontend import TextFrontend  # noqa: E402
from libs.text.phoneme_ids import default_voice_config_path, load_phoneme_id_map, phonemes_to_ids  # noqa: E402
from libs.text.phonemize import phonemize  # noqa: E402
from libs.text.sentences import split_sentences  # noqa: E402

CORPUS = [
    # plain sentences
    "The quick brown fox jumps over the lazy dog.",
    # Weak forms that the espeak-ng 1.52 dictionary and piper's newer one read differently.
    "Our meeting has been moved to half past four on Thursday.",
    "The mountain road is closed until the snow has been cleared.",
    "Hello world",
    "She sells sea shells by the sea shore.",
    "I read the book yesterday, and I will read another one tomorrow.",
    # numbers, dates, times, currency, units
    "On January 5th, 2024, the price rose to $1,234.56.",
    "The year 1066 changed England forever.",
    "I have 1,000,000 reasons and 3 excuses.",
    "Pi is roughly 3.14159, and e is about 2.718.",
    "The meeting is at 10:30 a.m. on 2024-01-05.",
    "It costs £5, €4.99 or ¥500.",
    "The temperature dropped to -5 degrees; then it rose by 12%.",
    "Add 1.5 kg of flour and 2.25 L of milk.",
    "Call me at 555-0123 before 9 p.m., okay?",
    "The 3rd of July, 1999 was a Saturday.",
    "Chapter IV begins on page 42.",
    "The ratio was 3:1 in favour.",
    "We sold 1/2 of the stock, then 3/4 of the rest.",
    # abbreviations and initials
    "Dr. Smith met Mr. and Mrs. Jones at St. Mary's.",
    "Prof. X arrived at 9 a.m. with e.g. notes, i.e. papers, etc.",
    "J. R. R. Tolkien wrote The Hobbit.",
    "The U.S.A. is large, and the U.K. is not.",
    "The U.S.A.'s flag has fifty stars.",
    # questions and exclamations
    "How are you? I'm fine, thanks!",
    "Is it 50% or 75%? Nobody knows!!!",
    "What?! You did what?",
    "Really? Really. Really!",
    "Why not?\nBecause.",
    # quotes and brackets
    'She said, "It\'s over." Then she left.',
    '"Quoted!" he shouted.',
    "'Single quoted,' she whispered.",
    "He whispered “don’t go” and left.",
    "(This is a parenthetical remark.) Then more text follows.",
    "The word [sic] appears in brackets.",
    # dashes, ellipses, colons, semicolons
    "Wait... what? No — yes — maybe.",
    "Items: apples, pears; bananas and grapes.",
    "He paused… and then spoke.",
    "The years 1990–2000 were busy.",
    "Ends with a comma,",
    "Ends with a colon:",
    # long sentences and multi-sentence texts
    "This is a rather long sentence that goes on and on, with several clauses, a few commas, "
    "and even a semicolon; it should still be phonemised exactly as Piper does it, no matter how long it gets.",
    "One. Two. Three. Four. Five. Six. Seven.",
    "First paragraph ends here.\n\nSecond paragraph starts here. It has two sentences.",
    "A line\nbroken in the middle.",
    "Para one\n\nPara two\n\n\nPara three",
    "Hello.\n",
    "Hello.\n\n",
    # casing, symbols, foreign words, emoji
    "UPPERCASE TEXT IS LOUD.",
    "CamelCaseWord and snake_case_word are identifiers.",
    "Visit https://example.com/path?q=1 for details.",
    "Send mail to info@example.com today.",
    "Naïve café owners in São Paulo say olá.",
    "Rock 'n' roll never dies.",
    "x = 3 + 4 * 2",
    "Hello 😀 world!",
    "#hashtag @mention & more",
    # degenerate input
    "",
    "   ",
    "...",
    "?!",
    "A.",
]


@pytest.fixture(scope="module")
def piper_phonemizer():
    return piper_phonemize_espeak.EspeakPhonemizer()


@pytest.fixture(scope="module")
def phoneme_id_map():
    return load_phoneme_id_map(default_voice_config_path())


@pytest.mark.parametrize("text", CORPUS)
def test_clauses_and_terminators_equal_piper_bridge(piper_phonemizer, text):
    """Clause by clause: phonemes, terminator and sentence-end flag as piper's C bridge returns them."""
    from piper import espeakbridge

    espeakbridge.set_voice("en-us")
    theirs = espeakbridge.get_phonemes(text)
    ours = [(clause.phonemes, clause.terminator, clause.ends_sentence) for clause in espeak_engine().clauses(text)]
    assert ours == theirs


def test_clause_spans_cover_the_text_and_follow_espeak_clauses():
    text = 'He said "hi." Then, quietly: left.'
    clauses = espeak_engine().clauses(text)
    assert [text[clause.text_start : clause.text_end] for clause in clauses] == [
        'He said "hi.',
        '" Then, ',
        "quietly: ",
        "left.",
    ]


def test_corpus_is_large_enough():
    assert len([text for text in CORPUS if text.strip()]) >= 50


@pytest.mark.parametrize("text", CORPUS)
def test_phonemes_equal_piper(piper_phonemizer, text):
    assert phonemize(text, "en-us") == piper_phonemizer.phonemize("en-us", text)


@pytest.mark.parametrize("text", CORPUS)
def test_phoneme_ids_equal_piper(piper_phonemizer, phoneme_id_map, text):
    ours = [phonemes_to_ids(sentence, phoneme_id_map) for sentence in phonemize(text, "en-us")]
    theirs = [
        piper_phoneme_ids.phonemes_to_ids(sentence, phoneme_id_map)
        for sentence in piper_phonemizer.phonemize("en-us", text)
    ]
    assert ours == theirs


@pytest.mark.parametrize("text", [text for text in CORPUS if any(c.isalnum() for c in text)])
def test_frontend_sentences_equal_piper_sentences(piper_phonemizer, phoneme_id_map, text):
    """The gateway's entry point (normalise, chunk, phonemise, ids) gives Piper's sentences."""
    frontend = TextFrontend(phoneme_id_map, "en-us")
    sentences = frontend.sentences(text)
    piper_sentences = [sentence for sentence in piper_phonemizer.phonemize("en-us", text) if sentence]
    assert [list(sentence.phonemes) for sentence in sentences] == piper_sentences
    assert [list(sentence.phoneme_ids) for sentence in sentences] == [
        piper_phoneme_ids.phonemes_to_ids(sentence, phoneme_id_map) for sentence in piper_sentences
    ]


def test_linking_glide_is_written_as_piper_writes_it(piper_phonemizer):
    """espeak-ng 1.52.0 hides the linking ʲ after an i-vowel before a vowel; piper 1.8.0 shows it."""
    text = "Call me at noon. The ratio is high."
    assert phonemize(text) == piper_phonemizer.phonemize("en-us", text)
    assert "ʲ" in phonemize(text)[0]


def test_random_texts_chunked_equal_piper_whole(piper_phonemizer):
    """Phonemising sentence chunk by chunk equals Piper phonemising the whole text.

    Random mixes of words, numbers, abbreviations, punctuation, quotes and line breaks probe the
    rule that chunks are cut only where espeak-ng ends a sentence too.
    """
    atoms = [
        "Hello", "world", "Dr.", "e.g.", "3.14", "$5", ",", ".", "?", "!", "...", ";", ":", '"', "'",
        "(", ")", "\n", "\n\n", " ", "U.S.", "Smith", "the", "42", "—", "-", "café", "J.", "Then",
        "it's", "?!", '."', "!)", "me", "at",
    ]
    rng = random.Random(20240605)
    for _ in range(400):
        text = "".join(rng.choice(atoms) + rng.choice(["", " ", " "]) for _ in range(rng.randint(1, 30)))
        chunked = [sentence for chunk in split_sentences(text) for sentence in phonemize(chunk) if sentence]
        whole = [sentence for sentence in piper_phonemizer.phonemize("en-us", text) if sentence]
        assert chunked == whole, text
