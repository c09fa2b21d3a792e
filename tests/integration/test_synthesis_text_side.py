"""The gateway's text side phonemises a request's text a chunk at a time, as the pipeline asks for sentences."""

from __future__ import annotations

from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from libs.synthesis.text_side import TextLimits, TextSide
from libs.text.errors import EmptyTextError, UnreadScriptError
from libs.text.phonemizer_pool import PhonemizerPool
from libs.voice.registry import default_registry

TEXT = "First, a sentence of some length. Then a second one follows it. And a third ends the text."



async def test_first_sentence_comes_before_the_rest_is_phonemised(pool: PhonemizerPool) -> None:
    text_side = TextSide(ThreadPoolExecutor(1), 5000, TextLimits(), pool)
    voice = default_registry().default
    frontend = text_side.frontend(voice)
    phonemised = _counting(pool)
    chunks = frontend.chunks(TEXT)
    assert len(chunks) == 3
    sentences = await text_side.sentences(voice, TEXT)
    assert phonemised == chunks[:1]  # the first chunk comes phonemised with the cut
    first = await anext(sentences)
    assert phonemised == chunks[:1]
    rest = [sentence async for sentence in sentences]
    assert phonemised == chunks
    assert [s.phoneme_ids for s in [first, *rest]] == [s.phoneme_ids for s in frontend.sentences(TEXT)]  # same as all at once


async def test_text_without_words_fails_once_every_chunk_is_seen() -> None:
    text_side = TextSide(ThreadPoolExecutor(1), max_text_chars=5000)  # its own pool, started on first use
    voice = default_registry().default
    try:
        sentences = await text_side.sentences(voice, "♪♪♪ ♪♪♪")  # normalised and cut: not empty yet
        with pytest.raises(EmptyTextError, match="no words"):
            [sentence async for sentence in sentences]
    finally:
        await text_side.close()


def _counting(pool: PhonemizerPool) -> list[str]:
    """Chunks `pool` is asked to phonemise from now on."""
    asked: list[str] = []
    sentences_of = pool.sentences

    async def counting(spec, chunk, *args, **kwargs):  # type: ignore[no-untyped-def]
        asked.append(chunk)
        return await sentences_of(spec, chunk, *args, **kwargs)

    pool.sentences = counting  # type: ignore[method-assign]
    return asked


async def _all(text_side: TextSide, text: str, lexicon: dict[str, tuple[str, ...]] | None = None) -> list[tuple[int, ...]]:
    sentences = await text_side.sentences(default_registry().default, text, lexicon)
    return [sentence.phoneme_ids async for sentence in sentences]


async def test_a_text_spoken_again_is_not_phonemised_again(pool: PhonemizerPool) -> None:
    text_side = TextSide(ThreadPoolExecutor(1), 5000, TextLimits(), pool)
    asked = _counting(pool)
    first = await _all(text_side, TEXT)
    assert len(asked) == 3
    assert await _all(text_side, TEXT) == first
    assert len(asked) == 3  # all three chunks remembered
    # Another text that ends with the same sentence asks only for what is new.
    other = "A new opening line. And a third ends the text."
    new, shared = text_side.frontend(default_registry().default).chunks(other)
    assert shared in asked
    await _all(text_side, other)
    assert asked[3:] == [new]


async def test_a_request_lexicon_bypasses_the_memo_and_the_memo_can_be_off(pool: PhonemizerPool) -> None:
    text_side = TextSide(ThreadPoolExecutor(1), 5000, TextLimits(), pool)
    asked = _counting(pool)
    plain = await _all(text_side, "Say tomato.")
    own = await _all(text_side, "Say tomato.", {"tomato": ("t", "ə", "m", "ɑː", "t", "oʊ")})
    assert own != plain and len(asked) == 2
    assert await _all(text_side, "Say tomato.") == plain and len(asked) == 2  # the lexicon's reading was not kept
    off = TextSide(ThreadPoolExecutor(1), 5000, TextLimits(phoneme_memo_entries=0), pool)
    await _all(off, "Say tomato.")
    await _all(off, "Say tomato.")
    assert len(asked) == 4


async def test_on_sentence_hears_each_sentence_as_it_is_handed_out_whole_streamed_or_ssml(pool: PhonemizerPool) -> None:
    heard: list[tuple[str, str]] = []
    text_side = TextSide(ThreadPoolExecutor(1), 5000, TextLimits(), pool, on_sentence=lambda voice, text: heard.append((voice, text)))
    voice = default_registry().default
    sentences = await text_side.sentences(voice, TEXT)
    assert heard == []  # the first chunk is phonemised, but nothing is handed out yet
    first = await anext(sentences)
    assert heard == [(voice.name, first.text)]
    whole = [first.text, *[sentence.text async for sentence in sentences]]
    assert heard == [(voice.name, text) for text in whole] and len(whole) == 3

    heard.clear()
    streamed = [sentence.text async for sentence in text_side.incremental_sentences(voice, _pieces(TEXT[:20], TEXT[20:]))]
    assert streamed == whole and heard == [(voice.name, text) for text in whole]

    heard.clear()
    ssml = [sentence.text async for sentence in await text_side.ssml_sentences(voice, f"<speak>{TEXT}</speak>")]
    assert ssml == whole and heard == [(voice.name, text) for text in whole]

    quiet = TextSide(ThreadPoolExecutor(1), 5000, TextLimits(), pool)  # no listener: the same sentences
    assert [sentence.text async for sentence in await quiet.sentences(voice, TEXT)] == whole


async def _pieces(*pieces: str) -> AsyncIterator[str]:
    for piece in pieces:
        yield piece


async def test_a_text_only_in_a_script_the_voice_cannot_read_is_refused_naming_it(pool: PhonemizerPool) -> None:
    """The English voice names every ideograph ("Chinese letter") and spells Russian; the text
    processes pass those words over, and a text of nothing else says which scripts it is in."""
    text_side = TextSide(ThreadPoolExecutor(1), 5000, TextLimits(), pool)
    voice = default_registry().default
    try:
        sentences = await text_side.sentences(voice, "你好。Привет, мир!")
        with pytest.raises(UnreadScriptError, match=r"CJK, Cyrillic scripts.*voice of its language") as refused:
            [sentence async for sentence in sentences]
        assert isinstance(refused.value, EmptyTextError)  # INVALID_ARGUMENT, as any text with nothing to say
        mixed = [sentence async for sentence in await text_side.sentences(voice, "Say 你好 to her.")]
        assert [sentence.text for sentence in mixed] == ["Say   to her."]
    finally:
        await text_side.close()


async def test_a_streamed_text_only_in_a_script_the_voice_cannot_read_ends_refused_naming_it(pool: PhonemizerPool) -> None:
    """A whole text of such words is refused before any audio; a streamed one can only know at its
    end, and says so then, where it would otherwise end with no audio and no word why. A stream
    with any word the voice reads, or of punctuation only, ends as before."""
    text_side = TextSide(ThreadPoolExecutor(1), 5000, TextLimits(), pool)
    voice = default_registry().default
    try:
        with pytest.raises(UnreadScriptError, match="CJK script"):
            [sentence async for sentence in text_side.incremental_sentences(voice, _pieces("你好，", "世界。"))]
        mixed = [s.text async for s in text_side.incremental_sentences(voice, _pieces("你好。 ", "Hello there."))]
        assert mixed == ["Hello there."]
        assert [s async for s in text_side.incremental_sentences(voice, _pieces("...", " !"))] == []
    finally:
        await text_side.close()
