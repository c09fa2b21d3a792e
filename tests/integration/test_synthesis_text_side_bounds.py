"""What a client's text may cost the gateway's text side: a stream speaks what it holds past the
text cap or the wait cap, ends when it stays silent, and a text that crashes espeak-ng fails alone."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from libs.synthesis.in_flight import SentencesInFlight
from libs.synthesis.text_side import StreamIdleError, TextLimits, TextSide
from libs.text.errors import PhonemizerCrashError
from libs.text.frontend import Sentence
from libs.text.long_sentences import CONTINUATION
from libs.text.phonemizer_pool import PhonemizerPool
from libs.voice.registry import default_registry

# Generous bounds for "this happens while the stream is still open": they only stop a failing test
# from hanging, and say nothing about speed.
NEVER_S = 60.0


@pytest.fixture()
async def pool() -> AsyncIterator[PhonemizerPool]:
    running = PhonemizerPool(2, call_timeout_s=30.0)
    await running.start()
    yield running
    await running.close()


def _text_side(pool: PhonemizerPool, **limits: float) -> TextSide:
    return TextSide(ThreadPoolExecutor(1), 5000, TextLimits(**limits), pool)  # type: ignore[arg-type]


class _Client:
    """Pieces sent by a test, one at a time, with the stream kept open until `half_close`."""

    def __init__(self) -> None:
        self._queue: asyncio.Queue[str | None] = asyncio.Queue()

    def send(self, *pieces: str) -> None:
        for piece in pieces:
            self._queue.put_nowait(piece)

    def half_close(self) -> None:
        self._queue.put_nowait(None)

    async def pieces(self) -> AsyncIterator[str]:
        while (piece := await self._queue.get()) is not None:
            yield piece


async def _next(sentences: AsyncIterator[Sentence]) -> Sentence:
    return await asyncio.wait_for(anext(sentences), NEVER_S)


async def test_text_without_a_sentence_end_is_spoken_once_past_the_cap(pool: PhonemizerPool) -> None:
    text_side = _text_side(pool, max_pending_text_chars=300, sentence_wait_s=600)
    client = _Client()
    sentences = text_side.incremental_sentences(default_registry().default, client.pieces())
    client.send(*["and so the story goes on without a stop "] * 10)  # 400 characters, the stream still open
    first = await _next(sentences)
    assert first.text.startswith("and so the story") and len(first.text) <= 300
    assert first.phonemes[-2:] == CONTINUATION  # the text goes on: the voice stays up
    client.half_close()
    rest = [sentence async for sentence in sentences]
    assert " ".join(s.text for s in [first, *rest]).split() == ("and so the story goes on without a stop " * 10).split()


async def test_text_that_waits_too_long_for_its_sentence_end_is_spoken_up_to_its_last_word(pool: PhonemizerPool) -> None:
    text_side = _text_side(pool, sentence_wait_s=0.2)
    client = _Client()
    sentences = text_side.incremental_sentences(default_registry().default, client.pieces())
    client.send("The answer to your question is ", "forty")  # then the source stalls
    held = await _next(sentences)
    assert held.text == "The answer to your question is"
    assert held.phonemes[-2:] == CONTINUATION
    client.send("-two.")
    client.half_close()
    assert [sentence.text async for sentence in sentences] == ["forty-two."]


async def _first_sentence_in_flight(
    pool: PhonemizerPool, sentence_wait_s: float, *pieces: str
) -> tuple[_Client, SentencesInFlight, AsyncIterator[Sentence], str]:
    """A stream sent `pieces`, whose first sentence the pipeline has taken and is making: the client,
    the count of sentences in flight, the stream's sentences and the first one's text."""
    client = _Client()
    in_flight = SentencesInFlight()
    sentences = _text_side(pool, sentence_wait_s=sentence_wait_s).incremental_sentences(
        default_registry().default, client.pieces(), in_flight=in_flight
    )
    client.send(*pieces)
    first = (await _next(sentences)).text
    in_flight.taken()  # the pipeline makes it
    return client, in_flight, sentences, first


async def test_held_text_is_not_cut_while_the_audio_before_it_is_made(pool: PhonemizerPool) -> None:
    """A slow machine makes the first sentence for longer than the wait: the second stays whole."""
    client, _, sentences, first = await _first_sentence_in_flight(pool, 0.2, "The front door is locked. Good ")
    assert first == "The front door is locked."
    second = asyncio.ensure_future(anext(sentences))
    await asyncio.sleep(1.0)  # five times the wait
    assert not second.done()
    client.send("night.")
    client.half_close()
    assert (await asyncio.wait_for(second, NEVER_S)).text == "Good night."


async def test_held_text_is_cut_once_it_has_waited_its_wait_after_the_audio_before_it_is_made(pool: PhonemizerPool) -> None:
    client, in_flight, sentences, first = await _first_sentence_in_flight(pool, 0.2, "The answer is ready. Your number is ", "forty")
    assert first == "The answer is ready."
    held = asyncio.ensure_future(anext(sentences))
    await asyncio.sleep(1.0)
    assert not held.done()
    in_flight.made()  # the listener now hears the last of what was made; the source has stalled
    assert (await asyncio.wait_for(held, NEVER_S)).text == "Your number is"
    client.send("-two.")
    client.half_close()
    assert [sentence.text async for sentence in sentences] == ["forty-two."]


async def test_held_text_that_ends_soon_after_the_audio_before_it_is_made_is_spoken_whole(pool: PhonemizerPool) -> None:
    """A client that sends the rest of its sentence when it hears the one before (a Wyoming client
    does) keeps the sentence whole, however long that one took to make: its wait starts once the
    audio before it is made, not when the text arrived."""
    client, in_flight, sentences, first = await _first_sentence_in_flight(pool, 1.0, "The front door is locked. Good ")
    assert first == "The front door is locked."
    second = asyncio.ensure_future(anext(sentences))
    await asyncio.sleep(1.5)  # the first sentence is made for longer than the wait
    in_flight.made()
    await asyncio.sleep(0.1)  # the client hears it, then sends the rest
    assert not second.done()
    client.send("night.")
    client.half_close()
    assert (await asyncio.wait_for(second, NEVER_S)).text == "Good night."


async def test_a_stream_that_sends_nothing_ends_with_a_clear_error(pool: PhonemizerPool) -> None:
    text_side = _text_side(pool, stream_idle_timeout_s=1.0)
    client = _Client()
    sentences = text_side.incremental_sentences(default_registry().default, client.pieces())
    client.send("Hello")  # one word, never finished
    with pytest.raises(StreamIdleError, match="no text arrived for 1 s"):
        await asyncio.wait_for(anext(sentences), NEVER_S)


async def test_waiting_while_the_pipeline_is_busy_is_not_idle(pool: PhonemizerPool) -> None:
    """The idle clock runs only while the text side waits for the client, not while audio is made."""
    text_side = _text_side(pool, stream_idle_timeout_s=1.0)
    client = _Client()
    sentences = text_side.incremental_sentences(default_registry().default, client.pieces())
    client.send("First sentence. Second")
    assert (await _next(sentences)).text == "First sentence."
    await asyncio.sleep(1.5)  # the pipeline speaks the first sentence; the client is waiting for it
    client.send(" sentence.")
    client.half_close()
    assert [sentence.text async for sentence in sentences] == ["Second sentence."]


async def test_pieces_of_spaces_end_in_the_sentence_that_follows_them(pool: PhonemizerPool) -> None:
    text_side = _text_side(pool)
    client = _Client()
    client.send(*[" " * 5000] * 400, "a B")
    client.half_close()
    sentences = [s async for s in text_side.incremental_sentences(default_registry().default, client.pieces())]
    assert [sentence.text for sentence in sentences] == ["a B"]


async def test_a_text_that_crashes_espeak_ng_fails_before_any_audio(pool: PhonemizerPool) -> None:
    unguarded = _text_side(pool, max_word_chars=5000)
    with pytest.raises(PhonemizerCrashError):
        await unguarded.sentences(default_registry().default, "Fine so far. " + "s'" * 220)
    guarded = _text_side(pool)
    sentences = await guarded.sentences(default_registry().default, "Fine so far. " + "s'" * 220)
    assert [sentence async for sentence in sentences]
