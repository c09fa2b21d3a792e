"""Numbered pinyin syllables to the phonemes espeak-ng's `cmn` voice writes for them.

Piper's zh_CN voices (phoneme_type "espeak", espeak voice "cmn") were trained on espeak-ng's IPA
for Chinese text, split into codepoints: initials such as "ts." (zh), "tɕh" (q), "χ" (h), a final
whose vowel carries the tone, and the tone as one character after the vowel. espeak-ng 1.52 writes
only the first digit of its tone names, and "3" as "ɜ": tone 1 (55) and tone 4 (51) are both "5",
tone 2 (35) is "ɜ", tone 3 (214) is "2", the neutral tone (11) is "1". The voice never saw tone 1
and tone 4 apart, so neither do we.

The table (syllables.tsv, next to this file) holds every syllable of pypinyin's dictionary in all
five tones, as espeak-ng reads the numbered syllable on its own ("hang2" -> "χˈɑɜŋ", stress mark
included). `python -m libs.text.zh.syllables` writes it again from the espeak-ng data the project
phonemises with, and tests/integration/test_text_zh_syllables.py checks the file against it. Four
kinds of syllable espeak-ng cannot read as pinyin (it reads them as English) are built from its own
pieces, as `DERIVED` says.
"""

from __future__ import annotations

import functools
import re
import sys
from pathlib import Path
from typing import Final

TABLE_PATH: Final = Path(__file__).with_name("syllables.tsv")
TONES: Final = "12345"
STRESS: Final = "ˈ"
SECONDARY_STRESS: Final = "ˌ"
_SYLLABLE: Final = re.compile(r"^([a-z]+)([1-5])$")

# Syllables espeak-ng 1.52's cmn rules do not read as pinyin, with the espeak-ng syllables they are
# built from: j/q/x + iong is the initial of "ji"/"qi"/"xi" before espeak-ng's "yong" ("j" glide +
# "ong", as it writes "jiao" with a "j" glide); "wong" is a spelling of "weng"; the syllabic nasals
# m, n and ng (interjections: 呣, 嗯) are espeak-ng's syllabic "ŋ-" (how it reads 嗯), "hm"/"hng"
# the same after "h".
DERIVED: Final[dict[str, tuple[str, str]]] = {
    "jiong": ("ji", "yong"),
    "qiong": ("qi", "yong"),
    "xiong": ("xi", "yong"),
    "wong": ("", "weng"),
    "m": ("", "ng"),
    "n": ("", "ng"),
    "hm": ("h", "ng"),
    "hng": ("h", "ng"),
}


class UnknownSyllableError(ValueError):
    """A pinyin syllable that is not in the table."""


@functools.cache
def syllable_table() -> dict[str, str]:
    """Numbered syllable ("hang2") -> espeak-ng cmn IPA with its stress mark ("χˈɑɜŋ")."""
    table: dict[str, str] = {}
    for line in TABLE_PATH.read_text(encoding="utf-8").splitlines():
        if line and not line.startswith("#"):
            syllable, ipa = line.split("\t")
            table[syllable] = ipa
    return table


def syllable_ipa(syllable: str, stress: str = STRESS) -> str:
    """The phonemes of one numbered syllable ("yin2"), with `stress` ("ˈ", "ˌ" or "") on its vowel."""
    ipa = syllable_table().get(syllable)
    if ipa is None:
        raise UnknownSyllableError(f"{syllable!r} is not a Mandarin syllable in numbered pinyin (e.g. 'hang2')")
    return ipa.replace(STRESS, stress)


def word_ipa(syllables: list[str]) -> str:
    """One prosodic word as espeak-ng writes a word of its cmn dictionary: the syllables run
    together, the last stressed, the first of three or more with secondary stress (对不起:
    "tˌuei5pu1tɕhˈi2"), the others unstressed."""
    parts = []
    for index, syllable in enumerate(syllables):
        if index == len(syllables) - 1:
            stress = STRESS
        elif index == 0 and len(syllables) >= 3:
            stress = SECONDARY_STRESS
        else:
            stress = ""
        parts.append(syllable_ipa(syllable, stress))
    return "".join(parts)


def espeak_reading(syllable: str) -> str | None:
    """What espeak-ng's cmn voice writes for one numbered syllable on its own, or None when it does
    not read it as pinyin (it switches to English)."""
    from libs.text.espeak import espeak_engine

    clauses = espeak_engine().clauses(syllable, "cmn")
    ipa = "".join(clause.phonemes for clause in clauses).strip()
    if not ipa or "(" in ipa or " " in ipa:
        return None
    return ipa


def _initial_of(syllable_ipa_text: str) -> str:
    """The consonants before the stressed vowel of a one-syllable reading ("tɕˈi5" -> "tɕ")."""
    return syllable_ipa_text.split(STRESS)[0]


def build_table(syllables: list[str]) -> dict[str, str]:
    """The whole table from espeak-ng: every syllable in every tone (DERIVED ones from their parts)."""
    table: dict[str, str] = {}
    for base in syllables:
        if base in DERIVED:
            continue
        for tone in TONES:
            ipa = espeak_reading(f"{base}{tone}")
            if ipa is None:
                raise ValueError(f"espeak-ng does not read {base}{tone} as pinyin: add it to DERIVED")
            table[f"{base}{tone}"] = ipa
    for base, (initial_from, final_from) in DERIVED.items():
        for tone in TONES:
            initial = _initial_of(table[f"{initial_from}1"]) if initial_from in ("ji", "qi", "xi") else ""
            if initial_from == "h":
                initial = _initial_of(table["ha1"])
            table[f"{base}{tone}"] = initial + table[f"{final_from}{tone}"]
    return dict(sorted(table.items()))


def pypinyin_syllables() -> list[str]:
    """Every toneless syllable pypinyin's character dictionary knows (a..zuo, ng, hm, ...)."""
    from pypinyin import pinyin_dict
    from pypinyin.contrib.tone_convert import to_normal

    found = {to_normal(reading) for readings in pinyin_dict.pinyin_dict.values() for reading in readings.split(",")}
    return sorted(syllable for syllable in found if syllable.isascii() and syllable.isalpha())


def write_table(path: Path = TABLE_PATH) -> int:
    """Write syllables.tsv from espeak-ng; returns the number of rows."""
    table = build_table(pypinyin_syllables())
    header = "# numbered pinyin\tespeak-ng cmn IPA (written by python -m libs.text.zh.syllables; do not edit)\n"
    path.write_text(header + "".join(f"{syllable}\t{ipa}\n" for syllable, ipa in table.items()), encoding="utf-8")
    return len(table)


def parse_syllable(syllable: str) -> tuple[str, int]:
    """("hang", 2) from "hang2"; ValueError for anything else."""
    match = _SYLLABLE.match(syllable)
    if match is None:
        raise UnknownSyllableError(f"{syllable!r} is not numbered pinyin (e.g. 'hang2', neutral tone 5)")
    return match.group(1), int(match.group(2))


if __name__ == "__main__":
    print(f"wrote {write_table()} syllables to {TABLE_PATH}", file=sys.stderr)
