"""Any text, read as a person reads it, still phonemises: no exception, no placeholder left in the
phonemes, ids inside the voice's map, and written forms grow the text by a bounded factor."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from libs.text.frontend import TextFrontend
from libs.text.normalizer import MAX_EXPANSION, expand_written_forms
from libs.text.reading import ReadingRules
from libs.voice.registry import default_registry

ATOMS = [
    "$", "€", "£", "%", "/", ":", ".", ",", "-", "–", "'", "#", "&", "@", "°", "(", ")", " ", " ", "\n",
    "1", "12", "3.50", "1,000", "2026", "1990s", "21st", "10:30", "a.m.", "pm", "km", "MB", "mph", "°F",
    "Dr.", "St.", "p.", "No.", "etc.", "e.g.", "Jan.", "World War", "II", "Henry", "VIII", "Chapter", "IV",
    "info@example.com", "www.example.org", "555-0123", "1/2", "3:1", "5-10", "USD", "read", "lead",
    "record", "the", "I", "to", "minute", "so", "[[ h ə l ˈoʊ ]]", "zyzzy", "Nguyen", "x",
    "^", "²", "⁻¹", "e", "E", "~", "<", ">", '"', "Mon", "Fri", "am", "1e-9",
    "½", "¾", "+44", "w/", "w/o", "B", "A", "1.000", "192.168.1.1", "rds", "hour",
]
TEXTS = st.lists(st.sampled_from(ATOMS), min_size=1, max_size=40).map("".join)


@settings(max_examples=200, deadline=None)
@given(TEXTS)
def test_any_mix_of_written_forms_phonemises(text: str) -> None:
    voice = default_registry().default
    frontend = TextFrontend(
        voice.phoneme_id_map(), voice.espeak_voice, max_phoneme_ids=400, reading=ReadingRules(True, True)
    )
    lexicon = {"nguyen": tuple("ŋwˈɪn")}
    max_id = max(max(ids) for ids in frontend.phoneme_id_map.values())
    for chunk in frontend.chunks(text) if any(c.isalnum() for c in text) else []:
        for sentence in frontend.chunk_sentences(chunk, lexicon=lexicon):
            assert "zɪzi" not in "".join(sentence.phonemes).replace("ˈ", "").replace("ˌ", "") or "zyzzy" in text.lower()
            assert all(0 <= value <= max_id for value in sentence.phoneme_ids)
            assert len(sentence.phoneme_ids) <= 400


@settings(max_examples=300, deadline=None)
@given(TEXTS)
def test_written_forms_grow_a_text_by_a_bounded_factor(text: str) -> None:
    assert len(expand_written_forms(text)) <= MAX_EXPANSION * len(text) + 40
