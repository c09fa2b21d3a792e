"""A subset of SSML 1.1, parsed into what the front end speaks: text (with inline phonemes and
say-as readings already in words), pauses, marks and rate changes.

Supported: <speak> (the root), <p>, <s>, <break time="500ms"|strength="...">, <prosody rate=...>,
<phoneme alphabet="ipa" ph="...">, <sub alias="...">, <say-as interpret-as="characters|spell-out|
cardinal|number|ordinal|digits|date|time|telephone">, <mark name="...">. Three more are read as
their content, as SSML asks of a processor that cannot render them, so that documents written for
other engines speak: <emphasis level="..."> (the voice has no emphasis of its own), <lang
xml:lang="..."> (read in the voice's language; words in a script it cannot read are passed over),
and <audio src="..."> (its text inside, the spoken alternative; the service fetches nothing, so an
<audio> without such text is an error, and its <desc> is not read). Any other element, or an
attribute these do not take, is an SsmlError (INVALID_ARGUMENT) naming it. A document with a DTD
or entity declarations is refused before it is parsed, so no entity can expand.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ElementTree
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

from libs.text.errors import EmptyTextError, TextError
from libs.text.normalize import has_speakable_characters
from libs.text.normalizer import numbers
from libs.text.normalizer.written_forms import expand_written_forms
from libs.text.pronounce import MAX_INLINE_BLOCK_CHARS

SSML_NAMESPACE: Final = "http://www.w3.org/2001/10/synthesis"
MAX_BREAK_MS: Final = 10_000
"""Longest pause one <break> may ask for (SSML engines commonly cap it at 10 s)."""
MIN_PAUSE_BUDGET_MS: Final = 300_000
"""The pauses any document may add up to, whatever its length (five minutes: what the 5,000
characters a stream takes would last read aloud)."""
PAUSE_BUDGET_MS_PER_CHAR: Final = 60
"""Beyond MIN_PAUSE_BUDGET_MS, a document's pauses may add up to about what its characters would take
to read aloud (some 60 ms each). A <break> costs the service its silence (encoding, sending, a stream
held open) for the few characters that ask for it: 250 breaks of 10 s in 5,000 characters made 41
minutes of audio, eight times what the same characters read as words make."""
BREAK_STRENGTH_MS: Final = {"none": 0, "x-weak": 100, "weak": 200, "medium": 400, "strong": 700, "x-strong": 1000}
RATE_WORDS: Final = {"x-slow": 0.5, "slow": 0.75, "medium": 1.0, "default": 1.0, "fast": 1.25, "x-fast": 1.5}
MAX_DEPTH: Final = 32
"""The deepest nesting of elements (<speak>, <p>, <s>, <prosody> and an element in it are five)."""
MIN_RATE: Final = 0.25
MAX_RATE: Final = 4.0
_ELEMENT_ATTRIBUTES: Final[dict[str, frozenset[str]]] = {
    "speak": frozenset({"version", "lang", "{http://www.w3.org/XML/1998/namespace}lang", "xmlns", "base"}),
    "p": frozenset(),
    "s": frozenset(),
    "break": frozenset({"time", "strength"}),
    "prosody": frozenset({"rate"}),
    "phoneme": frozenset({"alphabet", "ph"}),
    "sub": frozenset({"alias"}),
    "say-as": frozenset({"interpret-as", "format", "detail"}),
    "mark": frozenset({"name"}),
    "emphasis": frozenset({"level"}),
    "lang": frozenset({"{http://www.w3.org/XML/1998/namespace}lang"}),
    "audio": frozenset({"src"}),
    "desc": frozenset({"{http://www.w3.org/XML/1998/namespace}lang"}),
}
_READ_AS_CONTENT: Final = frozenset({"emphasis", "lang", "audio"})
"""Elements spoken as the text inside them (the module docstring)."""
_EMPHASIS_LEVELS: Final = frozenset({"strong", "moderate", "none", "reduced"})
_SAY_AS: Final = frozenset({"characters", "spell-out", "cardinal", "number", "ordinal", "digits", "date", "time", "telephone"})
_TIME: Final = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s)\s*$")
_DECLARATIONS: Final = re.compile(r"<!(?:DOCTYPE|ENTITY)", re.IGNORECASE)
_SSML_START: Final = re.compile(
    r"\s*(?:<\?xml\b[^>]*\?>\s*)?(?:(?:<!--.*?-->|<!DOCTYPE\b[^\[>]*(?:\[[^\]]*\])?\s*>)\s*)*<speak\b", re.DOTALL | re.IGNORECASE
)
"""What an SSML document starts with: its <speak> root, after what may come before it in XML."""
_SPACE_RUN: Final = re.compile(r"[ \t]{2,}")
_SPACE_BEFORE_PUNCTUATION: Final = re.compile(r"[ \t]+([.,;:!?])")


class SsmlError(TextError):
    """An SSML document the front end cannot speak as written."""


@dataclass(frozen=True)
class SsmlEvent:
    """A break or a mark, in document order after a segment's text."""

    pause_ms: int = 0
    """Silence of a <break> (0 for a mark)."""
    mark: str | None = None
    """Name of a <mark> (None for a break)."""


@dataclass
class SsmlSegment:
    """Text spoken at one rate, then the breaks and marks that follow it."""

    text: str = ""
    """Text in the front end's input form: written words, inline phonemes `[[ ... ]]`."""
    rate: float = 1.0
    """Speaking-rate multiple for this text (prosody rate)."""
    events: list[SsmlEvent] = field(default_factory=list)
    """Breaks and marks after the text, in order."""

    def pause_and_marks(self) -> tuple[int, list[tuple[str, int]]]:
        """The silence after the text (ms, at most MAX_BREAK_MS) and each mark with how far into
        that silence it falls (ms)."""
        pause_ms, marks = 0, []
        for event in self.events:
            if event.mark is not None:
                marks.append((event.mark, pause_ms))
            pause_ms = min(MAX_BREAK_MS, pause_ms + event.pause_ms)
        return pause_ms, marks


def looks_like_ssml(text: str) -> bool:
    """True when a text starts with a <speak> root (so SSML is on without the request flag), after an
    XML declaration, comments or a DOCTYPE if any (`parse_ssml` refuses the DOCTYPE by name)."""
    return _SSML_START.match(text) is not None


def parse_ssml(document: str) -> list[SsmlSegment]:
    """The segments of an SSML document, in order (SsmlError for anything outside the subset)."""
    if _DECLARATIONS.search(document):
        raise SsmlError("SSML with a DOCTYPE or ENTITY declaration is not accepted; send the document without one")
    try:
        root = ElementTree.fromstring(document)
    except ElementTree.ParseError as error:
        raise SsmlError(f"SSML is not well-formed XML: {error}") from None
    if _name(root) != "speak":
        raise SsmlError(f"the SSML root element must be <speak>, not <{_name(root)}>")
    builder = _Builder()
    builder.element(root, rate=1.0, depth=1)
    segments = builder.finish()
    paused_ms = sum(segment.pause_and_marks()[0] for segment in segments)
    budget_ms = pause_budget_ms(len(document))
    if paused_ms > budget_ms:
        raise SsmlError(
            f"the SSML document's breaks add up to {paused_ms / 1000:g} s; a document of {len(document)} characters "
            f"may pause {budget_ms / 1000:g} s in all: use fewer or shorter breaks"
        )
    return segments


def pause_budget_ms(document_chars: int) -> int:
    """The most the pauses of a document of `document_chars` characters may add up to (ms)."""
    return max(MIN_PAUSE_BUDGET_MS, PAUSE_BUDGET_MS_PER_CHAR * document_chars)


def spoken_segments(segments: Sequence[SsmlSegment]) -> list[SsmlSegment]:
    """The segments with words to speak (EmptyTextError when there are none)."""
    spoken = [segment for segment in segments if has_speakable_characters(segment.text)]
    if not spoken:
        raise EmptyTextError("the SSML document has no words to speak")
    return spoken


def _name(element: ElementTree.Element) -> str:
    tag = element.tag
    if tag.startswith("{"):
        namespace, _, local = tag[1:].partition("}")
        if namespace != SSML_NAMESPACE:
            raise SsmlError(f"SSML element <{local}> from namespace {namespace!r} is not supported")
        return local
    return tag


class _Builder:
    def __init__(self) -> None:
        self.segments: list[SsmlSegment] = [SsmlSegment()]

    @property
    def current(self) -> SsmlSegment:
        return self.segments[-1]

    def text(self, text: str | None, rate: float) -> None:
        if not text:
            return
        if self.current.events or (self.current.rate != rate and self.current.text.strip()):
            if not text.strip() and not self.current.events:
                return
            self.segments.append(SsmlSegment(rate=rate))
        elif not self.current.text.strip():
            self.current.rate = rate
        self.current.text += text

    def boundary(self, pause_ms: int = 0, mark: str | None = None) -> None:
        self.current.events.append(SsmlEvent(pause_ms, mark))

    def element(self, element: ElementTree.Element, rate: float, depth: int) -> None:
        name = _name(element)
        if depth > MAX_DEPTH:
            raise SsmlError(f"SSML elements nest {MAX_DEPTH} deep at most; <{name}> is deeper")
        allowed = _ELEMENT_ATTRIBUTES.get(name)
        if allowed is None:
            raise SsmlError(
                f"SSML element <{name}> is not supported; use "
                + ", ".join(f"<{supported}>" for supported in _ELEMENT_ATTRIBUTES)
            )
        for attribute in element.attrib:
            if attribute not in allowed:
                raise SsmlError(f"SSML attribute {attribute!r} of <{name}> is not supported")
        if name == "break":
            self._children_must_be_empty(element, name)
            self.boundary(pause_ms=_break_ms(element))
        elif name == "mark":
            self._children_must_be_empty(element, name)
            mark = element.get("name")
            if not mark:
                raise SsmlError("SSML <mark> needs a name")
            self.boundary(mark=mark)
        elif name == "phoneme":
            if element.get("alphabet", "ipa") != "ipa":
                raise SsmlError(f"SSML <phoneme alphabet={element.get('alphabet')!r}> is not supported; use alphabet=\"ipa\"")
            ph = element.get("ph", "").replace("[", "").replace("]", "")
            if not ph.strip():
                raise SsmlError("SSML <phoneme> needs its phonemes in ph")
            if len(ph) > MAX_INLINE_BLOCK_CHARS:
                raise SsmlError(f"SSML <phoneme> ph holds {len(ph)} characters; one <phoneme> is one word, at most {MAX_INLINE_BLOCK_CHARS}")
            self.text(f" [[ {ph} ]] ", rate)
        elif name == "sub":
            alias = element.get("alias")
            if alias is None:
                raise SsmlError("SSML <sub> needs an alias")
            self.text(alias, rate)
        elif name == "say-as":
            self._children_must_be_empty(element, name)
            self.text(say_as(element.get("interpret-as", ""), element.text or ""), rate)
        elif name == "desc":
            return  # what an <audio> clip holds, for a reader of the document: not spoken
        elif name in _READ_AS_CONTENT:
            _check_read_as_content(element, name)
            self.text(element.text, rate)
            for child in element:
                self.element(child, rate, depth + 1)
                self.text(child.tail, rate)
        else:
            if name in ("p", "s") and self.current.text.strip():
                self._end_sentence(paragraph=name == "p")
            inner = _prosody_rate(element.get("rate"), rate) if name == "prosody" else rate
            self.text(element.text, inner)
            for child in element:
                self.element(child, inner, depth + 1)
                self.text(child.tail, inner)
            if name in ("p", "s"):
                self._end_sentence(paragraph=name == "p")

    def _end_sentence(self, paragraph: bool) -> None:
        if self.current.text.endswith("\n\n") or (not paragraph and self.current.text.endswith(" ") and self.current.text.rstrip()[-1:] in (".", "?", "!")):
            return
        body = self.current.text.rstrip()
        if body and body[-1] not in ".?!":
            body += "."
        self.current.text = body + ("\n\n" if paragraph else " ") if body else self.current.text

    @staticmethod
    def _children_must_be_empty(element: ElementTree.Element, name: str) -> None:
        if len(element):
            raise SsmlError(f"SSML <{name}> takes no elements inside it")

    def finish(self) -> list[SsmlSegment]:
        for segment in self.segments:  # the spaces put around replaced elements, tidied
            segment.text = _SPACE_BEFORE_PUNCTUATION.sub(r"\1", _SPACE_RUN.sub(" ", segment.text))
        return [segment for segment in self.segments if segment.text.strip() or segment.events]


def _check_read_as_content(element: ElementTree.Element, name: str) -> None:
    """What an element read as its content must carry to be read that way."""
    if name == "emphasis" and element.get("level", "moderate") not in _EMPHASIS_LEVELS:
        raise SsmlError(f"SSML <emphasis level={element.get('level')!r}> is not a level; use {', '.join(sorted(_EMPHASIS_LEVELS))}")
    if name == "lang" and not element.get("{http://www.w3.org/XML/1998/namespace}lang"):
        raise SsmlError("SSML <lang> needs xml:lang")
    if name == "audio":
        spoken = (element.text or "") + "".join(child.tail or "" for child in element)
        inside = [child for child in element if _name(child) != "desc"]  # a <say-as>, a <sub>: words of their own
        if not inside and not has_speakable_characters(spoken):
            raise SsmlError(
                "SSML <audio> is not played: the service fetches nothing. Put the words to say in its place inside "
                "the element (<audio src=\"...\">a door bell</audio>), or leave it out"
            )


def _break_ms(element: ElementTree.Element) -> int:
    time = element.get("time")
    if time is not None:
        match = _TIME.match(time)
        if match is None:
            raise SsmlError(f"SSML <break time={time!r}> is not a time; write e.g. \"500ms\" or \"1.5s\"")
        value = float(match.group(1)) * (1000 if match.group(2) == "s" else 1)
        if value > MAX_BREAK_MS:
            raise SsmlError(f"SSML <break time={time!r}> is longer than {MAX_BREAK_MS} ms")
        return round(value)
    strength = element.get("strength", "medium")
    if strength not in BREAK_STRENGTH_MS:
        raise SsmlError(f"SSML <break strength={strength!r}> is not one of {', '.join(BREAK_STRENGTH_MS)}")
    return BREAK_STRENGTH_MS[strength]


def _prosody_rate(rate: str | None, current: float) -> float:
    if rate is None:
        return current
    rate = rate.strip()
    if rate in RATE_WORDS:
        value = RATE_WORDS[rate]
    elif rate.endswith("%"):
        try:
            value = float(rate[:-1]) / 100
        except ValueError:
            raise SsmlError(f"SSML <prosody rate={rate!r}> is not a percentage") from None
    else:
        try:
            value = float(rate)
        except ValueError:
            raise SsmlError(f"SSML <prosody rate={rate!r}> is not supported; use x-slow ... x-fast, a percentage or a multiple") from None
    if not MIN_RATE <= value <= MAX_RATE:
        raise SsmlError(f"SSML <prosody rate={rate!r}> is out of range; use {MIN_RATE:g} to {MAX_RATE:g} times the normal rate")
    if not MIN_RATE <= current * value <= MAX_RATE:
        raise SsmlError(
            f"SSML <prosody rate={rate!r}> inside another <prosody> makes {current * value:.3g} times the normal rate; "
            f"nested rates multiply, and must stay within {MIN_RATE:g} to {MAX_RATE:g}"
        )
    return current * value


def say_as(interpret_as: str, text: str) -> str:
    """The words of `text` read as `interpret_as` says."""
    content = text.strip()
    if interpret_as not in _SAY_AS:
        raise SsmlError(f"SSML <say-as interpret-as={interpret_as!r}> is not supported; use one of {', '.join(sorted(_SAY_AS))}")
    if interpret_as in ("characters", "spell-out"):
        return " " + " ".join(numbers.digit_by_digit(c) if c.isdecimal() else c.upper() for c in content if not c.isspace()) + " "
    if interpret_as == "digits":
        return " " + numbers.digit_by_digit(content) + " "
    digits = content.replace(",", "")
    if interpret_as in ("cardinal", "number") and re.fullmatch(r"-?\d{1,15}(\.\d{1,12})?", digits):
        sign = "minus " if digits.startswith("-") else ""
        return " " + sign + numbers.number(digits.lstrip("-")) + " "
    if interpret_as == "ordinal" and re.fullmatch(r"\d{1,15}(st|nd|rd|th)?", digits):
        return " " + numbers.ordinal(re.sub(r"\D", "", digits)) + " "
    if interpret_as == "telephone" and re.fullmatch(r"[\d\s()+.-]{3,40}", content):
        groups = re.findall(r"\d+", content)
        return " " + ", ".join(numbers.digit_by_digit(group) for group in groups) + " "
    if interpret_as in ("date", "time"):
        return " " + expand_written_forms(content) + " "
    raise SsmlError(f"SSML <say-as interpret-as={interpret_as!r}> cannot read {content[:40]!r}")
