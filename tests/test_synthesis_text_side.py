"""The gateway's text side phonemises a request's text a chunk at a time, as the pipeline asks for sentences."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from libs.synthesis.text_side import TextSide
from libs.text.errors import EmptyTextError
from libs.voice.registry import default_registry

TEXT = "First, a sentence of some length. Then a second one follows it. And a third ends the text."


def _text_side() -> TextSide:
    return TextSide(ThreadPoolExecutor(1), max_text_chars=5000)


async def test_first_sentence_comes_before_the_rest_is_phonemised() -> None:
    text_side = _text_side()
    voice = default_registry().default
    frontend = text_side.frontend(voice)
    whole = frontend.sentences(TEXT)
    phonemised: list[str] = []
    chunk_sentences = frontend.chunk_sentences
    frontend.chunk_sentences = lambda chunk: phonemised.append(chunk) or chunk_sentences(chunk)  # type: ignore[method-assign]

    chunks = frontend.chunks(TEXT)
    assert len(chunks) == 3
    sentences = await text_side.sentences(voice, TEXT)
    assert phonemised == chunks[:1]  # the first chunk comes phonemised with the cut
    first = await anext(sentences)
    assert phonemised == chunks[:1]
    rest = [sentence async for sentence in sentences]
    assert phonemised == chunks
    assert [s.phoneme_ids for s in [first, *rest]] == [s.phoneme_ids for s in whole]  # same as all at once


async def test_text_without_words_fails_once_every_chunk_is_seen() -> None:
    text_side = _text_side()
    voice = default_registry().default
    sentences = await text_side.sentences(voice, "♪♪♪ ♪♪♪")  # normalised and cut: not empty yet
    with pytest.raises(EmptyTextError, match="no words"):
        [sentence async for sentence in sentences]
