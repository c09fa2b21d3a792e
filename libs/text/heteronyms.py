"""English heteronyms read from their context: "I read it yesterday" (ɹˈɛd), "made of lead" (lˈɛd),
"I object to that" (verb), "so minute" (maɪnˈuːt).

espeak-ng already tells a noun from a verb after "to" and "the", and reads every other occurrence
one fixed way. Here a few cues decide, from the neighbouring words only: the word before (a
determiner, a pronoun subject, a modal, "to", a preposition, a tense marker) and the word after
(an object, a particle such as "up", a noun it modifies), and for "read" time words anywhere in
the sentence. When no cue fires, the word is left to espeak-ng. The readings are written in
espeak-ng's own phonemes, so a chosen reading sounds like the rest of the sentence.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Final

from libs.text.heteronym_readings import NOUN, OTHER_READINGS, STRESS_PAIRS, VERB, reading_ipa, readings

_DETERMINERS: Final = frozenset(
    ["the", "a", "an", "this", "these", "those", "my", "your", "his", "her", "its", "our", "their", "every", "each", "no", "any", "some", "another", "whose", "which", "what", "first", "new", "old", "big", "good", "great", "latest", "whole", "world", "personal", "main", "final", "public", "private", "formal", "official", "written", "detailed", "strong", "bold", "major", "minor", "huge", "annual", "recent"]
)
_PREPOSITIONS: Final = frozenset(["of", "in", "on", "for", "with", "about", "from", "by", "at", "into", "under", "without", "per", "during", "after"])
_VERB_BEFORE: Final = frozenset(
    ["to", "will", "would", "shall", "should", "can", "could", "may", "might", "must", "do", "did", "don't", "doesn't", "didn't", "won't", "wouldn't", "can't", "cannot", "couldn't", "shouldn't", "i", "you", "we", "they", "please", "let's", "not", "never", "always", "often", "usually", "also", "just", "rarely", "sometimes", "who", "that", "gladly", "strongly"]
)
_THIRD_PERSON: Final = frozenset(["he", "she", "it"])
_COPULAS: Final = frozenset(["is", "are", "was", "were", "be", "been", "am", "seems", "seemed", "felt", "so", "very", "too", "quite"])
_NOT_PLURAL_NOUNS: Final = frozenset(
    ["its", "his", "hers", "ours", "yours", "theirs", "this", "thus", "was", "has", "does", "always", "sometimes", "perhaps", "unless", "whereas", "besides", "towards", "afterwards", "becomes", "goes", "makes", "takes", "needs", "wants"]
)
_OBJECTS: Final = frozenset(["the", "a", "an", "your", "my", "his", "her", "our", "their", "its", "it", "them", "him", "me", "us", "this", "these", "those"])
_BE_HAVE: Final = frozenset(["have", "has", "had", "'ve", "was", "were", "been", "being", "is", "are", "be", "'s"])
_PAST_CUES: Final = frozenset(["yesterday", "ago", "last", "already", "earlier", "once", "previously", "finally"])
_PRESENT_CUES: Final = frozenset(["every", "always", "usually", "often", "sometimes", "daily", "tomorrow", "each", "now", "never"])
_MODALS: Final = frozenset(
    ["to", "will", "would", "can", "could", "should", "must", "might", "may", "shall", "do", "does", "don't", "doesn't", "won't", "can't", "cannot", "please", "let's"]
)
_WORD: Final = re.compile(r"[A-Za-z]+(?:'[A-Za-z]+)?")


@dataclass(frozen=True)
class HeteronymReading:
    """The reading chosen for one heteronym in a text."""

    start: int
    """Index of its first character in the text."""
    end: int
    """Index just past it."""
    word: str
    """The word as written."""
    reading: str
    """The reading's name ("noun", "verb", "past", "metal", ...)."""
    ipa: str
    """Its phonemes in espeak-ng's IPA."""


@dataclass(frozen=True)
class _Context:
    words: list[str]
    """Lower-cased words of the sentence."""
    index: int
    original: str
    """The word as written (case kept)."""
    sentence_start: bool
    previous_original: str = ""
    """The word before as written."""

    @property
    def previous(self) -> str:
        return self.words[self.index - 1] if self.index else ""

    @property
    def before_previous(self) -> str:
        return self.words[self.index - 2] if self.index > 1 else ""

    @property
    def next(self) -> str:
        return self.words[self.index + 1] if self.index + 1 < len(self.words) else ""

    def sentence_has(self, cues: frozenset[str]) -> bool:
        return any(word in cues for word in self.words)


def _part_of_speech(context: _Context) -> str | None:
    """NOUN or VERB for a noun/verb pair from the words around it, or None without a cue."""
    previous, following = context.previous, context.next
    if previous in _DETERMINERS or previous in _PREPOSITIONS - {"to"} or previous.endswith(("'s", "s'")):
        return NOUN
    if previous in _VERB_BEFORE:
        return VERB
    if previous in _THIRD_PERSON and context.words[context.index].endswith("s"):
        return VERB
    if following == "of":
        return NOUN
    if previous in _COPULAS:
        return NOUN  # an adjective: "is perfect", "are close to"
    if following in _OBJECTS or following in ("to", "up"):
        return VERB
    if _is_plural_subject(previous) and not context.words[context.index].endswith("s"):
        return VERB  # "muscles contract", "the shops close at six"
    return None


def _is_plural_subject(word: str) -> bool:
    """True for a word that looks like a plural noun ("rules", "talks"), which a verb follows."""
    return (
        len(word) > 3
        and word.endswith("s")
        and not word.endswith(("ss", "us", "is", "'s"))
        and word not in _NOT_PLURAL_NOUNS
    )


def _read(context: _Context) -> str | None:
    previous = context.previous
    if previous in _MODALS:
        return "present"
    if previous in _BE_HAVE or context.next == "by":
        return "past"
    if previous in _THIRD_PERSON or _after_name(context):
        return "past"
    if context.sentence_has(_PAST_CUES):
        return "past"
    if context.sentence_has(_PRESENT_CUES):
        return "present"
    return None


def _after_name(context: _Context) -> bool:
    """True when the word before is capitalised and not the sentence's first ("Then Anna read it")."""
    return context.index >= 2 and context.previous_original[:1].isupper() and context.previous != "i"


_METAL_AFTER: Final = frozenset(
    ["pipe", "pipes", "paint", "poisoning", "pencil", "pencils", "weight", "weights", "content", "levels", "exposure", "shot", "crystal", "acid", "batteries", "battery", "solder", "roof", "sheet", "sheets", "free", "based", "lined", "dust"]
)
_METAL_BEFORE: Final = frozenset(["of", "with", "heavy", "molten", "toxic", "red", "white"])


def _lead(context: _Context) -> str | None:
    if context.next in _METAL_AFTER or (context.previous in _METAL_BEFORE and context.next not in _OBJECTS):
        return "metal"
    if context.previous in _VERB_BEFORE or context.next in _OBJECTS or context.next in ("to", "the", "by"):
        return "guide"
    return None


_LIVE_NOUNS: Final = frozenset(
    ["music", "show", "shows", "broadcast", "broadcasts", "performance", "performances", "audience", "stream", "streams", "event", "events", "coverage", "album", "recording", "wire", "wires", "animals", "bait", "ammunition", "tv", "television", "concert", "concerts", "version", "band", "feed", "chat", "updates", "demo", "sound", "radio", "match", "footage", "theater", "theatre", "shell", "round", "rounds"]
)


def _live(context: _Context) -> str | None:
    if context.next in _LIVE_NOUNS or context.previous in ("go", "goes", "went", "going", "gone"):
        return "adjective"
    if context.previous in ("is", "are", "was", "were", "be", "being", "'re") and context.next in ("", "on", "from", "tonight", "now", "at"):
        return "adjective"
    if context.previous in _VERB_BEFORE or context.previous in ("still", "people", "where") or context.next in ("in", "on", "with", "near", "here", "there", "alone", "abroad", "together", "by", "off", "long", "like"):
        return "verb"
    return None


def _lives(context: _Context) -> str | None:
    previous = context.previous
    if previous in _DETERMINERS or previous in ("many", "save", "saved", "saves", "two", "three", "several", "countless", "lost", "whose", "daily", "busy", "nine") or previous.endswith("'s"):
        return "noun"
    if previous in _THIRD_PERSON or previous in ("who", "that", "which", "still", "family") or context.next in (
        "in", "at", "on", "with", "near", "alone", "here", "there", "next", "nearby", "abroad", "by", "off", "downstairs", "upstairs"
    ):
        return "verb"
    return None


_RIP_AFTER: Final = frozenset(["up", "down", "apart", "off", "open", "through", "into", "out", "away"])
_CRY_BEFORE: Final = frozenset(["in", "into", "to", "of", "with", "shed", "single", "crocodile", "happy", "her", "his", "my", "their", "your", "a", "one", "wiped", "joyful", "bitter"])
_CRY_AFTER: Final = frozenset(["rolled", "ran", "fell", "streamed", "trickled", "slid", "of", "welled", "came", "in"])


def _tear(context: _Context) -> str | None:
    if context.previous == "and" and context.before_previous == "wear":
        return "rip"
    if context.next in _RIP_AFTER or context.previous in _VERB_BEFORE or context.previous in _THIRD_PERSON:
        return "rip"
    if context.previous in _CRY_BEFORE or context.next in _CRY_AFTER:
        return "cry"
    return None


def _wind(context: _Context) -> str | None:
    if context.previous in _VERB_BEFORE or context.next in ("up", "down", "back", "around", "round", "it", "your", "my", "the", "its", "his", "her"):
        return "turn"
    return None


def _wound(context: _Context) -> str | None:
    following, previous = context.next, context.previous
    if following in ("up", "down", "around", "round", "back", "tightly", "through", "its", "the", "it", "his", "her", "their", "along", "itself"):
        return "turned"
    if previous in ("had", "has", "have", "he", "she", "they", "we", "i", "road", "path", "river", "trail", "stream"):
        return "turned"
    if previous in _DETERMINERS or previous in ("open", "gunshot", "stab", "deep", "fatal", "head", "knife", "bullet", "old"):
        return "injury"
    return None


_FISH_CUES: Final = frozenset(["fishing", "fish", "boat", "lake", "pond", "caught", "catch", "catching", "striped", "sea", "largemouth", "smallmouth", "fried", "grilled", "baked", "fillet", "hooked", "bite", "biting", "swam"])


def _bass(context: _Context) -> str | None:
    if context.previous in _FISH_CUES or context.next in _FISH_CUES or context.next in ("swam", "bit", "jumped", "were", "weighed"):
        return "fish"
    if context.next in ("guitar", "player", "line", "drum", "notes", "note", "clef", "voice", "singer") or context.previous in ("the", "on", "double", "electric", "plays", "played"):
        return "music"
    return None


def _bow(context: _Context) -> str | None:
    following, previous = context.next, context.previous
    if following in ("tie", "ties", "and", "string", "strings", "hunter", "hunting", "hunters") or previous in ("violin", "cello", "hair", "ribbon", "pink", "red", "silk", "crossbow", "wrapped", "tied", "big"):
        return "ribbon"
    if following in ("down", "to", "before", "out", "deeply", "low", "their", "his", "her", "your", "of") or previous in _VERB_BEFORE or (previous == "a" and context.before_previous in ("take", "took", "takes", "taking")):
        return "bend"
    if previous in ("ship's", "the") and following in ("of", "", "was", "cut", "rose"):
        return "bend"
    return None


def _dove(context: _Context) -> str | None:
    previous, following = context.previous, context.next
    if previous in ("a", "the", "white", "mourning", "peace", "turtle", "rock", "grey", "gray", "little", "like"):
        return "bird"
    if previous in ("he", "she", "they", "we", "i", "it", "you", "who", "and", "then") or following in (
        "into", "in", "off", "under", "for", "down", "headfirst", "deep", "below", "from", "onto", "straight", "toward", "towards", "back", "over"
    ):
        return "dived"
    return None


_TINY_AFTER: Final = frozenset(
    ["details", "detail", "amounts", "amount", "quantities", "quantity", "traces", "trace", "changes", "particles", "differences", "fraction", "fractions", "part", "portion", "scale", "bit", "errors", "variations", "crack", "cracks", "organisms", "creatures", "holes", "hole", "insects"]
)


def _minute(context: _Context) -> str | None:
    if context.next in _TINY_AFTER or context.previous in ("so", "very", "too", "extremely", "most", "quite", "incredibly", "rather"):
        return "tiny"
    if context.previous in _DETERMINERS or context.previous in ("one", "per", "every", "last", "next") or context.next in ("later", "ago", "or", "and", "to", "before", "after", "walk", "drive", "away", "long"):
        return "time"
    return None


def _row(context: _Context) -> str | None:
    if context.previous in ("blazing", "furious", "bitter", "political", "public", "huge", "family", "almighty", "terrible") or (
        context.previous in ("a", "the", "another") and context.next in ("over", "about", "with", "between", "broke", "erupted")
    ):
        return "quarrel"
    if context.previous in ("front", "back", "first", "second", "last", "in", "a", "to") or context.next in ("of", "boat", "boats", "house", "houses"):
        return "line"
    return None


def _sow(context: _Context) -> str | None:
    if context.next in _OBJECTS or context.next in ("seeds", "seed", "wheat", "crops", "doubt", "discord", "corn", "barley", "oats"):
        return "plant"
    if context.previous in _VERB_BEFORE or context.previous in ("reap", "and"):
        return "plant"
    if context.previous in ("a", "the", "old", "fat", "pregnant", "breeding", "her", "prize"):
        return "pig"
    return None


def _does(context: _Context) -> str | None:
    if context.previous in ("the", "two", "three", "four", "five", "several", "many", "few", "and") and context.next not in _OBJECTS | {"not", "it", "so"}:
        return "deer" if context.previous != "and" or context.before_previous in ("bucks", "stags") else None
    return "verb" if context.previous else None


def _polish(context: _Context) -> str | None:
    capitalised = context.original[:1].isupper()
    if capitalised and not context.sentence_start:
        return "nation"
    if capitalised and context.next not in _OBJECTS:
        return "nation"
    return "shine"


def _resume(context: _Context) -> str | None:
    if context.previous in _DETERMINERS or context.previous in ("updated", "new") or context.next == "of":
        return "noun"
    if context.previous in _VERB_BEFORE or context.next in _OBJECTS or context.next in ("work", "play", "playing", "at", "after", "tomorrow", "shortly"):
        return "verb"
    return None


def _content(context: _Context) -> str | None:
    if context.previous in ("am", "is", "are", "was", "were", "be", "seemed", "seems", "seem", "feel", "felt", "quite", "perfectly", "very", "more", "remain", "remained", "stay", "looked"):
        return "happy"
    if context.previous in _DETERMINERS or context.previous in _PREPOSITIONS or context.next in ("of", "is", "was", "creators", "creator", "moderation"):
        return "noun"
    return None


_RULES: Final[dict[str, Callable[[_Context], str | None]]] = {
    "content": _content,
    "read": _read,
    "lead": _lead,
    "live": _live,
    "lives": _lives,
    "tear": _tear,
    "tears": _tear,
    "wind": _wind,
    "wound": _wound,
    "bass": _bass,
    "bow": _bow,
    "bows": _bow,
    "dove": _dove,
    "minute": _minute,
    "row": _row,
    "sow": _sow,
    "does": _does,
    "polish": _polish,
    "resume": _resume,
}

HETERONYMS: Final = frozenset(STRESS_PAIRS) | frozenset(OTHER_READINGS)
__all__ = ["HETERONYMS", "NOUN", "VERB", "HeteronymReading", "choose_reading", "heteronym_readings", "reading_ipa", "readings"]
"""Every word whose reading is chosen here."""


def choose_reading(words: list[str], index: int, original: str = "", previous_original: str = "") -> str | None:
    """The reading of `words[index]` (lower-cased words of its sentence), or None to leave it to espeak-ng."""
    word = words[index]
    context = _Context(words, index, original or word, index == 0, previous_original)
    rule = _RULES.get(word)
    if rule is not None:
        return rule(context)
    if word in STRESS_PAIRS:
        return _part_of_speech(context)
    return None


_SENTENCE_BREAK: Final = re.compile(r"[.!?;:]\s|\n")


def heteronym_readings(text: str) -> Iterator[HeteronymReading]:
    """The heteronyms of `text` whose reading the context decides, in order (linear in the text)."""
    sentence_start = 0
    for sentence_end in [match.end() for match in _SENTENCE_BREAK.finditer(text)] + [len(text)]:
        if sentence_end <= sentence_start:
            continue
        matches = list(_WORD.finditer(text, sentence_start, sentence_end))
        words = [match.group().lower() for match in matches]
        for index, match in enumerate(matches):
            if words[index] not in HETERONYMS:
                continue
            previous = matches[index - 1].group() if index else ""
            reading = choose_reading(words, index, match.group(), previous)
            if reading is not None:
                yield HeteronymReading(match.start(), match.end(), match.group(), reading, reading_ipa(words[index], reading))
        sentence_start = sentence_end
