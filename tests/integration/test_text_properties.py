"""Properties of the text side for any text: the attacks that once crashed or stalled the gateway,
random Unicode, and mixtures of both. Sentences stay within the caps, espeak-ng never crashes or
hangs (it runs in the phonemiser pool, so a crash or a hang would surface here as an error, with
the pool's time limit as the bound), and text cut into pieces gives the sentences of the whole."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from libs.synthesis.text_side import TextLimits, TextSide
from libs.text.errors import EmptyTextError, UnreadScriptError
from libs.text.frontend import Sentence
from libs.text.phonemizer_pool import PhonemizerPool
from libs.text.sentences import IncrementalSentenceSplitter, split_sentences
from libs.voice.registry import default_registry

MAX_IDS = 300
MAX_PENDING_CHARS = 200
FRAGMENTS = [
    "s'", "s?", "'s", "ness", "s\u2032", " ", "  ", "\n", "\n\n", "\t", "😀", "👨\u200d👩\u200d👧", "مرحبا", "你好",
    "привет", "ש", "Hello", "world", "and", "because", ",", ", ", ".", ". ", "!", "?!", "...", '"', ")", "Dr.",
    "e.g.", "1,234.5", "3:30", "\u2014", "e\u0301", "\u200b", "\u00ad", "x" * 70, "A", "b",
]  # fmt: skip
_FRAGMENT = st.sampled_from(FRAGMENTS)
# A fragment repeated: the attacks are runs ("s'" * 220, 400 pieces of spaces, "ness" * 70).
_RUN = st.tuples(_FRAGMENT, st.integers(min_value=1, max_value=250)).map(lambda run: run[0] * run[1])
TEXTS = st.one_of(
    st.text(max_size=300),
    st.lists(_FRAGMENT, max_size=150).map("".join),
    st.lists(st.one_of(_FRAGMENT, _RUN, st.text(max_size=6)), max_size=12).map("".join).map(lambda text: text[:5000]),
)


def _pieces_of(text: str, cuts: list[int]) -> list[str]:
    bounds = [0, *sorted(min(cut, len(text)) for cut in cuts), len(text)]
    return [text[start:end] for start, end in itertools.pairwise(bounds)]


@settings(max_examples=400, deadline=None)
@given(text=TEXTS, cuts=st.lists(st.integers(min_value=0, max_value=2000), max_size=30), limit=st.sampled_from([40, 200]))
def test_any_text_cut_anywhere_splits_as_the_whole_within_the_limit(text: str, cuts: list[int], limit: int) -> None:
    whole = split_sentences(text, limit)
    assert "".join(whole) == text and all(len(chunk) <= limit for chunk in whole)
    splitter = IncrementalSentenceSplitter(limit)
    chunks: list[str] = []
    for piece in _pieces_of(text, cuts):
        chunks.extend(splitter.feed(piece))
        assert len(splitter.pending_text) <= limit
    assert chunks + splitter.flush() == whole


class _Harness:
    """A text side on a real phonemiser pool, driven from synchronous tests (hypothesis)."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.pool = PhonemizerPool(2, call_timeout_s=20.0)
        self.loop.run_until_complete(self.pool.start())
        limits = TextLimits(max_sentence_ids=MAX_IDS, max_pending_text_chars=MAX_PENDING_CHARS, sentence_wait_s=600)
        self.text_side = TextSide(ThreadPoolExecutor(1), 5000, limits, self.pool)
        self.voice = default_registry().default

    def whole(self, text: str) -> list[Sentence]:
        async def run() -> list[Sentence]:
            return [sentence async for sentence in await self.text_side.sentences(self.voice, text)]

        return self.loop.run_until_complete(run())

    def streamed(self, pieces: list[str]) -> list[Sentence]:
        async def source() -> AsyncIterator[str]:
            for piece in pieces:
                yield piece

        async def run() -> list[Sentence]:
            return [sentence async for sentence in self.text_side.incremental_sentences(self.voice, source())]

        return self.loop.run_until_complete(run())

    def close(self) -> None:
        self.loop.run_until_complete(self.pool.close())
        self.loop.close()


@pytest.fixture(scope="module")
def harness() -> Iterator[_Harness]:
    running = _Harness()
    try:
        yield running
    finally:
        running.close()


_VOCABULARY = frozenset(i for ids in default_registry().default.phoneme_id_map().values() for i in ids)


def _within_caps(sentences: list[Sentence]) -> bool:
    """Each sentence within the id cap, framed by the start and end markers, every id in the voice's vocabulary
    (what the acoustic worker checks: an id outside it would be refused as INVALID_ARGUMENT)."""
    return all(
        2 < len(s.phoneme_ids) <= MAX_IDS and s.phoneme_ids[0] == 1 and s.phoneme_ids[-1] == 2 and _VOCABULARY.issuperset(s.phoneme_ids)
        for s in sentences
    )


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=TEXTS)
def test_any_text_gives_sentences_within_the_caps_without_crashing_espeak_ng(harness: _Harness, text: str) -> None:
    try:
        sentences = harness.whole(text)
    except EmptyTextError:
        return  # nothing to say: a clear INVALID_ARGUMENT
    assert sentences and _within_caps(sentences)
    assert harness.pool.replaced == 0  # no child crashed or hung


@pytest.mark.parametrize(
    "text",
    ["s'" * 2500, "😀 مرحبا 你好 привет ש Hello " * 190, "and so on " * 500, " " * 4990 + "a B"],
)
def test_the_known_attacks_give_sentences_within_the_caps(harness: _Harness, text: str) -> None:
    sentences = harness.whole(text)
    assert sentences and _within_caps(sentences)
    assert harness.pool.replaced == 0


def test_a_long_text_in_a_script_the_voice_cannot_read_is_refused_by_name(harness: _Harness) -> None:
    """5,000 ideographs (which espeak-ng would read as 5,000 "Chinese letter"s) are passed over,
    and the text is refused naming their script, with no text process lost on the way."""
    with pytest.raises(UnreadScriptError, match="CJK script"):
        harness.whole("你好" * 2500)
    assert harness.pool.replaced == 0


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=TEXTS, cuts=st.lists(st.integers(min_value=0, max_value=2000), max_size=20))
def test_a_streamed_text_cut_anywhere_gives_the_sentences_of_the_whole(harness: _Harness, text: str, cuts: list[int]) -> None:
    try:
        streamed = harness.streamed(_pieces_of(text, cuts))
    except UnreadScriptError as error:  # only words in scripts the voice cannot read: said at its end
        with pytest.raises(UnreadScriptError) as whole:
            harness.streamed([text])
        assert whole.value.scripts == error.scripts
        return
    assert streamed == harness.streamed([text])
    assert _within_caps(streamed)
    assert harness.pool.replaced == 0
