"""The text frontend the gateway calls: text in, sentences of phonemes and model input ids out.

Steps: normalise (libs.text.normalize), check the length, cut into sentence chunks
(libs.text.sentences), read each chunk (libs.text.reading: written forms, heteronyms, lexicons and
inline phonemes; off by default, on in the gateway), phonemise it with espeak-ng as piper-tts 1.8.0
does (libs.text.phonemize), and map phonemes to ids with the voice's phoneme-id map
(libs.text.phoneme_ids). Chunks are cut only where espeak-ng ends a sentence anyway, so the
result equals phonemising the whole text at once, and a sentence gets the same ids on its own as
inside a longer text (what makes the per-sentence mel cache hit).

Deliberate differences from Piper, none of which touches ordinary text:
- a sentence with no phonemes at all (a lone closing quote, a paragraph of symbols espeak-ng does
  not read) is dropped; Piper would synthesise "^ _ $" for it;
- a word longer than `max_word_chars` is broken before espeak-ng sees it
  (libs.text.long_words: espeak-ng 1.52 crashes on some such words);
- a sentence over `max_phoneme_ids` ids is cut into several (libs.text.long_sentences), and a
  chunk cut short (the text goes on after it) ends as if a comma followed it.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Final

from libs.text.errors import EmptyTextError, InvalidTextError, TextError, TextTooLongError, UnreadScriptError
from libs.text.espeak import DEFAULT_ESPEAK_VOICE
from libs.text.long_sentences import (
    EAGER_PART_OPENING_AFTER,
    PART_OPENING_AFTER,
    IdBudget,
    chop_phonemes,
    cut_first,
    cut_sentence,
    leading_clauses,
    needs_opening,
    opening_span,
    with_continuation,
)
from libs.text.long_words import DEFAULT_MAX_WORD_CHARS
from libs.text.normalize import check_not_empty, check_text_length, decode_utf8, normalize_text
from libs.text.phoneme_ids import load_espeak_voice, load_phoneme_id_map, phonemes_to_ids
from libs.text.phonemize import PhonemizedSentence, phonemize_sentences
from libs.text.pronounce import PronunciationPlan, check_inline_phonemes, placeholder_count
from libs.text.reading import PIPER_READING, ReadingRules, expand, finish_sentence, prepare
from libs.text.scripts import UnreadWords, foreign_scripts
from libs.text.sentences import DEFAULT_MAX_CHUNK_CHARS, is_cut_short, split_sentences
from libs.text.words import WordSpan, word_spans

_CLOSERS: Final = frozenset("\"')]}>`")
WORDS_REMEMBERED: Final = 4096
"""Words whose sounds on their own a frontend remembers (for word timestamps): the common ones."""

# 5,000 characters is about 800 English words, five to six minutes of speech, and phonemises in
# well under a second. It matches the per-request limit of the large cloud TTS APIs (Google Cloud
# Text-to-Speech: 5,000 bytes); longer texts belong in several requests or a sentence stream,
# where the client hears audio long before a long request would finish.
DEFAULT_MAX_TEXT_CHARS: Final = 5_000
# The acoustic model's cost grows with the square of a sentence's ids (libs.text.long_sentences), and
# first audio waits for the whole first sentence: 400 ids (~200 characters of English) are longer than
# nearly every written sentence, so only run-on text is cut, into pieces a worker plans quickly.
DEFAULT_MAX_PHONEME_IDS: Final = 400

__all__ = [
    "DEFAULT_MAX_PHONEME_IDS",
    "DEFAULT_MAX_TEXT_CHARS",
    "EmptyTextError",
    "InvalidTextError",
    "Sentence",
    "TextError",
    "TextFrontend",
    "TextTooLongError",
    "decode_utf8",
]


def _sentence_start(chunk: str, espeak_start: int) -> int:
    """Where a sentence's text starts: espeak-ng's clause start, after any closing quotes or
    brackets it carried over from the end of the previous sentence ('"Hi." Then' -> 'Then')."""
    index = espeak_start
    while index < len(chunk) and chunk[index] in _CLOSERS:
        index += 1
    if index == espeak_start or (index < len(chunk) and not chunk[index].isspace()):
        return espeak_start
    return index


NO_WORDS: Final = "espeak-ng found no words in it"
"""Why a text that is not empty still has nothing to say."""
LOAD_TEXT: Final = "Ready."
"""What `load` reads: any short text loads espeak-ng and the voice's dictionary."""


def no_words(text: str) -> EmptyTextError:
    """The error for `text` in which espeak-ng found nothing to say, naming the scripts of its
    letters that were passed over (libs.text.scripts) when it has any."""
    scripts = foreign_scripts(text)
    return UnreadScriptError(scripts) if scripts else EmptyTextError(NO_WORDS)


@dataclass(frozen=True)
class Sentence:
    """One sentence ready for the acoustic model."""

    text: str
    """The sentence as written (after normalisation), without surrounding whitespace.

    Every character of the text belongs to exactly one sentence's text, so a sentence with no
    phonemes (a lone closing quote) is folded into its neighbour."""
    phonemes: tuple[str, ...]
    """espeak-ng IPA phonemes, one codepoint each, with the sentence's punctuation marks (of the
    spoken part only, when `spoken_ids` names one)."""
    phoneme_ids: tuple[int, ...]
    """Model input ids: `^ _ p1 _ ... pn _ $` with the voice's phoneme-id map: what is planned."""
    words: tuple[WordSpan, ...] = ()
    """Its written words, each with the phoneme ids that speak it (libs.text.words), counted from
    the first spoken id."""
    rate: float = 1.0
    """Speaking-rate multiple on top of the request's speed (SSML prosody rate)."""
    pause_before_s: float = 0.0
    """Silence before its speech (SSML breaks before a document's first words), in seconds."""
    marks_before: tuple[tuple[str, float], ...] = ()
    """SSML marks in that silence: (name, seconds into it)."""
    pause_after_s: float = 0.0
    """Silence after its speech (SSML breaks), in seconds."""
    marks_after: tuple[tuple[str, float], ...] = ()
    """SSML marks after its speech: (name, seconds into the silence after it)."""
    pinyin: tuple[str, ...] = ()
    """How a Mandarin sentence is read: numbered pinyin as said (tone sandhi applied, neutral tone
    5), one syllable per Chinese character, a word of another script as itself; empty for other
    languages (libs.text.zh)."""
    spoken_ids: tuple[int, int] | None = None
    """The ids of `phoneme_ids` whose frames are spoken, [first, end), or None for all: the two
    parts of a first sentence whose opening is spoken on its own
    (libs.text.long_sentences.opening_span)."""

    @property
    def spoken_id_count(self) -> int:
        """Ids whose frames are spoken (the length of the alignment the acoustic worker sends)."""
        return len(self.phoneme_ids) if self.spoken_ids is None else self.spoken_ids[1] - self.spoken_ids[0]


class TextFrontend:
    """Text to sentences of phonemes and ids for one voice; safe to share between threads."""

    def __init__(
        self,
        phoneme_id_map: Mapping[str, Sequence[int]],
        espeak_voice: str = DEFAULT_ESPEAK_VOICE,
        max_text_chars: int = DEFAULT_MAX_TEXT_CHARS,
        max_chunk_chars: int = DEFAULT_MAX_CHUNK_CHARS,
        max_phoneme_ids: int | None = None,
        max_word_chars: int = DEFAULT_MAX_WORD_CHARS,
        reading: ReadingRules = PIPER_READING,
    ) -> None:
        """`max_phoneme_ids` None (the default) keeps every sentence whole: Piper's sentences, for
        offline tools and the tests that compare with Piper. A server passes its limit (the
        gateway's default is DEFAULT_MAX_PHONEME_IDS). `reading` (default: as Piper reads) says
        whether written forms and heteronyms are read as a person reads them (libs.text.reading)."""
        if max_text_chars < 1 or max_chunk_chars < 1 or max_word_chars < 1:
            raise ValueError("max_text_chars, max_chunk_chars and max_word_chars must be positive")
        self.phoneme_id_map = {phoneme: tuple(ids) for phoneme, ids in phoneme_id_map.items()}
        self.espeak_voice = espeak_voice
        self.max_text_chars = max_text_chars
        self.max_chunk_chars = max_chunk_chars
        self.max_phoneme_ids = max_phoneme_ids
        self.max_word_chars = max_word_chars
        self.reading = reading
        self._budget = IdBudget(self.phoneme_id_map, max_phoneme_ids) if max_phoneme_ids is not None else None
        self._words_alone = functools.lru_cache(maxsize=WORDS_REMEMBERED)(lambda word: tuple(self._phonemes_alone(word)))
        self._unread = UnreadWords.of_voice(espeak_voice, max_word_chars) if reading.written_forms else None

    @classmethod
    def from_voice_config(cls, config_path: Path | str, max_text_chars: int = DEFAULT_MAX_TEXT_CHARS) -> TextFrontend:
        """A frontend for the Piper voice described by `config_path` (its .onnx.json)."""
        return cls(load_phoneme_id_map(config_path), load_espeak_voice(config_path), max_text_chars)

    def sentences(self, text: str) -> list[Sentence]:
        """The sentences of `text`, in order.

        Raises TextTooLongError past `max_text_chars` and EmptyTextError when there is nothing to say.
        """
        chunks = self.chunks(text)
        sentences = [
            sentence
            for index, chunk in enumerate(chunks)
            for sentence in self.chunk_sentences(chunk, continues=index < len(chunks) - 1 and is_cut_short(chunk))
        ]
        if not sentences:
            raise no_words(text)
        return sentences

    def load(self) -> None:
        """Load espeak-ng and this voice's dictionary by reading a short text, so the first text does not wait for them."""
        self.chunk_sentences(LOAD_TEXT)

    def chunks(self, text: str) -> list[str]:
        """`text` normalised, checked and cut into sentence chunks, without phonemising (cheap).

        Raises TextTooLongError past `max_text_chars` (as sent, and again after normalisation, which
        may expand a character into several) and EmptyTextError when the text is empty.
        `chunk_sentences` phonemises each chunk, so a server can start on the first sentence before
        espeak-ng has seen the rest of a long text.
        """
        check_text_length(text, self.max_text_chars)  # before any work on it
        normalized = normalize_text(text)
        check_text_length(normalized, self.max_text_chars)
        check_not_empty(normalized)
        check_inline_phonemes(normalized, self.phoneme_id_map)
        return split_sentences(normalized, self.max_chunk_chars)

    def chunk_sentences(
        self,
        chunk: str,
        continues: bool = False,
        lexicon: Mapping[str, tuple[str, ...]] | None = None,
        first_max_ids: int | None = None,
        eager_opening: bool = False,
    ) -> list[Sentence]:
        """The sentences of one chunk from `chunks` (none when espeak-ng finds no words in it).

        With `continues` (the text goes on after the chunk, which `is_cut_short`: a cut at the
        chunk limit, or streamed text spoken before its sentence ended) the last sentence ends as if
        a comma followed it, so its voice stays up instead of falling as at a full stop.

        The chunk is read by `reading` first (libs.text.reading): written forms become words,
        inline phonemes, `lexicon` words (lower-cased word -> phonemes) and heteronyms get their
        chosen phonemes. A sentence's text is what is spoken (written forms as words); its word
        spans keep the words as written, each over the ids of the words it is spoken as.

        With `first_max_ids`, the chunk's first sentence, when it is long (`needs_opening`), starts
        with its opening as a sentence of its own (libs.text.long_sentences.cut_first): the first
        sentence of a text whose listener waits for its first audio. With `eager_opening` (a stream
        that starts alone on the mesh), a first sentence whose rest can be a part of it opens from
        EAGER_PART_OPENING_AFTER times the opening instead of PART_OPENING_AFTER.
        """
        plan = prepare(chunk, self.reading, lexicon, self._unread)
        chunk = plan.text
        spoken = [
            sentence
            for sentence in phonemize_sentences(chunk, self.espeak_voice, self.max_word_chars)
            if sentence.phonemes
        ]
        if continues and spoken:
            spoken[-1] = _continued(spoken[-1])
        starts = [0] + [_sentence_start(chunk, sentence.text_start) for sentence in spoken[1:]] + [len(chunk)]
        sentences: list[Sentence] = []
        for index, phonemized in enumerate(spoken):
            if self._budget is None:
                pieces = [(starts[index], phonemized.phonemes)]
            else:
                if index == 0 and first_max_ids is not None and first_max_ids < self._budget.max_ids:
                    first = IdBudget(self.phoneme_id_map, first_max_ids)
                    after = EAGER_PART_OPENING_AFTER if eager_opening else PART_OPENING_AFTER
                    opened = self._opened(plan, chunk, phonemized, first, starts[index], starts[index + 1], after)
                    if opened is not None:
                        sentences.extend(opened)
                        continue
                    cut = cut_first(chunk, phonemized, first, self._budget, self._phonemes_alone)
                else:
                    cut = cut_sentence(chunk, phonemized, self._budget, self._phonemes_alone)
                pieces = [(starts[index], cut[0].phonemes)] + [(piece.text_start, piece.phonemes) for piece in cut[1:]]
            ends = [start for start, _ in pieces[1:]] + [starts[index + 1]]
            for (start, phonemes), end in zip(pieces, ends, strict=False):
                sentences.extend(self._finished(plan, chunk[start:end].strip(), phonemes, plan.written(start, end).strip()))
        return sentences

    def _opened(
        self,
        plan: PronunciationPlan,
        chunk: str,
        phonemized: PhonemizedSentence,
        first: IdBudget,
        start: int,
        end: int,
        after: float,
    ) -> list[Sentence] | None:
        """A long first sentence that fits one plan, as its opening and the rest of it planned whole
        (libs.text.long_sentences.opening_span): the opening's plan costs what its clauses cost, and
        the rest keeps the prosody of the whole sentence. None (nothing read yet) when the sentence
        is not long enough for such an opening (`after` times it), does not fit one plan, or its leading
        clauses do not fit `first` or hold a chosen pronunciation: it is then cut as `cut_first` cuts."""
        assert self._budget is not None
        clauses = phonemized.clauses
        weight = first.weight(phonemized.phonemes)
        if not needs_opening(first, weight, after) or self._budget.weight(phonemized.phonemes) > self._budget.budget:
            return None
        taken = leading_clauses(clauses, first)
        head_text = chunk[start : clauses[taken].text_start].strip() if taken else ""
        if not head_text or placeholder_count(head_text):
            return None
        finished = self._finished(plan, chunk[start:end].strip(), phonemized.phonemes, plan.written(start, end).strip())
        head_count = sum(len(clause.phonemes) for clause in clauses[:taken])
        span = opening_span(finished[0].phonemes, head_count, first) if len(finished) == 1 else None
        if span is None:
            return finished
        whole, boundary = finished[0], span.id_index
        opening_ids = tuple(phonemes_to_ids(span.opening_phonemes, self.phoneme_id_map))
        if (
            opening_ids[:boundary] != whole.phoneme_ids[:boundary]
            or not whole.text.startswith(head_text)
            or any(word.first_id < boundary < word.end_id for word in whole.words)
        ):  # fmt: skip
            return finished  # not parted where its clauses end: spoken whole
        opening = Sentence(
            text=head_text,
            phonemes=whole.phonemes[: span.phoneme_index],
            phoneme_ids=opening_ids,
            words=tuple(word for word in whole.words if word.end_id <= boundary),
            spoken_ids=(0, boundary),
        )
        rest = replace(
            whole,
            text=whole.text[len(head_text) :].strip(),
            phonemes=whole.phonemes[span.phoneme_index :],
            words=tuple(WordSpan(word.text, word.first_id - boundary, word.end_id - boundary) for word in whole.words if word.first_id >= boundary),
            spoken_ids=(boundary, len(whole.phoneme_ids)),
        )
        return [opening, rest]

    def _finished(self, plan: PronunciationPlan, text: str, phonemes: Sequence[str], written: str) -> list[Sentence]:
        """A sentence of the plan with its chosen phonemes in place; one they made longer than the id
        budget (the cut weighed the placeholder) is chopped after a word."""
        spoken_text, spoken = finish_sentence(plan, text, phonemes, self._phonemes_alone)
        if self._budget is None or self._budget.weight(spoken) <= self._budget.budget:
            return [self._sentence(spoken_text, spoken, written)]
        *head, last = chop_phonemes(spoken, self._budget)
        return [self._sentence("", part) for part in head] + [self._sentence(spoken_text, last, written)]

    def _sentence(self, text: str, phonemes: Sequence[str], written: str | None = None) -> Sentence:
        """A sentence spoken as `text` (its written forms as words); its word spans are of the words
        as `written` ("$3.50" spans the ids of "three dollars fifty"; a word passed over, none)."""
        written = text if written is None else written
        if self._unread is not None:
            written = self._unread.blanked(written)
        return Sentence(
            text=text,
            phonemes=tuple(phonemes),
            phoneme_ids=tuple(phonemes_to_ids(phonemes, self.phoneme_id_map)),
            words=word_spans(written, phonemes, self.phoneme_id_map, self._word_alone),
        )

    def _word_alone(self, word: str) -> list[str]:
        """What espeak-ng says for one written word on its own, read as the front end reads it
        ("$3.50" is "three dollars fifty"); remembered, as the same words come back."""
        return list(self._words_alone(expand(word, self.reading)))

    def _phonemes_alone(self, text: str) -> list[str]:
        """The phonemes of a part of a sentence, phonemised on its own."""
        return [
            phoneme
            for sentence in phonemize_sentences(text, self.espeak_voice, self.max_word_chars)
            for phoneme in sentence.phonemes
        ]


def _continued(sentence: PhonemizedSentence) -> PhonemizedSentence:
    """`sentence` ending as if a comma followed it."""
    phonemes = with_continuation(sentence.phonemes)
    if len(phonemes) == len(sentence.phonemes) or not sentence.clauses:
        return sentence
    *head, last = sentence.clauses
    last = replace(last, phonemes=with_continuation(last.phonemes))
    return replace(sentence, phonemes=phonemes, clauses=(*head, last))
