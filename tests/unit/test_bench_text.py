"""`make bench-text`: its section of docs/performance.md is what it wrote, and on the held-out written
forms our front end reads at most a third of piper-tts's phoneme errors."""

from __future__ import annotations

from bench.text_front_end import (
    WRITTEN_FORMS,
    WRITTEN_FORMS_HELD_OUT,
    breaks,
    load_written_forms,
    our_front_end,
    phoneme_error_rate,
    piper_front_end,
)
from scripts import render_docs


def test_performance_text_bench_section_is_what_bench_text_md_renders_to() -> None:
    begin, end = render_docs.markers("text-bench")
    page = render_docs.PERFORMANCE.read_text(encoding="utf-8")
    assert begin in page and end in page, "docs/performance.md lost its text-bench markers"
    in_page = page.split(begin, 1)[1].split(end, 1)[0]
    assert in_page == render_docs.bench_output(render_docs.TEXT_RESULTS)


def test_the_written_form_set_is_large_enough() -> None:
    forms = load_written_forms(WRITTEN_FORMS) + load_written_forms(WRITTEN_FORMS_HELD_OUT)
    assert len(forms) >= 300
    assert all(form.spoken and all(spoken.strip() for spoken in form.spoken) for form in forms)


def test_held_out_phoneme_error_rate_is_at_most_a_third_of_piper_tts() -> None:
    forms = load_written_forms(WRITTEN_FORMS_HELD_OUT)
    piper = piper_front_end()
    ours, _ = phoneme_error_rate(forms, our_front_end(), piper)
    theirs, _ = phoneme_error_rate(forms, piper, piper)
    assert theirs.rate > 0.1  # the set does hold forms espeak-ng reads wrongly
    assert ours.rate <= theirs.rate / 3


def test_breaks_are_the_runs_between_phonemes_so_words_run_together_show() -> None:
    assert breaks(list("wˈeɪt, wˌʌt?")) == [",", "?"]
    assert breaks(list("wˈeɪtwˌʌt?")) == ["?"]  # espeak-ng's reading of "Wait... what?"
    assert breaks(list("aɪ sˈɔː hˈɜː")) == [" ", " "]
