"""Text to sentences for any voice, on the gateway's one text thread.

espeak-ng runs as one global instance and is not thread-safe, so every call into a voice's
`TextFrontend` happens on `executor` (one thread). A whole text is normalised, checked and cut into
sentence chunks in one trip, which also phonemises the first chunk: bad text fails before any
audio, and first audio does not wait for espeak-ng to get through the rest. Later chunks are
phonemised when the pipeline asks for their sentences.
"""

from __future__ import annotations

import asyncio
import contextvars
from concurrent.futures import Executor
from typing import AsyncIterator, Callable, TypeVar

from libs.telemetry import tracing
from libs.text.errors import EmptyTextError
from libs.text.frontend import NO_WORDS, Sentence, TextFrontend
from libs.text.sentences import IncrementalSentenceSplitter
from libs.voice.registry import Voice
from libs.wire.errors import InvalidRequestError

_Result = TypeVar("_Result")


class TextSide:
    """Sentences of phonemes and ids from text, for every voice of the registry."""

    def __init__(self, executor: Executor, max_text_chars: int) -> None:
        self._executor = executor
        self.max_text_chars = max_text_chars
        self._frontends: dict[str, TextFrontend] = {}

    def frontend(self, voice: Voice) -> TextFrontend:
        """The frontend of `voice`, built on first use (call on the text thread)."""
        frontend = self._frontends.get(voice.name)
        if frontend is None:
            frontend = TextFrontend(voice.phoneme_id_map(), espeak_voice=voice.espeak_voice, max_text_chars=self.max_text_chars)
            self._frontends[voice.name] = frontend
        return frontend

    async def warm_up(self, voice: Voice) -> None:
        """Load espeak-ng and `voice`'s phoneme map before the first request needs them."""
        await self._in_text_thread(lambda: self.frontend(voice).sentences("Ready."))

    async def sentences(self, voice: Voice, text: str) -> AsyncIterator[Sentence]:
        """The sentences of `text`, each phonemised when it is asked for.

        Raises, before returning, for text that cannot be spoken (empty, too long); a text whose
        every chunk turns out to have no words raises EmptyTextError from the iterator.
        """
        first, later = await self._in_text_thread(self._first_sentences_and_later_chunks, voice, text)
        return self._chunk_sentences(voice, first, later)

    async def incremental_sentences(self, voice: Voice, pieces: AsyncIterator[str]) -> AsyncIterator[Sentence]:
        """Sentences of text that arrives in `pieces`, each as soon as it is complete; the rest when
        the pieces end. A sentence counts as complete once the first character after it arrives."""
        splitter = IncrementalSentenceSplitter()
        async for piece in pieces:
            if len(piece) > self.max_text_chars:
                raise InvalidRequestError(
                    f"a text piece is {len(piece)} characters long; the limit is {self.max_text_chars} per piece"
                )
            for chunk in splitter.feed(piece):
                for sentence in await self._streamed_chunk_sentences(voice, chunk):
                    yield sentence
        for chunk in splitter.flush():
            for sentence in await self._streamed_chunk_sentences(voice, chunk):
                yield sentence

    def _chunks(self, voice: Voice, text: str) -> list[str]:
        """`text` normalised, checked and cut into sentence chunks (on the text thread)."""
        with tracing.step_span(tracing.SPAN_NORMALISE, {"tts.text_chars": len(text)}):
            return self.frontend(voice).chunks(text)

    def _phonemise(self, voice: Voice, chunk: str) -> list[Sentence]:
        """The sentences of one chunk (on the text thread)."""
        with tracing.step_span(tracing.SPAN_PHONEMISE, {tracing.ATTR_VOICE: voice.name}) as span:
            sentences = self.frontend(voice).chunk_sentences(chunk)
            span.set_attribute("tts.sentences", len(sentences))
        return sentences

    def _first_sentences_and_later_chunks(self, voice: Voice, text: str) -> tuple[list[Sentence], list[str]]:
        first, *later = self._chunks(voice, text)
        return self._phonemise(voice, first), later

    async def _chunk_sentences(self, voice: Voice, first: list[Sentence], later: list[str]) -> AsyncIterator[Sentence]:
        spoken = 0
        for sentence in first:
            spoken += 1
            yield sentence
        for chunk in later:
            for sentence in await self._in_text_thread(self._phonemise, voice, chunk):
                spoken += 1
                yield sentence
        if not spoken:
            raise EmptyTextError(NO_WORDS)

    async def _streamed_chunk_sentences(self, voice: Voice, chunk: str) -> list[Sentence]:
        """A streamed chunk's sentences; a chunk with nothing to say (spaces, punctuation) has none."""
        try:
            chunks = await self._in_text_thread(self._chunks, voice, chunk)
        except EmptyTextError:
            return []
        return [sentence for part in chunks for sentence in await self._in_text_thread(self._phonemise, voice, part)]

    async def _in_text_thread(self, function: Callable[..., _Result], *args: object) -> _Result:
        # Run in a copy of this request's context, so the spans join its trace.
        context = contextvars.copy_context()
        return await asyncio.get_running_loop().run_in_executor(self._executor, context.run, function, *args)
