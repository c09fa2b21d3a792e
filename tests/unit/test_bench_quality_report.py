"""`make bench-quality`'s report: the word error rate of what the recogniser heard, and the fast
tier's verdicts against the quality tier's scores in the same run."""

from __future__ import annotations

from bench.quality import RECOGNISED_LABELS, QualityReport, SystemScores, format_report

TEXTS = ["The weather forecast promises sunshine.", "Could you send me the slides?"]


def _scores(ovrl: float, transcripts: list[str] | None = None) -> SystemScores:
    return SystemScores(ovrl=[ovrl, ovrl], sig=[ovrl, ovrl], bak=[4.0, 4.0], compute_s=1.0, audio_s=10.0, transcripts=transcripts or [])


def _report(fast: SystemScores) -> str:
    systems = {
        RECOGNISED_LABELS[0]: _scores(3.3, ["the weather forecast promises sunshine", "could you send me the slides"]),
        RECOGNISED_LABELS[1]: _scores(3.3, ["the weather forecast promises sunshine", "could you send me the slide"]),
        "(b') ours, fp32, whole sentence": _scores(3.3),
        RECOGNISED_LABELS[2]: fast,
    }
    return format_report(QualityReport(systems, 0.1, 0.1, len(TEXTS), TEXTS))


def test_word_error_rates_are_counted_against_the_texts_in_words_without_punctuation() -> None:
    assert _scores(3.0, ["the weather forecast promises sunshine", "could you send me the slide"]).word_error_rate(TEXTS) == 1 / 11
    assert _scores(3.0).word_error_rate(TEXTS) != _scores(3.0).word_error_rate(TEXTS)  # nan: not recognised


def test_the_fast_tier_passes_only_within_both_bounds_of_the_quality_tier() -> None:
    same_words = ["the weather forecast promises sunshine", "could you send me the slide"]
    passing = _report(_scores(3.25, same_words))
    assert "(f) OVRL >= (b) OVRL - 0.1: -0.050 -> PASS" in passing and "(f) WER <= (b) WER + 0.02: +0.000 -> PASS" in passing
    rough = _report(_scores(3.1, same_words))
    assert "-0.200 -> FAIL" in rough
    garbled = _report(_scores(3.3, ["the weather for a cast promises sunshine", "could you send me the slide"]))
    assert "WER + 0.02: +0.273 -> FAIL" in garbled
