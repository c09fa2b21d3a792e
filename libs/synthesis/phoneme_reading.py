"""How a text will be read, asked for: each sentence's text, phonemes and ids (and, for Mandarin, its
pinyin), for a voice or for a language alone (`POST /v1/audio/phonemes`, `tts-mesh phonemes`).

A language can be checked before any voice for it is installed: `language` (BCP 47: `en`, `en-US`,
`en-GB`, `zh`, `zh-CN`, ...) picks the espeak-ng voice and the front end (libs.text.frontends), with
the phoneme-id map every Piper espeak voice shares (the default voice's). With a `voice`, the
voice's own map and espeak-ng voice are used, and the ids are the ones the voice is fed.

Text is normalised and cut here (pure Python, on a worker thread); the reading itself runs in the
text processes (libs.text.phonemizer_pool), like every other text the gateway reads.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from libs.synthesis.text_side import TextLimits
from libs.text.errors import TextTooLongError
from libs.text.frontend import Sentence
from libs.text.frontends import front_end_name, frontend_for
from libs.text.phonemizer_pool import FrontendSpec, PhonemizerPool
from libs.text.reading import ReadingRules
from libs.text.sentences import is_cut_short
from libs.text.ssml import looks_like_ssml, parse_ssml, spoken_segments
from libs.voice.registry import Voice, VoiceRegistry
from libs.wire.errors import InvalidRequestError

LANGUAGES: Final[Mapping[str, tuple[str, str]]] = {
    "en": ("en-US", "en-us"),
    "en-us": ("en-US", "en-us"),
    "en-gb": ("en-GB", "en-gb-x-rp"),  # what Piper's en_GB voices are read with
    "zh": ("zh-CN", "cmn"),
    "zh-cn": ("zh-CN", "cmn"),
    "zh-hans": ("zh-CN", "cmn"),
    "zh-hans-cn": ("zh-CN", "cmn"),
    "cmn": ("zh-CN", "cmn"),
    "cmn-cn": ("zh-CN", "cmn"),
}
"""BCP 47 tag (lower-cased) -> (the tag answered, the espeak-ng voice that reads it)."""
KNOWN_LANGUAGES: Final = ("en", "en-US", "en-GB", "zh", "zh-CN")
"""The tags an error message offers."""


class UnknownLanguageError(InvalidRequestError):
    """A `language` this service has no front end for; the message lists the ones it has."""


@dataclass(frozen=True)
class SentenceReading:
    """One sentence as it will be read."""

    text: str
    """The sentence as spoken (numbers and dates as words)."""
    phonemes: str
    """Its phonemes (espeak-ng IPA, one symbol per id)."""
    phoneme_ids: tuple[int, ...]
    """Model input ids with the voice's map (`^ _ p1 _ ... $`)."""
    pinyin: str = ""
    """Mandarin: numbered pinyin as said, one syllable per Chinese character (neutral tone 5)."""

    def to_json(self) -> dict[str, object]:
        answer: dict[str, object] = {"text": self.text, "phonemes": self.phonemes, "phoneme_ids": list(self.phoneme_ids)}
        if self.pinyin:
            answer["pinyin"] = self.pinyin
        return answer


@dataclass(frozen=True)
class Reading:
    """A whole text as it will be read."""

    language: str
    """BCP 47 tag of the reading ("zh-CN")."""
    espeak_voice: str
    """The espeak-ng voice whose phonemes are written ("cmn")."""
    front_end: str
    """"mandarin" or "espeak" (libs.text.frontends)."""
    voice: str | None
    """The voice read for, or None for a language alone."""
    sentences: list[SentenceReading] = field(default_factory=list)
    """Each sentence, in order."""

    def to_json(self) -> dict[str, object]:
        return {
            "voice": self.voice,
            "language": self.language,
            "espeak_voice": self.espeak_voice,
            "front_end": self.front_end,
            "sentences": [sentence.to_json() for sentence in self.sentences],
        }


def language_espeak_voice(tag: str) -> tuple[str, str]:
    """(the tag as answered, its espeak-ng voice) for a BCP 47 tag; UnknownLanguageError otherwise."""
    found = LANGUAGES.get(tag.strip().replace("_", "-").lower())
    if found is None:
        raise UnknownLanguageError(f"unknown language {tag[:40]!r}; known languages: {', '.join(KNOWN_LANGUAGES)}")
    return found


def spoken_texts(text: str, max_text_chars: int) -> list[str]:
    """The texts `text` is spoken as: itself, or an SSML document's segments with words in them (a
    text that starts with <speak> is SSML here as where it is spoken; SsmlError names what is wrong)."""
    if not looks_like_ssml(text):
        return [text]
    if len(text) > max_text_chars:
        raise TextTooLongError(len(text), max_text_chars)
    return [segment.text for segment in spoken_segments(parse_ssml(text))]


class PhonemeReader:
    """Readings of texts through the gateway's text processes."""

    def __init__(self, pool: PhonemizerPool, registry: VoiceRegistry, max_text_chars: int, limits: TextLimits = TextLimits()) -> None:
        """`limits` are the gateway's text settings, so a text is read here exactly as it is spoken."""
        self._pool = pool
        self._registry = registry
        self._max_text_chars = max_text_chars
        self._limits = limits
        self._reading = ReadingRules(written_forms=limits.read_written_forms, heteronyms=limits.read_heteronyms)

    async def read(self, text: str, voice: str | None = None, language: str | None = None) -> Reading:
        """The reading of `text` for `voice` (a name the registry knows) or `language` (BCP 47).

        Raises InvalidRequestError for neither or both, UnknownVoiceError (libs.voice.registry),
        UnknownLanguageError, and
        the text errors of the front end (empty, too long, crashing espeak-ng)."""
        if bool(voice) == bool(language):
            raise InvalidRequestError("give `voice` (a voice name) or `language` (BCP 47, e.g. zh-CN), not both and not neither")
        if voice:
            chosen = self._voice(voice)
            name, tag, espeak_voice, id_map = chosen.name, chosen.language_code, chosen.espeak_voice, chosen.phoneme_id_map()
        else:
            assert language is not None
            tag, espeak_voice = language_espeak_voice(language)
            name, id_map = None, self._registry.default.phoneme_id_map()
        # Its own name in the text processes: a process keeps one front end per name.
        spec, frontend = self._front_end(f"reading:{name or tag}", id_map, espeak_voice)
        sentences: list[Sentence] = []
        for part in await asyncio.to_thread(spoken_texts, text, self._max_text_chars):
            chunks = await asyncio.to_thread(frontend.chunks, part)
            for index, chunk in enumerate(chunks):
                continues = index < len(chunks) - 1 and is_cut_short(chunk)
                sentences.extend(await self._pool.sentences(spec, chunk, continues))
        return Reading(
            language=tag,
            espeak_voice=espeak_voice,
            front_end=front_end_name(espeak_voice),
            voice=name,
            sentences=[
                SentenceReading(s.text, "".join(s.phonemes), s.phoneme_ids, " ".join(s.pinyin)) for s in sentences
            ],
        )

    def _voice(self, name: str) -> Voice:
        return self._registry.get(name)  # UnknownVoiceError lists the known voices

    def _front_end(self, name: str, id_map: Mapping[str, Sequence[int]], espeak_voice: str):
        limits = self._limits
        frontend = frontend_for(
            id_map, espeak_voice, max_text_chars=self._max_text_chars, max_chunk_chars=limits.max_pending_text_chars,
            max_phoneme_ids=limits.max_sentence_ids, max_word_chars=limits.max_word_chars, reading=self._reading,
        )  # fmt: skip
        spec = FrontendSpec(
            voice=name,
            phoneme_id_map=frontend.phoneme_id_map,
            espeak_voice=espeak_voice,
            max_phoneme_ids=frontend.max_phoneme_ids,
            max_word_chars=frontend.max_word_chars,
            read_written_forms=limits.read_written_forms,
            read_heteronyms=limits.read_heteronyms,
            lexicon_file=limits.lexicon_file,
            lexicon_check_s=limits.lexicon_check_s,
        )
        return spec, frontend
