"""The text corpus the default voice's mel head and adapter are trained on, and the held-out set.

Every sentence is original to this project (no third-party text, so no licence to track). The
hand-written lines in corpus/train.txt are joined by sentences built from templates with a seeded
generator, which adds numbers, dates, times, names and lists. corpus/heldout.txt is never trained
on; the quality benchmark and the tests read it. A Mandarin voice trains on the texts of the
Mandarin reading sets instead (bench/data/zh_*.tsv); a voice of any other language on the English
corpus, read by its own espeak-ng voice.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Final

CORPUS_DIR: Final = Path(__file__).parent / "corpus"
TEMPLATE_SENTENCE_COUNT: Final = 120
CORPUS_SEED: Final = 20240611

_NAMES: Final = (
    "Amelia", "Jonas", "Fatima", "Oscar", "Mei", "Rafael", "Ingrid", "Tobias", "Zara", "Henry",
    "Lucia", "Dmitri", "Chloe", "Kwame", "Beatrice", "Yusuf", "Martha", "Felix", "Ruth", "Arjun",
)
_PLACES: Final = (
    "Chicago", "Denver", "Boston", "Seattle", "Atlanta", "Phoenix", "Portland", "Houston",
    "the harbour", "the old mill", "the train station", "the city library", "the farmers' market",
)
_THINGS: Final = (
    "notebooks", "oranges", "candles", "bicycles", "umbrellas", "blankets", "teacups", "pencils",
    "lanterns", "envelopes", "batteries", "sandwiches", "postcards", "jars of honey",
)
_MONTHS: Final = (
    "January", "February", "March", "April", "May", "June", "July", "August", "September",
    "October", "November", "December",
)
_WEEKDAYS: Final = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
_ORDINALS: Final = (
    "first", "second", "third", "fifth", "eighth", "twelfth", "fifteenth", "twentieth",
    "twenty-first", "thirtieth",
)
_TEMPLATES: Final = (
    "{name} bought {count} {thing} at {place} on {weekday}.",
    "Did {name} really drive all the way from {place} to {place2}?",
    "The meeting with {name} is on the {ordinal} of {month} at {hour} o'clock.",
    "We need {thing}, {thing2} and {thing3} before {weekday}.",
    "Flight {flight} to {place} is now boarding at gate {gate}.",
    "{name} and {name2} walked {count} miles to {place}.",
    "Why did {name} leave {place} so early on {weekday}?",
    "The bill came to {count} dollars and {cents} cents.",
    "Your reference number is {digits}.",
    "In {year}, {name} moved to {place} with {count} {thing}.",
    "Is it {hour} o'clock already, {name}?",
    "Room {room} is on the {ordinal} floor, next to the lift.",
    "There are {count} {thing} left, so please take only one.",
    "{name} said the train from {place} was {minutes} minutes late.",
    "About {percent} percent of the {thing} were sold by {weekday} evening.",
)


def _read_lines(name: str) -> list[str]:
    lines = (CORPUS_DIR / name).read_text(encoding="utf-8").splitlines()
    return [line.strip() for line in lines if line.strip()]


def _template_sentences(count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    sentences = []
    for index in range(count):
        names = rng.sample(_NAMES, 2)
        places = rng.sample(_PLACES, 2)
        things = rng.sample(_THINGS, 3)
        sentence = _TEMPLATES[index % len(_TEMPLATES)].format(
            name=names[0], name2=names[1], place=places[0], place2=places[1],
            thing=things[0], thing2=things[1], thing3=things[2],
            count=rng.randint(2, 999), cents=rng.randint(1, 99), hour=rng.randint(1, 12),
            minutes=rng.randint(2, 55), percent=rng.randint(3, 97), year=rng.randint(1850, 2030),
            weekday=rng.choice(_WEEKDAYS), month=rng.choice(_MONTHS), ordinal=rng.choice(_ORDINALS),
            flight=rng.randint(100, 9999), gate=f"{rng.choice('ABCDEF')}{rng.randint(1, 40)}",
            room=rng.randint(100, 999), digits=", ".join(str(rng.randint(0, 9)) for _ in range(5)),
        )
        sentences.append(sentence[0].upper() + sentence[1:])
    return sentences


# A Mandarin voice learns from the project's Mandarin sentences: the reading gold set to train on,
# its held-out set to check (their texts only; both are original to the project).
ZH_TRAIN: Final = Path(__file__).resolve().parents[2] / "bench" / "data" / "zh_gold.tsv"
ZH_HELDOUT: Final = Path(__file__).resolve().parents[2] / "bench" / "data" / "zh_heldout.tsv"


def _tsv_texts(path: Path) -> list[str]:
    lines = path.read_text(encoding="utf-8").splitlines()
    return [line.split("\t")[0] for line in lines if line.strip() and not line.startswith("#")]


def training_sentences(language: str = "en") -> list[str]:
    """All training sentences of `language` ("en": the hand-written ones, then the template ones;
    "zh": the Mandarin gold set's), in a fixed order."""
    if language == "zh":
        return _tsv_texts(ZH_TRAIN)
    return _read_lines("train.txt") + _template_sentences(TEMPLATE_SENTENCE_COUNT, CORPUS_SEED)


def heldout_sentences(language: str = "en") -> list[str]:
    """The fixed held-out sentences of `language`, never trained on."""
    if language == "zh":
        return _tsv_texts(ZH_HELDOUT)
    return _read_lines("heldout.txt")


def corpus_files(language: str = "en") -> list[Path]:
    """The files a language's corpus is made from (for the manifest's checksum)."""
    if language == "zh":
        return [ZH_TRAIN, ZH_HELDOUT, Path(__file__)]
    return [*sorted(CORPUS_DIR.glob("*.txt")), Path(__file__)]
