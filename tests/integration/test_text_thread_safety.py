"""espeak-ng is process-global and not thread-safe; phonemising from many threads must still be exact."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

from libs.text.frontend import TextFrontend
from libs.text.phoneme_ids import default_voice_config_path
from libs.text.phonemize import phonemize

TEXTS = [
    "The quick brown fox jumps over the lazy dog.",
    "Dr. Smith met Mr. Jones at 10:30 a.m., didn't he? Yes!",
    "On January 5th, 2024, the price rose to $1,234.56.",
    'She said, "It\'s over." Then she left; nobody followed.',
    "Call me at noon. The ratio is 3:1.",
    "First paragraph.\n\nSecond paragraph... with an ellipsis.",
    "A very long sentence " + "that keeps going and going " * 20 + "until it ends.",
    "Is it 50% or 75%? Nobody knows!!!",
]


def test_concurrent_phonemisation_equals_serial():
    serial = [phonemize(text) for text in TEXTS]
    jobs = TEXTS * 25
    start = threading.Barrier(8)

    def run(text: str) -> list[list[str]]:
        return phonemize(text)

    def warm_then_run(text: str) -> list[list[str]]:
        start.wait()
        return run(text)

    with ThreadPoolExecutor(max_workers=8) as pool:
        first = list(pool.map(warm_then_run, jobs[:8]))
        rest = list(pool.map(run, jobs[8:]))
    results = first + rest
    assert results == [serial[i % len(TEXTS)] for i in range(len(jobs))]


def test_concurrent_frontends_equal_serial():
    frontend = TextFrontend.from_voice_config(default_voice_config_path())
    serial = [frontend.sentences(text) for text in TEXTS]
    with ThreadPoolExecutor(max_workers=6) as pool:
        results = list(pool.map(frontend.sentences, TEXTS * 10))
    assert results == serial * 10
