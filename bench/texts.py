"""The benchmark's texts, in three lengths, and how to make them unique so the mel cache misses.

Every sentence was written for this project. The lengths are chosen so first audio is measured on an
ordinary first sentence (about 1.5 to 3 s of speech) and throughput on a realistic mix.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Final

SHORT: Final = "The kettle clicked off just as the rain began to fall."

PARAGRAPH: Final = (
    "Our train left the station a few minutes after dawn. "
    "Fields of frost slid past the window while most of the carriage slept. "
    "By the time the sun was up, we could already see the hills."
)

LONG: Final = (
    "The old lighthouse on the point has not guided a ship in forty years. "
    "Its lamp was taken down long ago, and the glass room at the top is home to pigeons now. "
    "Every summer a handful of volunteers climb the spiral stairs to paint the railings. "
    "They bring sandwiches, a radio, and far more brushes than anyone needs. "
    "From the gallery you can watch the ferries cross the bay and the fishing boats come home. "
    "On a clear evening the mountains to the north turn pink, then purple, then grey. "
    "Children from the village like to count the steps, though nobody agrees on the number. "
    "Some say there are one hundred and twelve, others swear there are more. "
    "Whatever the count, the view from the top is worth every one of them."
)

TEXTS: Final[Mapping[str, str]] = {"short": SHORT, "paragraph": PARAGRAPH, "long": LONG}
"""The three lengths by name: one sentence, three sentences, nine sentences."""

# Two short words per sentence give 24 * 24 = 576 tags; the counter adds a third word past that.
_TAG_ADJECTIVES: Final = (
    "amber", "brave", "calm", "dusty", "eager", "fancy", "gentle", "happy", "icy", "jolly", "kind", "lucky",
    "merry", "noble", "olive", "proud", "quiet", "rapid", "silver", "tidy", "vivid", "warm", "young", "zesty",
)  # fmt: skip
_TAG_NOUNS: Final = (
    "badger", "beetle", "camel", "falcon", "ferret", "gecko", "heron", "jackal", "koala", "lemur", "magpie", "marten",
    "newt", "otter", "panda", "puffin", "raven", "salmon", "tiger", "turtle", "walrus", "weasel", "wombat", "zebra",
)  # fmt: skip
_SENTENCE_END: Final = re.compile(r"(?<=[.!?])\s+")


def split_sentences(text: str) -> list[str]:
    """The sentences of one of the texts above (they end in ., ! or ? followed by a space)."""
    return [sentence for sentence in _SENTENCE_END.split(text.strip()) if sentence]


def tag_words(number: int) -> str:
    """A short phrase of ordinary words that is different for every non-negative `number`."""
    if number < 0:
        raise ValueError(f"number must be non-negative, got {number}")
    words: list[str] = []
    size = len(_TAG_ADJECTIVES) * len(_TAG_NOUNS)
    while True:
        rest, pair = divmod(number, size)
        adjective, noun = divmod(pair, len(_TAG_NOUNS))
        words.append(f"{_TAG_ADJECTIVES[adjective]} {_TAG_NOUNS[noun]}")
        if rest == 0:
            return ", ".join(words)
        number = rest - 1


def unique_variants(text: str, count: int, first_number: int = 0) -> list[str]:
    """`count` variants of `text` in which every sentence is new, so no sentence can hit the mel cache.

    Each sentence gets a distinct two-word tag in front ("Amber badger, our train left ..."): the
    cache is keyed per sentence, so tagging only one sentence would let the others hit. Tags are
    numbered from `first_number` on; give each call a fresh range. The texts grow by a few percent,
    and piper-tts is given the very same texts.
    """
    sentences = split_sentences(text)
    variants = []
    number = first_number
    for _ in range(count):
        tagged = []
        for sentence in sentences:
            tagged.append(f"{tag_words(number).capitalize()}, {sentence[0].lower()}{sentence[1:]}")
            number += 1
        variants.append(" ".join(tagged))
    return variants
