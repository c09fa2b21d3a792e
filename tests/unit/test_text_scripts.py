"""Runs of letters outside the Latin script, and which of them are passed over (the reading asked
of espeak-ng is tests/integration/test_text_frontend_reading.py's)."""

from __future__ import annotations

import pickle

from libs.text.errors import EmptyTextError, UnreadScriptError
from libs.text.scripts import UnreadWords, foreign_runs, foreign_scripts

LETTER = "lˈɛɾɚ"


def _reader(readings: dict[str, str]):  # type: ignore[no-untyped-def]
    return lambda text: {"letter": LETTER, **readings}[text]


def test_runs_are_letters_outside_latin_with_their_marks() -> None:
    text = "Say नमस्ते, café 你好 and Δt."
    runs = [text[start:end] for start, end in foreign_runs(text)]
    assert runs == ["नमस्ते", "你好", "Δ"]  # accents and vowel signs belong to their letters


def test_scripts_are_named_in_order_of_first_use() -> None:
    assert foreign_scripts("Привет 你好 мир ok") == ["Cyrillic", "CJK"]
    assert foreign_scripts("plain café") == []


def test_a_run_is_read_when_espeak_switches_to_its_language() -> None:
    unread = UnreadWords(_reader({"नमस्ते": "(hi)nəmˈʌsteː(en-us)", "καλη": "kˈæpəˈælfəlˈæmdəˈiːɾə", "α": "ˈælfə"}))
    assert not unread.is_unread("नमस्ते")
    assert unread.is_unread("καλη")  # letter names run together, no language of its own
    assert not unread.is_unread("α")  # a lone letter read by its name


def test_named_and_spelled_runs_are_unread() -> None:
    unread = UnreadWords(_reader({"你": "tʃˈaɪniːzlˌɛɾɚ", "ab": "(te)tˈa(en-us) (te)lˈa(en-us)"}))
    assert unread.is_unread("你")  # "Chinese letter"
    assert unread.is_unread("ab")  # a language flag, but a word per letter


def test_a_run_that_starts_its_clause_takes_its_punctuation() -> None:
    unread = UnreadWords(_reader({"你好": "tʃˈaɪniːzlˌɛɾɚ tʃˈaɪniːzlˌɛɾɚ"}))
    text = "Hi. 你好, 你好! Say 你好, then go."
    spans = unread.spans(text)
    assert [text[start:end] for start, end in spans] == ["你好, ", "你好! ", "你好"]
    assert unread.blanked("Say 你好 now") == "Say    now"


def test_the_refusal_names_the_scripts_and_survives_a_process_boundary() -> None:
    error = pickle.loads(pickle.dumps(UnreadScriptError(["CJK", "Thai"])))
    assert isinstance(error, EmptyTextError)
    assert error.scripts == ["CJK", "Thai"]
    assert "CJK, Thai scripts" in str(error)
