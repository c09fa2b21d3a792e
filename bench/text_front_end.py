"""How well the text front end reads: `python -m bench.text_front_end` (`make bench-text`).

Two test sets of our own, in bench/data:

- written_forms.tsv: everyday sentences with written forms (numbers, money, dates, times, units,
  abbreviations, Roman numerals, ...) and how a person says each (one or more spoken forms). The
  phoneme error rate (PER) is the edit distance between the phonemes a front end makes of the
  written sentence and espeak-ng's phonemes of the nearest spoken form, over the spoken form's
  phonemes (summed over the set). Word breaks and punctuation are left out; stress marks count.
  They are scored on their own: a form's breaks and pauses are as spoken when the runs of spaces
  and punctuation between its phonemes (a word break, a comma's pause, a sentence end) are those of
  a spoken form, in order, so words run together or a lost pause shows there.
- heteronyms.tsv: sentences with one heteronym each, tagged with the right reading. A front end
  reads it right when, of the heteronym's readings, the right one is nearest (edit distance) to a
  word of its phonemes, and strictly nearer than every other reading.

Each set has a held-out part (`*_heldout.tsv`), written after the rules were frozen and never
used to change them; the first parts were written alongside the rules. Both are scored for our front end (the gateway's reading: written forms, heteronyms) and for
piper-tts 1.8.0's phonemes of the raw text. It also times the reading step per sentence (what it
adds before espeak-ng on the path to first audio).
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from bench.report import run_heading
from libs.text.frontend import TextFrontend
from libs.text.heteronyms import readings
from libs.text.phoneme_ids import default_voice_config_path, load_espeak_voice, load_phoneme_id_map
from libs.text.reading import ReadingRules, prepare

DATA_DIR: Final = Path(__file__).resolve().parent / "data"
WRITTEN_FORMS: Final = DATA_DIR / "written_forms.tsv"
HETERONYMS: Final = DATA_DIR / "heteronyms.tsv"
WRITTEN_FORMS_HELD_OUT: Final = DATA_DIR / "written_forms_heldout.tsv"
HETERONYMS_HELD_OUT: Final = DATA_DIR / "heteronyms_heldout.tsv"
_NOT_PHONEMES: Final = frozenset(" .,;:!?")
SERVER_READING: Final = ReadingRules(written_forms=True, heteronyms=True)

Phonemizer = Callable[[str], list[str]]


@dataclass(frozen=True)
class WrittenForm:
    written: str
    spoken: tuple[str, ...]


@dataclass(frozen=True)
class HeteronymCase:
    sentence: str
    word: str
    reading: str


def load_written_forms(path: Path = WRITTEN_FORMS) -> list[WrittenForm]:
    """The written-form test set: one WrittenForm per line that is not a comment."""
    forms = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        written, spoken = line.split("\t")
        forms.append(WrittenForm(written, tuple(form.strip() for form in spoken.split(" | "))))
    return forms


def load_heteronym_cases(path: Path = HETERONYMS) -> list[HeteronymCase]:
    """The heteronym test set."""
    cases = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        sentence, word, reading = line.split("\t")
        cases.append(HeteronymCase(sentence, word, reading))
    return cases


def edit_distance(first: Sequence[str], second: Sequence[str]) -> int:
    """Levenshtein distance between two phoneme sequences."""
    previous = list(range(len(second) + 1))
    for i, a in enumerate(first, 1):
        current = [i]
        for j, b in enumerate(second, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (a != b)))
        previous = current
    return previous[-1]


def comparable(phonemes: Sequence[str]) -> list[str]:
    """Phonemes without word breaks and punctuation."""
    return [phoneme for phoneme in phonemes if phoneme not in _NOT_PHONEMES]


def breaks(phonemes: Sequence[str]) -> list[str]:
    """The word breaks and pauses of a phoneme sequence in order: each run of spaces and punctuation
    between phonemes as its punctuation, or " " for a plain word break."""
    runs: list[str] = []
    run: str | None = None
    for phoneme in phonemes:
        if phoneme in _NOT_PHONEMES:
            run = (run or "") + phoneme
        elif run is not None:
            runs.append(run.strip() or " ")
            run = None
    if run is not None:
        runs.append(run.strip() or " ")
    return runs


def phoneme_words(phonemes: Sequence[str]) -> list[str]:
    """The spoken words of a phoneme sequence."""
    return [word for word in "".join(p if p not in _NOT_PHONEMES else " " for p in phonemes).split() if word]


def spoken_reading(phonemes: Sequence[str], word: str) -> str | None:
    """Which reading of heteronym `word` the phonemes say (None: no reading is nearest alone)."""
    words = phoneme_words(phonemes)
    distances = {
        name: min(edit_distance(list(spoken), list(ipa)) for spoken in words) for name, ipa in readings(word).items()
    }
    best = min(distances.values())
    nearest = [name for name, distance in distances.items() if distance == best]
    return nearest[0] if len(nearest) == 1 else None


@dataclass(frozen=True)
class PerScore:
    errors: int
    reference_phonemes: int
    exact: int
    total: int

    @property
    def rate(self) -> float:
        return self.errors / self.reference_phonemes


def phoneme_error_rate(forms: Sequence[WrittenForm], front_end: Phonemizer, reference: Phonemizer) -> tuple[PerScore, list[tuple[WrittenForm, int]]]:
    """PER of `front_end` on the written forms against `reference`'s phonemes of the spoken forms."""
    errors = reference_phonemes = exact = 0
    misses: list[tuple[WrittenForm, int]] = []
    for form in forms:
        ours = comparable(front_end(form.written))
        best: tuple[int, int] | None = None
        for spoken in form.spoken:
            target = comparable(reference(spoken))
            distance = edit_distance(ours, target)
            if best is None or distance < best[0]:
                best = (distance, len(target))
        assert best is not None
        errors += best[0]
        reference_phonemes += best[1]
        if best[0] == 0:
            exact += 1
        else:
            misses.append((form, best[0]))
    return PerScore(errors, reference_phonemes, exact, len(forms)), misses


def break_misses(forms: Sequence[WrittenForm], front_end: Phonemizer, reference: Phonemizer) -> list[WrittenForm]:
    """The forms whose word breaks and pauses by `front_end` are those of no spoken form by `reference`."""
    return [
        form
        for form in forms
        if all(breaks(front_end(form.written)) != breaks(reference(spoken)) for spoken in form.spoken)
    ]


def heteronym_accuracy(cases: Sequence[HeteronymCase], front_end: Phonemizer) -> tuple[int, list[HeteronymCase]]:
    """How many cases `front_end` reads right, and the ones it reads wrong."""
    wrong = [case for case in cases if spoken_reading(front_end(case.sentence), case.word) != case.reading]
    return len(cases) - len(wrong), wrong


def our_front_end(rules: ReadingRules = SERVER_READING) -> Phonemizer:
    """Phonemes of a text through our TextFrontend, read as the gateway reads it."""
    config = default_voice_config_path()
    frontend = TextFrontend(load_phoneme_id_map(config), load_espeak_voice(config), reading=rules)

    def phonemize(text: str) -> list[str]:
        return [phoneme for sentence in frontend.sentences(text) for phoneme in sentence.phonemes]

    return phonemize


def piper_front_end() -> Phonemizer:
    """piper-tts 1.8.0's phonemes of the raw text."""
    from piper.phonemize_espeak import EspeakPhonemizer

    phonemizer = EspeakPhonemizer()

    def phonemize(text: str) -> list[str]:
        return [phoneme for sentence in phonemizer.phonemize("en-us", text) for phoneme in sentence]

    return phonemize


def reading_cost_ms(texts: Sequence[str], rules: ReadingRules = SERVER_READING, rounds: int = 20) -> tuple[float, float]:
    """Median and worst time (ms) of the reading step (written forms, heteronyms, plan) per text."""
    times_ms: list[float] = []
    for text in texts:
        best = float("inf")
        for _ in range(rounds):
            started = time.perf_counter()
            prepare(text, rules)
            best = min(best, (time.perf_counter() - started) * 1000)
        times_ms.append(best)
    return statistics.median(times_ms), max(times_ms)


def phonemising_cost_ms(texts: Sequence[str], rules: ReadingRules, rounds: int = 5) -> float:
    """Median time (ms) of a text process's whole work on one text (`TextFrontend.chunk_sentences`:
    reading, espeak-ng, ids, word spans) with `rules`."""
    config = default_voice_config_path()
    frontend = TextFrontend(load_phoneme_id_map(config), load_espeak_voice(config), max_phoneme_ids=400, reading=rules)
    times_ms: list[float] = []
    for text in texts:
        best = float("inf")
        for _ in range(rounds):
            started = time.perf_counter()
            frontend.chunk_sentences(text)
            best = min(best, (time.perf_counter() - started) * 1000)
        times_ms.append(best)
    return statistics.median(times_ms)


def first_sentence_ms(texts: Sequence[str], read: bool, rounds: int = 3) -> float:
    """Median time (ms) from a text to its first sentence's ids through the gateway's text side
    (`TextSide.sentences`: the text thread, one text process, the answer checked): what first audio
    waits for on the text side, with the server's reading on or off."""
    import asyncio
    from concurrent.futures import ThreadPoolExecutor

    from libs.synthesis.text_side import TextLimits, TextSide
    from libs.text.phonemizer_pool import PhonemizerPool
    from libs.voice.registry import default_registry

    async def measure() -> float:
        pool = PhonemizerPool(1, call_timeout_s=30.0)
        limits = TextLimits(read_written_forms=read, read_heteronyms=read)
        text_side = TextSide(ThreadPoolExecutor(1), 5000, limits, pool)
        voice = default_registry().default
        try:
            await text_side.warm_up(voice)
            times_ms = []
            for text in texts:
                best = float("inf")
                for _ in range(rounds):
                    started = time.perf_counter()
                    sentences = await text_side.sentences(voice, text)
                    await anext(sentences)
                    best = min(best, (time.perf_counter() - started) * 1000)
                    await sentences.aclose()  # type: ignore[attr-defined]
                times_ms.append(best)
            return statistics.median(times_ms)
        finally:
            await text_side.close()

    return asyncio.run(measure())


def report_lines(misses: list[str]) -> list[str]:
    """The report as markdown lines (the table, then the costs); what was read wrongly goes to `misses`."""
    # Each text is phonemised once per front end: the phoneme and the break scores read the same phonemes.
    ours, piper = functools.cache(our_front_end()), functools.cache(piper_front_end())
    sets = (
        ("development", load_written_forms(WRITTEN_FORMS), load_heteronym_cases(HETERONYMS)),
        ("held out", load_written_forms(WRITTEN_FORMS_HELD_OUT), load_heteronym_cases(HETERONYMS_HELD_OUT)),
    )
    lines = [
        "| set | front end | phoneme error rate | written forms read exactly | breaks and pauses as spoken | heteronyms read right |",
        "|---|---|---|---|---|---|",
    ]
    for set_name, forms, cases in sets:
        our_per, our_misses = phoneme_error_rate(forms, ours, piper)
        piper_per, _ = phoneme_error_rate(forms, piper, piper)
        our_breaks_missed = break_misses(forms, ours, piper)
        breaks_right = {"ours": len(forms) - len(our_breaks_missed), "piper": len(forms) - len(break_misses(forms, piper, piper))}
        our_right, our_wrong = heteronym_accuracy(cases, ours)
        piper_right, _ = heteronym_accuracy(cases, piper)
        label = f"{set_name} ({len(forms)} forms, {len(cases)} heteronyms)"
        for name, per, breaks_as_spoken, right in (
            ("ours", our_per, breaks_right["ours"], our_right),
            ("piper-tts 1.8.0, raw text", piper_per, breaks_right["piper"], piper_right),
        ):
            lines.append(
                f"| {label} | {name} | {per.rate:.2%} ({per.errors}/{per.reference_phonemes}) | {per.exact}/{per.total} "
                f"| {breaks_as_spoken}/{per.total} | {right}/{len(cases)} ({right / len(cases):.1%}) |"
            )
        lines.append(f"| {label} | PER ours / piper-tts | {our_per.rate / piper_per.rate:.3f} (target: at most 0.333) |  |  |  |")
        misses += [f"  {set_name}: {errors:3d} phonemes  {form.written}" for form, errors in our_misses]
        misses += [f"  {set_name}: breaks      {form.written}" for form in our_breaks_missed]
        misses += [f"  {set_name}: {case.word}/{case.reading}  {case.sentence}" for case in our_wrong]
    texts = [form.written for _, forms, _ in sets for form in forms] + [case.sentence for _, _, cases in sets for case in cases]
    median_ms, worst_ms = reading_cost_ms(texts)
    piper_ms = phonemising_cost_ms(texts, ReadingRules())
    ours_ms = phonemising_cost_ms(texts, SERVER_READING)
    lines += [
        "",
        f"Reading step (written forms, heteronyms, pronunciation plan) per sentence, {len(texts)} sentences: "
        f"median {median_ms:.3f} ms, worst {worst_ms:.3f} ms (budget: 5 ms added to first audio).",
        f"A text process's whole work per sentence (reading, espeak-ng, ids, word spans): median {ours_ms:.2f} ms "
        f"with our reading, {piper_ms:.2f} ms as piper-tts reads.",
        f"Text to the first sentence's ids through the gateway's text side (what first audio waits for there): "
        f"median {first_sentence_ms(texts, read=True):.2f} ms with our reading, "
        f"{first_sentence_ms(texts, read=False):.2f} ms as piper-tts reads.",
    ]
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--misses", action="store_true", help="list every written form and heteronym read wrongly")
    parser.add_argument("--out", type=Path, help="also write the report here as markdown (docs/performance.md's text-bench section)")
    arguments = parser.parse_args(argv)
    misses: list[str] = []
    lines = report_lines(misses)
    print("\n".join(lines))
    if arguments.out is not None:
        heading = run_heading("Text front end", "make bench-text")
        arguments.out.write_text(heading + "\n\n" + "\n".join(lines) + "\n", encoding="utf-8")
    if arguments.misses:
        print("\nread wrongly by ours:")
        print("\n".join(misses))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
