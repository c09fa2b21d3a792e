"""Mandarin reading against the gold set: polyphone accuracy and phoneme error rate, ours against
espeak-ng's own cmn reading of the raw text (what Piper's zh_CN voices are read with), and the cost
per sentence. `make bench-text-zh`, or:

    python -m bench.text_zh [--gold bench/data/zh_gold.tsv] [--out bench/text_zh.md]

- Gold (bench/data/zh_gold.tsv): each sentence with its reading in numbered pinyin, citation tones
  (see the file's header). Its phonemes are the gold pinyin written as espeak-ng's cmn phonemes
  (libs.text.zh.syllables), a Latin-script word as espeak-ng reads it.
- Polyphone accuracy: every occurrence of a character of `POLYPHONES` in a sentence without digits.
  Ours is right when our citation pinyin equals the gold syllable. espeak-ng gives no pinyin, so
  it is judged on phonemes: right when the gold syllable's phonemes come out of an alignment of
  its phonemes to the gold's unchanged (which forgives it the tone 1 / tone 4 collision of its IPA);
  ours is scored that way too, in the next column, for a like-for-like comparison.
- PER: Levenshtein distance over phoneme codepoints (stress marks, word breaks and punctuation
  left out), divided by the gold's length; ours with our citation tones, like the gold.
- Cost: milliseconds per sentence for our reading (pinyin, sandhi and phonemes) and for espeak-ng
  alone, on this machine, one thread.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import sys
import time
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from libs.voice.precision import cpu_model

GOLD_PATH: Final = Path(__file__).parent / "data" / "zh_gold.tsv"
HELDOUT_PATH: Final = Path(__file__).parent / "data" / "zh_heldout.tsv"
"""Sentences written after the reading rules were fixed, never used to change them."""
POLYPHONES: Final = frozenset(
    "行长重还了得着地的为乐觉角数量少好便调朝种都传发藏处差只干教空应兴降和没看当相将难背参曾会大分省假倒恶几率血薄给累缝似供冲正称更结模散奇载强卡露塞尽弹扇泊佛系吐折钻转盛曲屏宿"
)
"""Characters with more than one reading in common use (the issue's list and more)."""
_IGNORED: Final = frozenset("ˈˌ ,.;:!?-")
_HAN: Final = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
_SYLLABLE: Final = re.compile(r"^[a-z]+[1-5]$")


@dataclass(frozen=True)
class GoldSentence:
    """One line of the gold set."""

    text: str
    """The sentence as written."""
    tokens: tuple[str, ...]
    """Its reading: numbered pinyin syllables, and Latin-script words as themselves."""

    @property
    def has_digits(self) -> bool:
        return bool(re.search(r"\d", self.text))


def load_gold(path: Path = GOLD_PATH) -> list[GoldSentence]:
    """The gold set: `text<TAB>reading` lines, `#` comments."""
    sentences = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            text, reading = line.split("\t")
            sentences.append(GoldSentence(text, tuple(reading.split())))
    return sentences


def phoneme_units(phonemes: str) -> list[str]:
    """Phoneme codepoints that count for PER: NFD, without stress, word breaks and punctuation."""
    return [ch for ch in unicodedata.normalize("NFD", phonemes) if ch not in _IGNORED and not ch.isspace()]


def edit_distance(a: Sequence[str], b: Sequence[str]) -> int:
    """Levenshtein distance between two sequences."""
    previous = list(range(len(b) + 1))
    for i, item in enumerate(a, 1):
        current = [i]
        for j, other in enumerate(b, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (item != other)))
        previous = current
    return previous[-1]


def aligned_spans_kept(reference: Sequence[str], hypothesis: Sequence[str], spans: Sequence[tuple[int, int]]) -> list[bool]:
    """For each [start, end) span of `reference`, whether an optimal alignment of `hypothesis` to it
    matches every unit of the span exactly, with nothing inserted inside it."""
    rows, cols = len(reference), len(hypothesis)
    cost = [[0] * (cols + 1) for _ in range(rows + 1)]
    for i in range(rows + 1):
        cost[i][0] = i
    for j in range(cols + 1):
        cost[0][j] = j
    for i in range(1, rows + 1):
        for j in range(1, cols + 1):
            cost[i][j] = min(cost[i - 1][j] + 1, cost[i][j - 1] + 1, cost[i - 1][j - 1] + (reference[i - 1] != hypothesis[j - 1]))
    matched = [False] * rows
    inserted_before = [False] * (rows + 1)
    i, j = rows, cols
    while i > 0 or j > 0:
        if i > 0 and j > 0 and cost[i][j] == cost[i - 1][j - 1] + (reference[i - 1] != hypothesis[j - 1]):
            matched[i - 1] = reference[i - 1] == hypothesis[j - 1]
            i, j = i - 1, j - 1
        elif i > 0 and cost[i][j] == cost[i - 1][j] + 1:
            i -= 1
        else:
            inserted_before[i] = True
            j -= 1
    return [all(matched[start:end]) and not any(inserted_before[start + 1 : end]) for start, end in spans]


def gold_phonemes(tokens: Sequence[str], espeak_word) -> tuple[list[str], list[tuple[int, int]]]:
    """The gold's phoneme units and each token's [start, end) span in them."""
    from libs.text.zh.syllables import syllable_ipa

    units: list[str] = []
    spans = []
    for token in tokens:
        start = len(units)
        units.extend(phoneme_units(syllable_ipa(token) if _SYLLABLE.match(token) else espeak_word(token)))
        spans.append((start, len(units)))
    return units, spans


@dataclass
class Tally:
    """Counts for one reader."""

    polyphones: int = 0
    polyphones_right: int = 0
    polyphones_right_by_phonemes: int = 0
    syllables: int = 0
    syllables_right: int = 0
    errors: int = 0
    gold_units: int = 0
    seconds: float = 0.0


def run(gold: list[GoldSentence], show_errors: bool = False) -> dict[str, Tally]:
    """Score our reading and espeak-ng's over the gold set."""
    from libs.text.espeak import espeak_engine
    from libs.text.phonemize import phonemize_sentences
    from libs.text.reading import ReadingRules
    from libs.text.zh.frontend import MandarinFrontend
    from libs.text.zh.reading import read_run
    from libs.text.zh.syllables import syllable_ipa
    from libs.voice.registry import default_registry

    espeak_engine()
    frontend = MandarinFrontend(default_registry().default.phoneme_id_map(), reading=ReadingRules(written_forms=True))

    def espeak_phonemes(text: str) -> str:
        return "".join("".join(sentence.phonemes) for sentence in phonemize_sentences(text, "cmn"))

    read_run("银行")  # load jieba and pypinyin before the clock starts
    ours, espeak, plain = Tally(), Tally(), Tally()
    for sentence in gold:
        units, spans = gold_phonemes(sentence.tokens, espeak_phonemes)
        started = time.perf_counter()
        words = frontend.spoken_words(sentence.text)
        ours.seconds += time.perf_counter() - started
        tokens = [token for word in words for token in word.citation]  # before sandhi, like the gold
        our_units = [u for token in tokens for u in phoneme_units(syllable_ipa(token) if _SYLLABLE.match(token) else espeak_phonemes(token))]
        started = time.perf_counter()
        espeak_units = phoneme_units(espeak_phonemes(sentence.text))
        espeak.seconds += time.perf_counter() - started
        for tally, hypothesis in ((ours, our_units), (espeak, espeak_units)):
            tally.errors += edit_distance(units, hypothesis)
            tally.gold_units += len(units)
        ours.syllables += len(sentence.tokens)
        ours.syllables_right += len(sentence.tokens) - edit_distance(list(sentence.tokens), tokens)
        if sentence.has_digits:
            continue
        positions = [index for index, token in enumerate(sentence.tokens) if _SYLLABLE.match(token)]
        characters = [ch for ch in sentence.text if _HAN.match(ch)]
        poly = [(k, position) for k, (position, ch) in enumerate(zip(positions, characters, strict=False)) if ch in POLYPHONES]
        plain_tokens = _pypinyin_alone(sentence.text)
        for _, position in poly:
            plain.polyphones += 1
            plain.polyphones_right += position < len(plain_tokens) and plain_tokens[position] == sentence.tokens[position]
        kept_ours = aligned_spans_kept(units, our_units, [spans[position] for _, position in poly])
        kept_espeak = aligned_spans_kept(units, espeak_units, [spans[position] for _, position in poly])
        for (k, position), by_ours, by_espeak in zip(poly, kept_ours, kept_espeak, strict=False):
            ours.polyphones += 1
            espeak.polyphones += 1
            right = position < len(tokens) and tokens[position] == sentence.tokens[position]
            ours.polyphones_right += right
            ours.polyphones_right_by_phonemes += by_ours
            espeak.polyphones_right_by_phonemes += by_espeak
            if show_errors and not right:
                print(f"  {characters[k]}: ours {tokens[position] if position < len(tokens) else '-'}, gold {sentence.tokens[position]}: {sentence.text}")
    return {"ours": ours, "pypinyin alone": plain, "espeak-ng cmn": espeak}


def _pypinyin_alone(text: str) -> list[str]:
    """pypinyin's reading with its phrase dictionary and nothing else (一 and 不 in citation tones,
    as the gold): what the context rules add is the difference."""
    from pypinyin import Style, lazy_pinyin

    tokens: list[str] = []
    for run in re.findall(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+|[A-Za-z][A-Za-z']*", text):
        if run[0].isascii():
            tokens.append(run)
            continue
        readings = lazy_pinyin(run, style=Style.TONE3, neutral_tone_with_five=True)
        tokens.extend("yi1" if ch == "一" else "bu4" if ch == "不" and r in ("bu2", "bu4") else r for ch, r in zip(run, readings, strict=False))
    return tokens


def table(tallies: dict[str, Tally], sentences: int) -> str:
    """The results as a Markdown table."""
    lines = [
        "| reader | polyphone accuracy (pinyin) | polyphone accuracy (phonemes) | PER | syllable accuracy | ms / sentence |",
        "|---|---|---|---|---|---|",
    ]
    for name, tally in tallies.items():
        pinyin = f"{tally.polyphones_right / tally.polyphones:.1%} ({tally.polyphones_right}/{tally.polyphones})" if name != "espeak-ng cmn" else "n/a (no pinyin)"
        by_phonemes = f"{tally.polyphones_right_by_phonemes / tally.polyphones:.1%}" if tally.gold_units else "-"
        per = f"{tally.errors / tally.gold_units:.1%}" if tally.gold_units else "-"
        syllables = f"{tally.syllables_right / tally.syllables:.1%}" if tally.syllables else "-"
        cost = f"{1000 * tally.seconds / sentences:.2f}" if tally.seconds else "-"
        lines.append(f"| {name} | {pinyin} | {by_phonemes} | {per} | {syllables} | {cost} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gold", type=Path, action="append", default=None, help="a gold set (TSV; repeat for several)")
    parser.add_argument("--out", type=Path, default=None, help="also write the table here (Markdown)")
    parser.add_argument("--errors", action="store_true", help="list every polyphone we read wrong")
    args = parser.parse_args(argv)
    sections = []
    for path in args.gold or [GOLD_PATH, HELDOUT_PATH]:
        gold = load_gold(path)
        tallies = run(gold, show_errors=args.errors)
        polyphones = tallies["ours"].polyphones
        sections.append(
            f"`{path.name}`: {len(gold)} sentences, {sum(len(s.tokens) for s in gold)} syllables, {polyphones} polyphone occurrences.\n\n"
            + table(tallies, len(gold))
        )
    text = "\n\n".join(sections) + f"\n\nCPU: {cpu_model().name}, {os.cpu_count()} cores, Python {platform.python_version()}.\n"
    print(text)
    if args.out:
        args.out.write_text("# Mandarin reading against the gold set (`make bench-text-zh`)\n\n" + text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
