"""Text to sentences for any voice: normalised and cut on the gateway's text thread, phonemised in
the child processes of a `PhonemizerPool`, with bounds on what a client's text may cost.

- espeak-ng never runs in the gateway process: a text that crashes it fails only its own request
  (INVALID_ARGUMENT), and every other stream goes on (libs.text.phonemizer_pool).
- Normalising and cutting are linear in the text and run on the text thread (whole texts and
  streamed chunks) or, for each streamed piece, as one bounded step on the event loop (the
  splitter resumes where the previous piece left it).
- A whole text is normalised, checked and cut into chunks, and the first chunk is phonemised before
  `sentences` returns, so bad text fails before any audio and first audio does not wait for the
  rest; later chunks are phonemised when the pipeline asks for their sentences.
- A streamed text is spoken sentence by sentence as it completes. It never holds more than
  `max_pending_text_chars` without a sentence end, nor waits longer than `sentence_wait_s` for one
  once the audio before it is made (libs.synthesis.in_flight): past either it speaks what it has,
  up to the best break (libs.text.sentences.best_break). A
  stream that sends nothing for `stream_idle_timeout_s` while the gateway waits for text ends with
  INVALID_ARGUMENT (see `StreamIdleError`).
- No sentence is longer than `max_sentence_ids` phoneme ids (libs.text.long_sentences).
- A chunk phonemised once is remembered (`phoneme_memo_entries`, least recently used out): a text
  spoken again (a prompt, a notification, a cached sentence) skips the hop to a text process, which
  is most of what a cached sentence's first audio costs. With a lexicon file, remembered chunks are
  forgotten after `lexicon_check_s`, so a changed file is heard as soon as the processes read it.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping
from concurrent.futures import Executor
from contextlib import aclosing
from dataclasses import dataclass, replace
from typing import Final, TypeVar

from cachetools import LRUCache, TTLCache

from libs.settings.fields import setting
from libs.synthesis.in_flight import SentencesInFlight
from libs.telemetry import tracing
from libs.text.errors import EmptyTextError, TextTooLongError, UnreadScriptError
from libs.text.frontend import DEFAULT_MAX_PHONEME_IDS, Sentence, no_words
from libs.text.frontends import Frontend, frontend_for
from libs.text.lexicon import DEFAULT_LEXICON_CHECK_S, LexiconFile
from libs.text.long_words import DEFAULT_MAX_WORD_CHARS
from libs.text.normalize import has_speakable_characters
from libs.text.phonemizer_pool import FrontendSpec, PhonemizerPool
from libs.text.reading import ReadingRules
from libs.text.scripts import foreign_scripts
from libs.text.sentences import DEFAULT_MAX_CHUNK_CHARS, IncrementalSentenceSplitter, is_cut_short
from libs.text.ssml import MAX_BREAK_MS, SsmlSegment, looks_like_ssml, parse_ssml, spoken_segments
from libs.voice.registry import Voice
from libs.wire.errors import InvalidRequestError
from libs.wire.limits import MAX_PHONEME_IDS

_Result = TypeVar("_Result")
Lexicon = Mapping[str, tuple[str, ...]]
"""A request's pronunciations: lower-cased word -> phonemes."""
SentenceListener = Callable[[str, str], None]
"""Told (voice name, sentence text) of each sentence a text side hands out; it must return at once
(it runs on the event loop, in the request's path)."""

# Two processes on a two-core machine: espeak-ng takes a few milliseconds per sentence, so two keep
# up with far more streams than the workers can speak, and a crash leaves one serving.
DEFAULT_TEXT_PROCESSES: Final = 2
# espeak-ng reads a 1,000-character chunk in well under a second even on a loaded machine; ten
# seconds only catches a process that hangs.
DEFAULT_TEXT_PROCESS_TIMEOUT_S: Final = 10.0
# A language model pauses between tokens for well under a second; two seconds without the end of
# a sentence means it stalled, and the listener would rather hear what has arrived.
DEFAULT_SENTENCE_WAIT_S: Final = 2.0
DEFAULT_STREAM_IDLE_TIMEOUT_S: Final = 30.0
# A chunk is at most a few hundred characters and its sentences a few KB: 4,096 of them are a few
# MB, and hold the prompts and notifications a deployment repeats.
DEFAULT_PHONEME_MEMO_ENTRIES: Final = 4096
MAX_PAUSE_S: Final = MAX_BREAK_MS / 1000
"""Longest silence after one sentence, however many SSML breaks follow it."""


@dataclass(frozen=True)
class TextLimits:
    """How the gateway reads text: the processes that run espeak-ng, and what one text may cost."""

    text_processes: int = setting(
        DEFAULT_TEXT_PROCESSES, env="TTS_TEXT_PROCESSES", unit="count", minimum=1, maximum=64,
        doc="child processes that run espeak-ng; a text that crashes one fails only its own request",
    )  # fmt: skip
    text_process_timeout_s: float = setting(
        DEFAULT_TEXT_PROCESS_TIMEOUT_S, env="TTS_TEXT_PROCESS_TIMEOUT_S", unit="s", minimum=0.1, maximum=600,
        doc="longest espeak-ng may take on one chunk of text before its process is replaced and the request fails",
    )  # fmt: skip
    max_sentence_ids: int = setting(
        DEFAULT_MAX_PHONEME_IDS, env="TTS_MAX_SENTENCE_IDS", unit="phoneme ids", minimum=64, maximum=MAX_PHONEME_IDS,
        doc="most phoneme ids in one model call; a longer sentence is spoken as several, cut at a clause, a conjunction or a space",
    )  # fmt: skip
    max_word_chars: int = setting(
        DEFAULT_MAX_WORD_CHARS, env="TTS_MAX_WORD_CHARS", unit="characters", minimum=16, maximum=5_000,
        doc="longest word handed to espeak-ng; a longer one is broken with a space (espeak-ng 1.52 crashes on some past ~130)",
    )  # fmt: skip
    max_pending_text_chars: int = setting(
        DEFAULT_MAX_CHUNK_CHARS, env="TTS_MAX_PENDING_TEXT_CHARS", unit="characters", minimum=50, maximum=5_000,
        doc="longest text held without a sentence end (streamed or whole); past it the text is spoken up to its best break",
    )  # fmt: skip
    sentence_wait_s: float = setting(
        DEFAULT_SENTENCE_WAIT_S, env="TTS_SENTENCE_WAIT_S", unit="s", minimum=0.05, maximum=600,
        doc="longest streamed text waits for its sentence to end once the audio before it is made; then what has arrived is spoken up to its best break",
    )  # fmt: skip
    stream_idle_timeout_s: float = setting(
        DEFAULT_STREAM_IDLE_TIMEOUT_S, env="TTS_STREAM_IDLE_TIMEOUT_S", unit="s", minimum=1, maximum=3600,
        doc="time a StreamingSynthesize stream may send nothing while the gateway waits for its text; then it ends with INVALID_ARGUMENT",
    )  # fmt: skip
    read_written_forms: bool = setting(
        True, env="TTS_READ_WRITTEN_FORMS",
        doc="read the text as a person does before espeak-ng reads it: numbers, money, dates, times, units, abbreviations, ... as words, lists and tables item by item, words in scripts the voice can only spell passed over (false: as Piper reads it)",
    )  # fmt: skip
    read_heteronyms: bool = setting(
        True, env="TTS_READ_HETERONYMS",
        doc="choose the reading of heteronyms (read, lead, record, minute, ...) from the words around them",
    )  # fmt: skip
    lexicon_file: str = setting(
        "", env="TTS_LEXICON_FILE",
        doc="file of word and IPA lines every request is spoken with, read again when it changes; a bad entry stops the start (empty: none)",
    )  # fmt: skip
    lexicon_check_s: float = setting(
        DEFAULT_LEXICON_CHECK_S, env="TTS_LEXICON_CHECK_S", unit="s", minimum=0.1, maximum=3600,
        doc="how often the text processes look whether --lexicon-file changed",
    )  # fmt: skip
    phoneme_memo_entries: int = setting(
        DEFAULT_PHONEME_MEMO_ENTRIES, env="TTS_PHONEME_MEMO_ENTRIES", unit="count", minimum=0, maximum=1_000_000,
        doc="text chunks whose sentences the gateway remembers, so a text spoken again skips espeak-ng (0: none)",
    )  # fmt: skip


class StreamIdleError(InvalidRequestError):
    """A stream sent no text for `stream_idle_timeout_s` while the gateway waited for it.

    INVALID_ARGUMENT rather than DEADLINE_EXCEEDED: the deadline is the client's own and has not
    passed; the stream broke the protocol by staying open with nothing to say, and retrying it as it
    is would only stall again. The message says how long the gateway waited and what to do.
    """

    def __init__(self, idle_s: float) -> None:
        super().__init__(
            f"no text arrived for {idle_s:g} s; a StreamingSynthesize stream must keep sending text, "
            "and half-close as soon as it has sent the last of it"
        )


class TextFlush(str):
    """A piece of streamed text that asks for the text held to be spoken now, without waiting for the
    end of its sentence (a WebSocket client's `flush`). It carries no text. Once the held text is cut
    into sentences, `reached` is told how many sentences the stream has handed out with them, so a
    caller knows which sentence's last audio completes the flush."""

    reached: Callable[[int], None]

    def __new__(cls, reached: Callable[[int], None]) -> TextFlush:
        flush = super().__new__(cls, "")
        flush.reached = reached
        return flush


class TextSide:
    """Sentences of phonemes and ids from text, for every voice of the registry."""

    def __init__(
        self,
        executor: Executor,
        max_text_chars: int,
        limits: TextLimits = TextLimits(),
        pool: PhonemizerPool | None = None,
        on_sentence: SentenceListener | None = None,
    ) -> None:
        """`pool` None: a pool of `limits.text_processes` of its own, started on first use.
        `on_sentence` hears of every sentence `sentences` and `incremental_sentences` hand out (the
        live streams' text side tells prewarming's promotion what listeners ask for)."""
        self._executor = executor
        self._on_sentence = on_sentence
        self._pool = pool if pool is not None else PhonemizerPool(limits.text_processes, limits.text_process_timeout_s)
        self.max_text_chars = max_text_chars
        self.limits = limits
        self._frontends: dict[str, Frontend] = {}
        self._specs: dict[str, FrontendSpec] = {}
        self._memo = _phoneme_memo(limits)

    def frontend(self, voice: Voice) -> Frontend:
        """The frontend of `voice` that normalises and cuts its text here (its espeak-ng half runs in
        the pool's processes)."""
        frontend = self._frontends.get(voice.name)
        if frontend is None:
            frontend = frontend_for(  # Mandarin or espeak-ng, by the voice's espeak-ng voice (libs.text.frontends)
                voice.phoneme_id_map(),
                espeak_voice=voice.espeak_voice,
                max_text_chars=self.max_text_chars,
                max_chunk_chars=self.limits.max_pending_text_chars,
                max_phoneme_ids=self.limits.max_sentence_ids,
                max_word_chars=self.limits.max_word_chars,
                reading=ReadingRules(written_forms=self.limits.read_written_forms, heteronyms=self.limits.read_heteronyms),
            )
            self._frontends[voice.name] = frontend
        return frontend

    def spec(self, voice: Voice) -> FrontendSpec:
        """What the pool's processes need to build `voice`'s frontend (the lexicon file is read here
        first: a bad entry fails the warm-up, so the gateway does not start with it)."""
        spec = self._specs.get(voice.name)
        if spec is None:
            frontend = self.frontend(voice)
            if self.limits.lexicon_file:
                LexiconFile(self.limits.lexicon_file, frontend.phoneme_id_map)
            spec = FrontendSpec(
                voice=voice.name,
                phoneme_id_map=frontend.phoneme_id_map,
                espeak_voice=frontend.espeak_voice,
                max_phoneme_ids=frontend.max_phoneme_ids,
                max_word_chars=frontend.max_word_chars,
                read_written_forms=self.limits.read_written_forms,
                read_heteronyms=self.limits.read_heteronyms,
                lexicon_file=self.limits.lexicon_file,
                lexicon_check_s=self.limits.lexicon_check_s,
            )
            self._specs[voice.name] = spec
        return spec

    async def close(self) -> None:
        """Stop the pool's processes."""
        await self._pool.close()

    async def warm_up(self, voice: Voice) -> None:
        """Load espeak-ng and `voice`'s frontend in every process of the pool before the first request."""
        await self._pool.on_every_child(self.spec(voice))

    async def sentences(
        self, voice: Voice, text: str, lexicon: Lexicon | None = None, first_max_ids: int | None = None, eager_opening: bool = False
    ) -> AsyncIterator[Sentence]:
        """The sentences of `text`, each phonemised when it is asked for; `lexicon` is the request's
        (checked: `SynthesisOptions.lexicon`); with `first_max_ids`, the first sentence's opening is
        spoken as a sentence of its own when the sentence is longer (its listener waits for it), and
        with `eager_opening` (a stream that starts alone) sooner (`TextFrontend.chunk_sentences`).

        Raises, before returning, for text that cannot be spoken (empty, too long, crashing
        espeak-ng); a text whose every chunk turns out to have no words raises EmptyTextError from
        the iterator.
        """
        chunks = await self._in_text_thread(self._chunks, voice, text)
        continues = len(chunks) > 1 and is_cut_short(chunks[0])
        first = await self._phonemise(voice, chunks[0], continues, lexicon, first_max_ids, eager_opening)
        return self._told(voice, self._chunk_sentences(voice, first, chunks, lexicon))

    async def ssml_sentences(
        self, voice: Voice, document: str, lexicon: Lexicon | None = None, first_max_ids: int | None = None, eager_opening: bool = False
    ) -> AsyncIterator[Sentence]:
        """The sentences of an SSML document (libs.text.ssml), each carrying its rate, the pause
        after it and the marks at its end. Raises, before returning, for a document outside the
        subset (SsmlError naming the element) and for its first segment's text as `sentences` does
        (`first_max_ids` and `eager_opening` as there, for its first segment)."""
        if len(document) > self.max_text_chars:
            raise TextTooLongError(len(document), self.max_text_chars)
        if not looks_like_ssml(document):  # the request's flag said SSML: the root may be left out
            document = f"<speak>{document}</speak>"
        segments = await self._in_text_thread(parse_ssml, document)
        first = await self.sentences(voice, spoken_segments(segments)[0].text, lexicon, first_max_ids, eager_opening)
        return self._ssml_sentences(voice, segments, first, lexicon)

    async def _ssml_sentences(
        self, voice: Voice, segments: list[SsmlSegment], first: AsyncIterator[Sentence], lexicon: Lexicon | None
    ) -> AsyncIterator[Sentence]:
        held: Sentence | None = None  # the latest sentence: the silence and marks that follow go on it
        leading_s, leading_marks = 0.0, ()  # silence and marks before the first words go on the first sentence
        started = False
        for segment in segments:
            if has_speakable_characters(segment.text):
                sentences = first if not started else await self.sentences(voice, segment.text, lexicon)
                started = True
                async for sentence in sentences:
                    if held is not None:
                        yield held
                    elif leading_s or leading_marks:
                        sentence = replace(sentence, pause_before_s=leading_s, marks_before=leading_marks)
                    held = sentence if segment.rate == 1.0 else replace(sentence, rate=segment.rate)
            pause_ms, marks = segment.pause_and_marks()
            if held is None:
                leading_marks += tuple((name, leading_s + into_ms / 1000) for name, into_ms in marks)
                leading_s = min(MAX_PAUSE_S, leading_s + pause_ms / 1000)
            elif pause_ms or marks:
                held = replace(
                    held,
                    marks_after=held.marks_after + tuple((name, held.pause_after_s + into_ms / 1000) for name, into_ms in marks),
                    pause_after_s=min(MAX_PAUSE_S, held.pause_after_s + pause_ms / 1000),
                )
        if held is not None:
            yield held

    def incremental_sentences(
        self,
        voice: Voice,
        pieces: AsyncIterator[str],
        lexicon: Lexicon | None = None,
        first_max_ids: int | None = None,
        in_flight: SentencesInFlight | None = None,
    ) -> AsyncIterator[Sentence]:
        """Sentences of text that arrives in `pieces`, each as soon as it is complete; the rest when
        the pieces end. A sentence counts as complete once the first character after it arrives, or
        when the text is held too long (see the module docstring), or at a `TextFlush` piece. With
        `first_max_ids`, the first sentence's opening is spoken as a sentence of its own when the
        sentence is longer. With `in_flight` (the pipeline's count of the sentences it is making),
        held text waits for its end until that audio is made, however long that takes."""
        return self._told(voice, self._incremental_sentences(voice, pieces, lexicon, first_max_ids, in_flight))

    def _told(self, voice: Voice, sentences: AsyncGenerator[Sentence, None]) -> AsyncIterator[Sentence]:
        """`sentences`, each told to `on_sentence` (if any) as it is handed out."""
        return sentences if self._on_sentence is None else _telling(self._on_sentence, voice, sentences)

    async def _incremental_sentences(
        self,
        voice: Voice,
        pieces: AsyncIterator[str],
        lexicon: Lexicon | None,
        first_max_ids: int | None = None,
        in_flight: SentencesInFlight | None = None,
    ) -> AsyncGenerator[Sentence, None]:
        in_flight = in_flight or SentencesInFlight()  # none given: nothing is ever being made
        opening = [first_max_ids]  # for the stream's first sentence only
        splitter = IncrementalSentenceSplitter(self.limits.max_pending_text_chars)
        clocks = _StreamClocks(self.limits)
        reader = _PieceReader(pieces)
        loop = asyncio.get_running_loop()
        handed = 0  # sentences handed out so far
        unread_scripts: dict[str, None] = {}  # scripts of letters in chunks that gave no sentence, in order
        try:
            while True:
                asked_s = loop.time()
                # Held text waits for its end without a clock while the audio before it is made (cut
                # then, it could not be heard sooner); its wait starts once that audio is made.
                hold = in_flight.made_all if in_flight.busy and clocks.held else None
                try:
                    piece = await reader.next(clocks.idle_left_s if hold else clocks.timeout_s(asked_s), wake=hold)
                except TimeoutError:
                    clocks.waited(loop.time() - asked_s)
                    if hold is not None and hold.is_set():
                        clocks.made(loop.time())
                    elif clocks.overdue(loop.time()) and not in_flight.busy:
                        chunk = splitter.cut_pending()  # None: one word so far, which may go on
                        clocks.holding(chunk is not None and bool(splitter.pending_text.strip()), loop.time(), True)
                        if chunk is not None:
                            first = opening.pop() if opening else None
                            for sentence in await self._streamed_chunk_sentences(voice, chunk, is_cut_short(chunk), lexicon, first, unread_scripts):
                                handed += 1
                                yield sentence
                    elif clocks.idle:
                        raise StreamIdleError(self.limits.stream_idle_timeout_s) from None
                    continue
                if hold is not None and hold.is_set():  # a piece came with the news that the audio is made
                    clocks.made(loop.time())
                clocks.heard()
                if piece is None:
                    break
                if isinstance(piece, TextFlush):  # speak what is held now, and say when it is handed out
                    flushed = await self._flushed_sentences(voice, splitter.flush(), lexicon, opening, unread_scripts)
                    clocks.holding(False, loop.time(), True)
                    piece.reached(handed + len(flushed))
                    for sentence in flushed:
                        handed += 1
                        yield sentence
                    continue
                if len(piece) > self.max_text_chars:
                    raise InvalidRequestError(
                        f"a text piece is {len(piece)} characters long; the limit is {self.max_text_chars} per piece"
                    )
                if not splitter.pending_text.strip() and looks_like_ssml(piece):
                    raise InvalidRequestError(
                        "StreamingSynthesize takes plain text; send an SSML document whole, with Synthesize"
                    )
                chunks = splitter.feed(piece)  # one bounded step: linear in the piece
                clocks.holding(bool(splitter.pending_text.strip()), loop.time(), bool(chunks))
                for chunk in chunks:
                    first = opening.pop() if opening else None
                    for sentence in await self._streamed_chunk_sentences(voice, chunk, is_cut_short(chunk), lexicon, first, unread_scripts):
                        handed += 1
                        yield sentence
            for sentence in await self._flushed_sentences(voice, splitter.flush(), lexicon, opening, unread_scripts):
                handed += 1
                yield sentence
            if not handed and unread_scripts:  # the whole stream was in scripts the voice cannot read
                raise UnreadScriptError(list(unread_scripts))
        finally:
            reader.close()

    async def _flushed_sentences(
        self, voice: Voice, chunks: list[str], lexicon: Lexicon | None, opening: list[int | None], unread: dict[str, None] | None = None
    ) -> list[Sentence]:
        """The sentences of the chunks a streamed text's splitter gives when it is flushed (`opening`:
        the first sentence's opening budget while no sentence has been made, then empty; `unread`
        gets the scripts of the letters of chunks that gave none)."""
        sentences: list[Sentence] = []
        for index, chunk in enumerate(chunks):
            continues = index < len(chunks) - 1 and is_cut_short(chunk)
            first = opening.pop() if opening else None
            sentences.extend(await self._streamed_chunk_sentences(voice, chunk, continues, lexicon, first, unread))
        return sentences

    def _chunks(self, voice: Voice, text: str) -> list[str]:
        """`text` normalised, checked and cut into sentence chunks (on the text thread)."""
        with tracing.step_span(tracing.SPAN_NORMALISE, {"tts.text_chars": len(text)}):
            return self.frontend(voice).chunks(text)

    async def _phonemise(
        self,
        voice: Voice,
        chunk: str,
        continues: bool,
        lexicon: Lexicon | None = None,
        first_max_ids: int | None = None,
        eager_opening: bool = False,
    ) -> list[Sentence]:
        """The sentences of one chunk, remembered or from a process of the pool. A request's own
        lexicon changes them, so those are neither looked up nor kept."""
        key = (voice.name, chunk, continues, first_max_ids, eager_opening and first_max_ids is not None)
        remembered = self._memo.get(key) if self._memo is not None and not lexicon else None
        if remembered is not None:
            return list(remembered)
        with tracing.step_span(tracing.SPAN_PHONEMISE, {tracing.ATTR_VOICE: voice.name}) as span:
            sentences = await self._pool.sentences(self.spec(voice), chunk, continues, lexicon, first_max_ids, eager_opening)
            span.set_attribute("tts.sentences", len(sentences))
        if self._memo is not None and not lexicon:
            self._memo[key] = tuple(sentences)  # Sentence is frozen: shared safely between requests
        return sentences

    async def _chunk_sentences(
        self, voice: Voice, first: list[Sentence], chunks: list[str], lexicon: Lexicon | None = None
    ) -> AsyncGenerator[Sentence, None]:
        spoken = 0
        for sentence in first:
            spoken += 1
            yield sentence
        for index in range(1, len(chunks)):
            continues = index < len(chunks) - 1 and is_cut_short(chunks[index])
            for sentence in await self._phonemise(voice, chunks[index], continues, lexicon):
                spoken += 1
                yield sentence
        if not spoken:
            raise no_words(" ".join(chunks))

    async def _streamed_chunk_sentences(
        self,
        voice: Voice,
        chunk: str,
        continues: bool,
        lexicon: Lexicon | None = None,
        first_max_ids: int | None = None,
        unread: dict[str, None] | None = None,
    ) -> list[Sentence]:
        """A streamed chunk's sentences; a chunk with nothing to say (spaces, punctuation) has none.
        With `continues` the text goes on after the chunk (see `TextFrontend.chunk_sentences`); with
        `first_max_ids`, its first sentence's opening is cut to that many ids (the stream's first).
        `unread` gets the scripts of the letters of a chunk that has none (libs.text.scripts)."""
        try:
            parts = await self._in_text_thread(self._chunks, voice, chunk)
        except EmptyTextError:
            return []
        sentences: list[Sentence] = []
        for index, part in enumerate(parts):
            last = index == len(parts) - 1
            opening = first_max_ids if not sentences else None
            sentences.extend(await self._phonemise(voice, part, continues if last else is_cut_short(part), lexicon, opening))
        if not sentences and unread is not None:
            unread.update(dict.fromkeys(foreign_scripts(chunk)))
        return sentences

    async def _in_text_thread(self, function: Callable[..., _Result], *args: object) -> _Result:
        # Run in a copy of this request's context, so the spans join its trace.
        context = contextvars.copy_context()
        return await asyncio.get_running_loop().run_in_executor(self._executor, context.run, function, *args)


async def _telling(listener: SentenceListener, voice: Voice, sentences: AsyncGenerator[Sentence, None]) -> AsyncIterator[Sentence]:
    async with aclosing(sentences):  # its own cleanup (a stream's reader task) runs when this one closes
        async for sentence in sentences:
            listener(voice.name, sentence.text)
            yield sentence


def _phoneme_memo(limits: TextLimits) -> LRUCache[tuple[str, str, bool], tuple[Sentence, ...]] | None:
    """Where chunks' sentences are remembered (None: nowhere); for no longer than the text processes
    take to notice a changed lexicon file, when there is one."""
    if not limits.phoneme_memo_entries:
        return None
    if limits.lexicon_file:
        return TTLCache(limits.phoneme_memo_entries, ttl=limits.lexicon_check_s)
    return LRUCache(limits.phoneme_memo_entries)


class _StreamClocks:
    """A stream's two clocks: how long the client has sent nothing while the text side waited for
    it (time spent making audio does not count), and since when the text held has waited for the
    end of its sentence."""

    def __init__(self, limits: TextLimits) -> None:
        self._limits = limits
        self._idle_left_s = limits.stream_idle_timeout_s
        self._waiting_since: float | None = None

    def timeout_s(self, now: float) -> float:
        """How long to wait for the next piece before one of the clocks runs out."""
        if self._waiting_since is None:
            return self._idle_left_s
        return max(0.0, min(self._idle_left_s, self._waiting_since + self._limits.sentence_wait_s - now))

    @property
    def idle_left_s(self) -> float:
        """How long the client may still send nothing."""
        return max(0.0, self._idle_left_s)

    def waited(self, seconds: float) -> None:
        self._idle_left_s -= seconds

    def heard(self) -> None:
        self._idle_left_s = self._limits.stream_idle_timeout_s

    def holding(self, text_held: bool, now: float, new_sentence: bool) -> None:
        """After the text held changed: whether it has words, and whether its sentence is a new one."""
        if not text_held:
            self._waiting_since = None
        elif new_sentence or self._waiting_since is None:
            self._waiting_since = now

    @property
    def held(self) -> bool:
        """Whether text is held waiting for the end of its sentence."""
        return self._waiting_since is not None

    def made(self, now: float) -> None:
        """The audio before the text held is made: its wait for its sentence's end starts now."""
        if self._waiting_since is not None:
            self._waiting_since = max(self._waiting_since, now)

    def overdue(self, now: float) -> bool:
        """Whether the text held has waited `sentence_wait_s` for its sentence to end."""
        return self._waiting_since is not None and now >= self._waiting_since + self._limits.sentence_wait_s

    @property
    def idle(self) -> bool:
        """Whether the client has been silent for `stream_idle_timeout_s`."""
        return self._idle_left_s <= 0


class _PieceReader:
    """The client's text pieces, read by a task of their own: waiting for the next one can then time
    out without ending the stream they come from (cancelling an async generator's `__anext__` would
    close it). It reads one piece ahead at most, so a fast client is held back by gRPC's flow
    control, not buffered here."""

    def __init__(self, pieces: AsyncIterator[str]) -> None:
        self._queue: asyncio.Queue[str | None | BaseException] = asyncio.Queue(maxsize=1)
        self._task = asyncio.get_running_loop().create_task(self._read(pieces))

    async def _read(self, pieces: AsyncIterator[str]) -> None:
        try:
            async for piece in pieces:
                await self._queue.put(piece)
        except Exception as error:  # a malformed message: handed to the reader to raise
            await self._queue.put(error)
            return
        await self._queue.put(None)

    async def next(self, timeout_s: float, wake: asyncio.Event | None = None) -> str | None:
        """The next piece, None at the end of the pieces; TimeoutError after `timeout_s`, or as soon
        as `wake` is set (no piece is taken then)."""
        if wake is None:
            async with asyncio.timeout(timeout_s):
                item = await self._queue.get()
        else:
            item = await self._get_unless(wake, timeout_s)
        if isinstance(item, BaseException):
            raise item
        return item

    async def _get_unless(self, wake: asyncio.Event, timeout_s: float) -> str | None | BaseException:
        getting = asyncio.ensure_future(self._queue.get())
        woken = asyncio.ensure_future(wake.wait())
        try:
            await asyncio.wait((getting, woken), timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
        finally:
            woken.cancel()
            if not getting.done():
                getting.cancel()
        if getting.done() and not getting.cancelled():
            return getting.result()  # a piece that came with the wake is not lost
        raise TimeoutError

    def close(self) -> None:
        """Stop reading (the stream is over for this side)."""
        self._task.cancel()
