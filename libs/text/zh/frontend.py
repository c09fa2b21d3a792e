"""The Mandarin front end: the same interface as libs.text.frontend.TextFrontend, for a voice whose
espeak-ng voice is `cmn` (Piper's zh_CN voices).

Per chunk (one sentence, libs.text.zh.sentences):
1. inline phonemes `[[ ... ]]` are kept as they are (one word each);
2. numbers, dates, money, units and percentages become Chinese words (libs.text.zh.numbers; with
   `reading.written_forms`, as the gateway reads; off, digits go to espeak-ng as Piper does);
3. each run of Chinese characters is read in pinyin from its context (libs.text.zh.reading), its
   tones said with sandhi (libs.text.zh.sandhi), and written as espeak-ng's cmn phonemes, one
   prosodic word at a time (libs.text.zh.syllables);
4. a run of other script (English words, letters) goes to espeak-ng's cmn voice, which reads it with
   its English voice, as it did for the voice's training text;
5. a lexicon entry (a request's or the server's) replaces the phonemes of the word it names.

Words are separated by a word break (" "). Chinese punctuation writes no phoneme: espeak-ng's cmn
voice, which made the voices' training phonemes, drops it (Piper's own reading of "你好，世界！" has
no "," and no "!"), so a voice has never learnt those ids after Chinese; a clause mark is a word
break and a sentence end is the end of the sentence.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Final

from libs.text.frontend import DEFAULT_MAX_TEXT_CHARS, Sentence, no_words
from libs.text.long_sentences import IdBudget, needs_opening
from libs.text.long_words import DEFAULT_MAX_WORD_CHARS
from libs.text.normalize import check_not_empty, check_text_length, normalize_text
from libs.text.phoneme_ids import PAD, phonemes_to_ids
from libs.text.phonemize import phonemize_sentences
from libs.text.pronounce import block_phonemes, check_inline_phonemes, split_inline
from libs.text.reading import PIPER_READING, ReadingRules
from libs.text.scripts import UnreadWords, is_foreign_letter
from libs.text.sentences import DEFAULT_MAX_CHUNK_CHARS
from libs.text.words import WordSpan
from libs.text.zh.numbers import number_replacements
from libs.text.zh.reading import HAN, read_run
from libs.text.zh.sandhi import spoken_tones
from libs.text.zh.sentences import CLAUSE_MARKS, split_zh_sentences
from libs.text.zh.syllables import word_ipa

MANDARIN_ESPEAK_VOICE: Final = "cmn"
_LOAD_TEXT: Final = "他在银行工作，123。"
"""Read by `load`: Han characters (jieba's dictionary, pypinyin's phrases), a number and Latin-free
punctuation touch every dictionary the reading loads on first use."""
WORD_BREAK: Final = " "
# Runs the front end hands to espeak-ng: letters and digits of other scripts with the marks inside
# words ("don't", "e-mail", "3.5").
_LETTER: Final = r"[^\W_\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]"
_OTHER_SCRIPT: Final = re.compile(f"{_LETTER}(?:{_LETTER}|['.\\-+&](?={_LETTER}))*")
_CLAUSE_BREAK: Final = re.compile(r"[，、；：,;:—–\-]")


@dataclass(frozen=True)
class SpokenWord:
    """One word of a sentence as it is spoken."""

    written: str
    """The word as written (a number keeps its digits)."""
    spoken: str
    """What is said (the number's words)."""
    phonemes: tuple[str, ...]
    """Its phonemes, one codepoint each, no word break."""
    pinyin: tuple[str, ...] = ()
    """Numbered pinyin as said, one per Chinese character (none for other scripts)."""
    clause_end: bool = False
    """A clause mark follows it (a good place to cut a sentence that is too long)."""
    trailing: str = ""
    """The spaces and punctuation written after it (kept in the sentence's text)."""
    citation: tuple[str, ...] = ()
    """Numbered pinyin before tone sandhi (each character's dictionary tone in its context)."""


class MandarinFrontend:
    """Chinese text to sentences of phonemes and ids for one voice; the interface of TextFrontend."""

    def __init__(
        self,
        phoneme_id_map: Mapping[str, Sequence[int]],
        espeak_voice: str = MANDARIN_ESPEAK_VOICE,
        max_text_chars: int = DEFAULT_MAX_TEXT_CHARS,
        max_chunk_chars: int = DEFAULT_MAX_CHUNK_CHARS,
        max_phoneme_ids: int | None = None,
        max_word_chars: int = DEFAULT_MAX_WORD_CHARS,
        reading: ReadingRules = PIPER_READING,
    ) -> None:
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
        self._unread = UnreadWords.of_voice(espeak_voice, max_word_chars) if reading.written_forms else None
        """Words of other scripts espeak-ng would name letter by letter, passed over (libs.text.scripts)."""

    def sentences(self, text: str) -> list[Sentence]:
        """The sentences of `text`, in order (TextTooLongError, EmptyTextError as TextFrontend)."""
        sentences = [sentence for chunk in self.chunks(text) for sentence in self.chunk_sentences(chunk)]
        if not sentences:
            raise no_words(text)
        return sentences

    def load(self) -> None:
        """Load jieba's and pypinyin's dictionaries (about 1.4 s on first use) by reading a short text."""
        self.chunk_sentences(_LOAD_TEXT)

    def chunks(self, text: str) -> list[str]:
        """`text` normalised, checked and cut into sentences, without reading it (cheap)."""
        check_text_length(text, self.max_text_chars)
        normalized = normalize_text(text)
        check_text_length(normalized, self.max_text_chars)
        check_not_empty(normalized)
        check_inline_phonemes(normalized, self.phoneme_id_map)
        return split_zh_sentences(normalized, self.max_chunk_chars)

    def chunk_sentences(
        self,
        chunk: str,
        continues: bool = False,
        lexicon: Mapping[str, tuple[str, ...]] | None = None,
        first_max_ids: int | None = None,
        eager_opening: bool = False,
    ) -> list[Sentence]:
        """The sentences of one chunk (more than one only when it is over the id budget).

        `continues` changes nothing: Chinese punctuation writes no phoneme (see the module note).
        `lexicon` (lower-cased word -> phonemes, over `reading.lexicon`) replaces a word's phonemes.
        With `first_max_ids`, a long first sentence (`needs_opening`) is cut to that many ids (after a
        clause mark in reach, else after a word): its listener waits for its first audio.
        `eager_opening` changes nothing: this front end has no opening whose rest is a part of the sentence."""
        merged = dict(self.reading.lexicon)
        if lexicon:
            merged.update(lexicon)
        words = self.spoken_words(chunk, merged)
        if not any(word.phonemes for word in words):
            return []
        first = IdBudget(self.phoneme_id_map, first_max_ids) if self._budget is not None and first_max_ids else None
        if first is not None and not needs_opening(first, sum(self._word_weight(word) for word in words)):
            first = None
        return [self._sentence(part) for part in self._parts(words, first)]

    def spoken_words(self, chunk: str, lexicon: Mapping[str, tuple[str, ...]] | None = None) -> list[SpokenWord]:
        """The words of a chunk as they are spoken, with their phonemes and pinyin."""
        words: list[SpokenWord] = []
        for part, is_block in split_inline(chunk):
            if is_block:
                words.append(SpokenWord(part, part, block_phonemes(part)))
                continue
            for written, spoken in self._written_and_spoken(part):
                self._add_words(words, written, spoken, lexicon or {})
        return words

    def _written_and_spoken(self, text: str) -> list[tuple[str, str]]:
        """`text` as (written, spoken) stretches: a number is one stretch with its words."""
        if not self.reading.written_forms:
            return [(text, text)]
        stretches: list[tuple[str, str]] = []
        position = 0
        for start, end, words in number_replacements(text):
            if start > position:
                stretches.append((text[position:start], text[position:start]))
            stretches.append((text[start:end], words))
            position = end
        if position < len(text):
            stretches.append((text[position:], text[position:]))
        return stretches

    def _add_words(self, words: list[SpokenWord], written: str, spoken: str, lexicon: Mapping[str, tuple[str, ...]]) -> None:
        """Add the spoken words of one stretch to `words`; a number (written differs from spoken) is
        one word. Punctuation and spaces go on the word before them."""
        first = len(words)
        pieces = list(_pieces(spoken))
        for index, (kind, text) in enumerate(pieces):
            if kind == "han":
                after = pieces[index + 1][1] if index + 1 < len(pieces) else ""
                for word in read_run(text, after):
                    entry = lexicon.get(word.text)
                    tones = spoken_tones(word.text, word.syllables, _is_dictionary_word)
                    syllables = [syllable for syllable in tones if syllable]
                    phonemes = tuple(entry) if entry else _symbols(word_ipa(syllables)) if syllables else ()
                    words.append(
                        SpokenWord(
                            word.text, word.text, phonemes, tuple(syllable or "?" for syllable in tones),
                            citation=tuple(syllable or "?" for syllable in word.syllables),
                        )
                    )
            elif kind == "other":
                for latin, gap in re.findall(r"(\S+)(\s*)", text):
                    if self._unread is not None and any(map(is_foreign_letter, latin)) and self._unread.is_unread(latin):
                        if words:  # passed over: what was written after it goes on the word before
                            words[-1] = replace(words[-1], trailing=words[-1].trailing + gap)
                        continue
                    entry = lexicon.get(latin.lower())
                    phonemes = tuple(entry) if entry else self._espeak_word(latin)
                    words.append(SpokenWord(latin, latin, phonemes, (latin,), trailing=gap, citation=(latin,)))
            elif words:
                last = words[-1]
                words[-1] = replace(last, clause_end=last.clause_end or kind == "break", trailing=last.trailing + text)
        if written != spoken and len(words) > first:  # a number read as words: one word, written as it was
            own = words[first:]
            joined: list[str] = []
            for word in own:
                if joined and word.phonemes:
                    joined.append(WORD_BREAK)
                joined.extend(word.phonemes)
            pinyin = tuple(syllable for word in own for syllable in word.pinyin)
            citation = tuple(syllable for word in own for syllable in word.citation)
            words[first:] = [SpokenWord(written, spoken, tuple(joined), pinyin, own[-1].clause_end, own[-1].trailing, citation)]

    def _espeak_word(self, text: str) -> tuple[str, ...]:
        """espeak-ng's cmn reading of a word of another script (its English voice for Latin letters)."""
        phonemes = [
            phoneme
            for sentence in phonemize_sentences(text, self.espeak_voice, self.max_word_chars)
            for phoneme in sentence.phonemes
            if phoneme not in ",;:.?!"
        ]
        while phonemes and phonemes[-1] == WORD_BREAK:
            phonemes.pop()
        return tuple(phonemes)

    def _parts(self, words: list[SpokenWord], first: IdBudget | None = None) -> list[list[SpokenWord]]:
        """The words in parts that each fit `max_phoneme_ids` (all of them when there is no limit), the
        first one `first`'s budget when given, cut after a clause mark where one is in reach, else after
        a word."""
        spoken = [word for word in words if word.phonemes or word.written.strip()]
        if self._budget is None:
            return [spoken]
        parts: list[list[SpokenWord]] = []
        current: list[SpokenWord] = []
        weight = 0
        for word in spoken:
            word_weight = self._word_weight(word)
            limit = first.budget if first is not None and not parts else self._budget.budget
            if current and weight + word_weight > limit:
                cut = max((index + 1 for index, held in enumerate(current) if held.clause_end), default=len(current))
                parts.append(current[:cut])
                current = current[cut:]
                weight = sum(self._word_weight(held) for held in current)
            if word_weight > self._budget.budget:  # one word too long for a model call: its phonemes in parts
                parts.extend([held] for held in _chopped(word, self._budget))
                continue
            current.append(word)
            weight += word_weight
        if current:
            parts.append(current)
        return [part for part in parts if part]

    def _word_weight(self, word: SpokenWord) -> int:
        """Ids a word takes in a sentence, its break after it included (with an id limit only)."""
        assert self._budget is not None
        return self._budget.weight([*word.phonemes, WORD_BREAK])

    def _sentence(self, words: list[SpokenWord]) -> Sentence:
        phonemes: list[str] = []
        spans: list[tuple[str, int, int]] = []
        for word in words:
            if not word.phonemes:
                continue
            if phonemes:
                phonemes.append(WORD_BREAK)
            start = len(phonemes)
            phonemes.extend(word.phonemes)
            spans.append((word.written, start, len(phonemes)))
        ids, offsets = self._ids_with_offsets(phonemes)
        return Sentence(
            text="".join(word.spoken + word.trailing for word in words).strip(),
            phonemes=tuple(phonemes),
            phoneme_ids=tuple(ids),
            words=tuple(
                WordSpan(written, offsets[start], offsets[end]) for written, start, end in spans if offsets[end] > offsets[start]
            ),
            pinyin=tuple(syllable for word in words for syllable in word.pinyin),
        )

    def _ids_with_offsets(self, phonemes: Sequence[str]) -> tuple[list[int], list[int]]:
        """The sentence's ids, and for each phoneme index the id index where it starts (one more at
        the end: where the EOS is)."""
        ids = phonemes_to_ids([], self.phoneme_id_map)[:-1]  # BOS and PAD
        offsets: list[int] = []
        pad = list(self.phoneme_id_map[PAD])
        for phoneme in phonemes:
            offsets.append(len(ids))
            known = self.phoneme_id_map.get(phoneme)
            if known is not None:
                ids.extend(known)
                ids.extend(pad)
        offsets.append(len(ids))
        ids.extend(phonemes_to_ids([], self.phoneme_id_map)[-1:])
        return ids, offsets


def _pieces(text: str) -> list[tuple[str, str]]:
    """`text` as (kind, text) pieces: "han" runs, "other" script runs, "break" at clause marks, and
    "gap" for the rest (spaces, other punctuation)."""
    pieces: list[tuple[str, str]] = []
    position = 0
    pattern = re.compile(f"(?P<han>{HAN.pattern})|(?P<other>{_OTHER_SCRIPT.pattern}(?:\\s+{_OTHER_SCRIPT.pattern})*)|(?P<break>{_CLAUSE_BREAK.pattern})")
    for match in pattern.finditer(text):
        if match.start() > position:
            pieces.append(("gap", text[position : match.start()]))
        pieces.append((match.lastgroup or "gap", match.group()))
        position = match.end()
    if position < len(text):
        pieces.append(("gap", text[position:]))
    return pieces


def _symbols(ipa: str) -> tuple[str, ...]:
    return tuple(unicodedata.normalize("NFD", ipa))


def _chopped(word: SpokenWord, budget: IdBudget) -> list[SpokenWord]:
    """A word whose phonemes are over the budget, in words that fit."""
    room = budget.budget
    parts: list[SpokenWord] = []
    current: list[str] = []
    for phoneme in word.phonemes:
        if current and budget.weight([*current, phoneme]) > room:
            parts.append(SpokenWord(word.written if not parts else "", word.spoken if not parts else "", tuple(current)))
            current = []
        current.append(phoneme)
    parts.append(SpokenWord("" if parts else word.written, "" if parts else word.spoken, tuple(current)))
    return parts


def _is_dictionary_word(text: str) -> bool:
    """True when jieba's dictionary holds `text` as a word (for third-tone chains)."""
    from libs.text.zh.reading import _jieba

    _jieba()
    import jieba

    return bool(jieba.dt.FREQ.get(text))


__all__ = ["CLAUSE_MARKS", "MANDARIN_ESPEAK_VOICE", "MandarinFrontend", "SpokenWord"]
