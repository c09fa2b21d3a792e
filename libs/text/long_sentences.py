"""Cutting a sentence that is too long for one model call into sentences of its own.

The acoustic model's text encoder attends over the whole sentence, so its time and memory grow with
the square of the phoneme ids (what that comes to: docs/performance.md, "History"), and text that
espeak-ng spells out letter by letter (mixed scripts) makes many ids from few characters. And first
audio waits for the whole first sentence. So a sentence over `max_ids` ids becomes several, each
with its own `^ ... $`:

1. At espeak-ng's clause boundaries (after ", ; :", a dash): the pieces' phonemes are exactly the
   sentence's, and the pause is the one the punctuation asks for anyway.
2. A clause that is too long by itself (unpunctuated text, e.g. speech recognition output) is cut
   in its text, just before a conjunction ("and", "because", "which", ...) where there is one near
   the even split, else at a space, else (a script without spaces) between characters. Each part
   is phonemised alone and every part but the last ends as if a comma were written there: a short
   breath with the voice held up, which is how a reader breaks a run-on sentence, where ending
   the part as it is would drop the voice as at a full stop.
3. The units are grouped into the fewest sentences that fit, as evenly as possible; any slack
   goes to the first, so first audio comes sooner.

Pieces are plain sentences: cached, resumed and reported like any other.

A long first sentence starts with its opening (its first audio waits for its plan): its leading
clauses (`cut_first`), or, for one that fits one plan, its leading clauses planned with a few ids of
what follows and the rest spoken as a part of the whole sentence's plan (`opening_span`, the acoustic
worker's spoken ids), which keeps the sentence's prosody.
"""

from __future__ import annotations

import itertools
import math
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from libs.text.phoneme_ids import BOS, EOS, PAD
from libs.text.phonemize import PhonemizedClause, PhonemizedSentence
from libs.text.sentences import best_break

CONTINUATION: Final = (",", " ")
"""Phonemes that end a part of a cut clause: what Piper writes for a comma."""
_PUNCTUATION_PHONEMES: Final = frozenset(",;:.?!")
OPENING_AFTER: Final = 2.0
"""A first sentence starts with its opening only when it is more than this many times the opening's
budget: the cut buys a long sentence's first audio (a plan's cost grows with its ids) and costs an
ordinary one a pause and a sentence of its own in the client's timeline. With the gateway's default
opening of 96 ids, sentences of more than about 190 ids (some sixteen words) are cut, so every one of
200 or more speaks its first audio at about the cost of a short sentence's."""
_PART_FILL: Final = 0.8
PART_OPENING_AFTER: Final = 2.0
"""The same for an opening of whole clauses whose rest is a part of the sentence planned whole
(`opening_span`). That cut keeps the sentence's prosody (`bench.opening_pairs`), and from 1.5 times
the opening it made a lone first audio much sooner; but the rest's plan (of the whole sentence) is
then due within the opening's second or so of audio, and bursts below the capacity ran dry
(docs/performance.md, "History"). So it starts where the cut started before, and from
EAGER_PART_OPENING_AFTER only for a stream that starts alone on the mesh."""
EAGER_PART_OPENING_AFTER: Final = 1.5
"""PART_OPENING_AFTER for a stream that starts with no other stream on the mesh (the gateway decides,
libs.synthesis.synthesizer): nothing else then waits on the cores while the rest's plan is made."""
LOOKAHEAD_IDS: Final = 8
"""Ids of the words after an opening that its plan reads too (to the end of a word): the opening's
clauses then do not end as an utterance ends, with the voice falling and the pause cut short
(`bench.opening_pairs` and a probe of how far to read on: docs/performance.md, "History")."""


@dataclass(frozen=True)
class Piece:
    """A part of a sentence that fits one model call."""

    text_start: int
    """Index (in characters, in the phonemised text) where the part starts."""
    phonemes: tuple[str, ...]
    """Its phonemes."""


class IdBudget:
    """How many model input ids phonemes take with one voice's phoneme-id map."""

    def __init__(self, phoneme_id_map: Mapping[str, Sequence[int]], max_ids: int) -> None:
        pad = len(phoneme_id_map[PAD])
        self._weights = {phoneme: len(ids) + pad for phoneme, ids in phoneme_id_map.items()}
        self.lead_ids = len(phoneme_id_map[BOS]) + pad
        """Ids before a sentence's first phoneme's (`^ _`)."""
        overhead = self.lead_ids + len(phoneme_id_map[EOS])
        self.max_ids = max_ids
        self.budget = max_ids - overhead
        """Ids a sentence's phonemes may take (the ids of `^ _` and `$` aside)."""
        if self.budget < 2 * self.weight(CONTINUATION) + 2:
            raise ValueError(f"max_ids {max_ids} leaves no room for phonemes")

    def weight(self, phonemes: Sequence[str]) -> int:
        """Ids that `phonemes` take in a sentence (unknown phonemes take none, as Piper skips them)."""
        weights = self._weights
        return sum(weights.get(phoneme, 0) for phoneme in phonemes)


def ends_with_punctuation(phonemes: Sequence[str]) -> bool:
    """Whether the last phoneme that is not a space is a punctuation mark."""
    for phoneme in reversed(phonemes):
        if phoneme != " ":
            return phoneme in _PUNCTUATION_PHONEMES
    return False


def with_continuation(phonemes: Sequence[str]) -> tuple[str, ...]:
    """`phonemes` ending as if a comma followed them (unchanged when they end with punctuation)."""
    if ends_with_punctuation(phonemes):
        return tuple(phonemes)
    return (*phonemes, *CONTINUATION)


def cut_sentence(
    text: str, sentence: PhonemizedSentence, budget: IdBudget, phonemize_text: Callable[[str], list[str]]
) -> list[Piece]:
    """`sentence` (of `text`) as pieces that each fit `budget`; one piece when it fits already.

    `phonemize_text` phonemises a part of a clause alone (all its sentences' phonemes joined).
    """
    if budget.weight(sentence.phonemes) <= budget.budget:
        return [Piece(sentence.text_start, sentence.phonemes)]
    units: list[Piece] = []
    for clause in sentence.clauses:
        if budget.weight(clause.phonemes) <= budget.budget:
            units.append(Piece(clause.text_start, clause.phonemes))
        else:
            units.extend(_cut_clause(text, clause.text_start, clause.text_end, clause.phonemes, budget, phonemize_text))
    if not units:
        units = _chop_phonemes(sentence.text_start, sentence.phonemes, budget)
    return _grouped(units, budget)


def needs_opening(first: IdBudget, weight: int, after: float = OPENING_AFTER) -> bool:
    """Whether a first sentence whose phonemes take `weight` ids starts with an opening of `first`'s
    budget (`after`: OPENING_AFTER, or PART_OPENING_AFTER for an opening whose rest is planned whole)."""
    return weight > after * first.budget


def leading_clauses(clauses: Sequence[PhonemizedClause], first: IdBudget) -> int:
    """How many of a sentence's leading clauses (never all of them) fit `first`'s budget together."""
    taken, weight = 0, 0
    while taken < len(clauses) - 1 and weight + first.weight(clauses[taken].phonemes) <= first.budget:
        weight += first.weight(clauses[taken].phonemes)
        taken += 1
    return taken


@dataclass(frozen=True)
class OpeningSpan:
    """Where a first sentence spoken as its opening and the rest is parted (`opening_span`)."""

    phoneme_index: int
    """Index in the sentence's phonemes of the space after the opening's last punctuation mark: the
    opening speaks the phonemes before it, the rest the phonemes from it on."""
    id_index: int
    """Index in the sentence's ids where that space's ids start (the same part, in ids)."""
    opening_phonemes: tuple[str, ...]
    """What the opening's plan reads: its clauses and LOOKAHEAD_IDS or more ids of the next words."""


def opening_span(phonemes: Sequence[str], head_phoneme_count: int, ids: IdBudget) -> OpeningSpan | None:
    """Where a sentence of `phonemes` whose first `head_phoneme_count` are its leading clauses (ending
    with a punctuation mark and a space) parts into its opening and the rest, with what the
    opening's plan reads; None when they do not end so, or when too little follows them to read on.
    `ids` weighs phonemes in ids as the voice's map writes them (any budget).
    """
    if not 2 <= head_phoneme_count < len(phonemes) or phonemes[head_phoneme_count - 1] != " ":
        return None
    if phonemes[head_phoneme_count - 2] not in _PUNCTUATION_PHONEMES:
        return None
    boundary = head_phoneme_count - 1
    read = 0
    for index in range(boundary + 1, len(phonemes)):
        read += ids.weight(phonemes[index - 1 : index])
        if phonemes[index] == " " and read >= LOOKAHEAD_IDS:
            return OpeningSpan(boundary, ids.lead_ids + ids.weight(phonemes[:boundary]), tuple(phonemes[: index + 1]))
    return None


def cut_first(
    text: str,
    sentence: PhonemizedSentence,
    first: IdBudget,
    budget: IdBudget,
    phonemize_text: Callable[[str], list[str]],
) -> list[Piece]:
    """`sentence` (of `text`) with its opening spoken as a piece of its own when the whole is long
    (`needs_opening`): a first sentence's first audio waits for its whole plan, and a short opening
    comes sooner. The opening is the leading clauses that fit `first` (the cut is where the
    punctuation pauses anyway), else the first clause's own text cut before a conjunction or at a
    space, ending as if a comma followed. The rest is cut to `budget` as any sentence is.
    """
    clauses = sentence.clauses
    if not needs_opening(first, first.weight(sentence.phonemes)) or not clauses:
        return cut_sentence(text, sentence, budget, phonemize_text)
    taken = leading_clauses(clauses, first)
    if taken:
        head = Piece(clauses[0].text_start, tuple(phoneme for clause in clauses[:taken] for phoneme in clause.phonemes))
        rest = PhonemizedSentence(
            tuple(phoneme for clause in clauses[taken:] for phoneme in clause.phonemes),
            clauses[taken].text_start, sentence.text_end, clauses[taken:],
        )  # fmt: skip
        return [head, *cut_sentence(text, rest, budget, phonemize_text)]
    opening = clauses[0]
    parts = _cut_clause(text, opening.text_start, opening.text_end, opening.phonemes, first, phonemize_text, continues=True)
    if len(parts) < 2:
        return cut_sentence(text, sentence, budget, phonemize_text)
    head, rest_start = parts[0], parts[1].text_start
    # What follows the opening is read again as one clause (its own phonemes, no comma added), then
    # the sentence's other clauses as they were.
    tail = PhonemizedClause(tuple(phonemize_text(text[rest_start : opening.text_end])), rest_start, opening.text_end)
    rest_clauses = (tail, *clauses[1:])
    rest = PhonemizedSentence(
        tuple(phoneme for clause in rest_clauses for phoneme in clause.phonemes), rest_start, sentence.text_end, rest_clauses
    )
    return [head, *cut_sentence(text, rest, budget, phonemize_text)]


def _cut_clause(
    text: str,
    start: int,
    end: int,
    phonemes: Sequence[str],
    budget: IdBudget,
    phonemize_text: Callable[[str], list[str]],
    continues: bool = False,
) -> list[Piece]:
    """A clause's text cut into parts that each fit, each phonemised alone (see the module
    docstring); with `continues` the last part ends as if a comma followed it too."""
    room = budget.budget - budget.weight(CONTINUATION)
    # Parts are cut by characters, whose phonemes vary; aiming below the limit makes a part that
    # comes out too long (and is cut again, into two small ones) rare.
    parts = min(end - start, math.ceil(budget.weight(phonemes) / (room * _PART_FILL)))
    if parts < 2:
        return _chop_phonemes(start, phonemes, budget)
    bounds = [start]
    for part in range(1, parts):
        if bounds[-1] + 1 >= end:
            break
        target = start + (end - start) * part // parts
        reach = (end - start) // (4 * parts)  # within a quarter of a part of the even split
        low, high = max(bounds[-1] + 1, target - reach), min(end - 1, target + reach)
        cut = best_break(text, low, high, target, floor=start) if low <= high else None
        bounds.append(cut if cut is not None else _character_cut(text, max(target, bounds[-1] + 1), end))
    bounds.append(end)
    spans = list(itertools.pairwise(bounds))
    pieces: list[Piece] = []
    for index, (part_start, part_end) in enumerate(spans):
        last = index == len(spans) - 1
        part_phonemes: Sequence[str] = phonemize_text(text[part_start:part_end])
        if continues or not last:
            part_phonemes = with_continuation(part_phonemes)
        if budget.weight(part_phonemes) <= budget.budget:
            pieces.append(Piece(part_start, tuple(part_phonemes)))
        elif part_end - part_start < end - start:
            pieces.extend(
                _cut_clause(text, part_start, part_end, part_phonemes, budget, phonemize_text, continues or not last)
            )
        else:
            pieces.extend(_chop_phonemes(part_start, part_phonemes, budget))
    return [piece for piece in pieces if piece.phonemes]


def _character_cut(text: str, index: int, end: int) -> int:
    """A cut between characters at or after `index`, not before a combining mark or joiner."""
    while index < end - 1 and (unicodedata.category(text[index]).startswith("M") or text[index] == "\u200d"):
        index += 1
    return index


def _chop_phonemes(text_start: int, phonemes: Sequence[str], budget: IdBudget) -> list[Piece]:
    """Last resort for text that cannot be cut further (one character espeak-ng reads at length):
    its phonemes in parts that fit, cut after a word where possible."""
    room = budget.budget - budget.weight(CONTINUATION)
    pieces: list[Piece] = []
    current: list[str] = []
    last_space = -1
    for phoneme in phonemes:
        current.append(phoneme)
        if phoneme == " ":
            last_space = len(current)
        if budget.weight(current) > room:
            cut = last_space if 0 < last_space < len(current) else len(current) - 1
            pieces.append(Piece(text_start, with_continuation(current[:cut])))
            current, last_space = current[cut:], -1
    if current:
        pieces.append(Piece(text_start, tuple(current)))
    return pieces


def chop_phonemes(phonemes: Sequence[str], budget: IdBudget) -> list[tuple[str, ...]]:
    """A sentence's phonemes in parts that fit `budget`, cut after a word where possible (for one
    that grew past it after the cut, when chosen phonemes took a placeholder's place)."""
    return [piece.phonemes for piece in _chop_phonemes(0, phonemes, budget)]


def _grouped(units: list[Piece], budget: IdBudget) -> list[Piece]:
    """Consecutive units joined into the fewest pieces that fit, the largest as small as possible;
    filled from the end, so any slack is in the first piece. A piece that ends where espeak-ng broke
    an unpunctuated clause (it does at ~800 bytes) ends as if a comma followed; each unit's weight
    holds room for that comma, so every piece still fits."""
    extra = budget.weight(CONTINUATION)
    weights = [budget.weight(unit.phonemes) + (0 if ends_with_punctuation(unit.phonemes) else extra) for unit in units]
    weights[-1] = budget.weight(units[-1].phonemes)  # the sentence's own end is kept as it is
    limit = budget.budget
    count = _pieces_needed(weights, limit)
    low, high = max(max(weights), math.ceil(sum(weights) / count)), limit
    while low < high:  # the smallest largest piece that still needs no more pieces
        middle = (low + high) // 2
        if _pieces_needed(weights, middle) <= count:
            high = middle
        else:
            low = middle + 1
    groups: list[list[Piece]] = []
    total = 0
    for unit, weight in zip(reversed(units), reversed(weights), strict=False):
        if not groups or total + weight > low:
            groups.append([])
            total = 0
        groups[-1].append(unit)
        total += weight
    groups.reverse()
    pieces = []
    for number, group in enumerate(groups):
        phonemes = tuple(phoneme for unit in reversed(group) for phoneme in unit.phonemes)
        pieces.append(Piece(group[-1].text_start, phonemes if number == len(groups) - 1 else with_continuation(phonemes)))
    return pieces


def _pieces_needed(weights: Sequence[int], limit: int) -> int:
    count, total = 1, 0
    for weight in weights:
        if total + weight > limit:
            count, total = count + 1, 0
        total += weight
    return count
