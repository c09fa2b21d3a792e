"""The gateway phonemises a request's text a chunk at a time, as the pipeline asks for sentences."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from libs.telemetry.metrics import GatewayMetrics
from libs.text.errors import EmptyTextError
from libs.voice.registry import default_registry
from services.gateway.servicer import TextToSpeechServicer

TEXT = "First, a sentence of some length. Then a second one follows it. And a third ends the text."


def _servicer() -> TextToSpeechServicer:
    return TextToSpeechServicer(
        registry=default_registry(),
        pool=None,  # type: ignore[arg-type]  # not used by the text steps
        cache=None,  # type: ignore[arg-type]
        metrics=GatewayMetrics(),
        text_executor=ThreadPoolExecutor(1),
        max_text_chars=5000,
    )


async def test_first_sentence_comes_before_the_rest_is_phonemised() -> None:
    servicer = _servicer()
    voice = default_registry().default
    frontend = servicer.frontend(voice)
    whole = frontend.sentences(TEXT)
    phonemised: list[str] = []
    chunk_sentences = frontend.chunk_sentences
    frontend.chunk_sentences = lambda chunk: phonemised.append(chunk) or chunk_sentences(chunk)  # type: ignore[method-assign]

    chunks = servicer._chunks(voice, TEXT)
    first_chunk, later = await servicer._in_text_thread(servicer._first_sentences_and_later_chunks, voice, TEXT)
    assert len(chunks) == 3 and later == chunks[1:]
    assert phonemised == chunks[:1]  # the first chunk comes phonemised with the cut
    sentences = servicer._chunk_sentences(voice, first_chunk, later)
    first = await anext(sentences)
    assert phonemised == chunks[:1]
    rest = [sentence async for sentence in sentences]
    assert phonemised == chunks
    assert [s.phoneme_ids for s in [first, *rest]] == [s.phoneme_ids for s in whole]  # same as all at once


async def test_text_without_words_fails_once_every_chunk_is_seen() -> None:
    servicer = _servicer()
    voice = default_registry().default
    first, later = await servicer._in_text_thread(servicer._first_sentences_and_later_chunks, voice, "♪♪♪ ♪♪♪")
    assert first == []
    with pytest.raises(EmptyTextError, match="no words"):
        [sentence async for sentence in servicer._chunk_sentences(voice, first, later)]
