"""Whether the gateway can take one more listener: only when every listener it serves keeps playing.

The mesh makes audio at its real-time capacity R (audio seconds per second, what its workers say they
hold: libs.upstream.loads), shared by every open stream. Listener i holds b_i seconds of audio and
still needs r_i more: exactly what its planned sentences make, and the rest of its text by the audio
a character of its voice makes (`Listener.sentence_planned`). By time t it needs min(r_i, t - b_i) seconds more than it holds (none before
b_i), and the mesh can make R * t by then; so the listeners all keep playing, with the work done
earliest-need first as the workers do it, exactly when

    sum_i min(r_i, max(0, t - b_i)) <= R * t    for every t > 0,

which only needs checking where the left side bends (each b_i and b_i + r_i). The test treats the
audio as a steady flow; it comes a piece at a time, each up to a vocoder step long, and the more
listeners share the cores the longer each waits for its next. What a listener holds below that wait
(`playing_wait_s`: how long playing listeners have waited for their next piece lately) it needs
itself, so b_i counts only the audio above it: without that, under arrivals above the capacity the
test admitted listeners until all held about a second, and up to a third of them then ran dry with the
test still passing. A new listener holds
nothing. So a burst of new streams is admitted up to R at once, while a stream arriving among
listeners who hold seconds of audio is admitted even above R for a while: their buffers pay for its
start. Streams other gateways hold on the same workers are taken off R, one audio second per second each.
A listener alone (none here, none of other gateways on the workers) is always taken: there is nobody to
keep playing, and a machine slower than real time still serves it as fast as it can, its first audio
held back until it holds what lets it play to the end without a gap (`Listener.start_buffer_s`).

Fairness conserves work: a client alone may fill the mesh. When it is full, a client holding more
than an equal share of it is tested against what is left once every other active client's share is
set aside, so its new streams are refused while the others' still fit. A client is active while it
holds a stream and for a while after it last asked (`active_client_s`): one that asks for short
streams one after another holds nothing between them, and a flood from another client must not take
its share in those gaps. A client under its equal share that finds the mesh full takes the place of a
stream of a client over its share that has not yet sent its first audio (`preemption`), as long as
that client is left at least as many streams as the newcomer's then holds: that stream
ends refused, with pushback, as it would have been had it asked a moment later, and nobody hears a
stream stop. Streams already playing are never stopped.

What listeners hear corrects the capacity: R is the workers' model of the machine, and where real
scheduling falls short of it (steps that cannot be split, cores shared with the other worker) a
listener runs dry below R. A gap a listener hears while the mesh is loaded cuts the share of R that
admission trusts (`StallFeedback`), at most once per CUT_SPACING_S; the share grows back towards the
whole of R with a half-life of SHARE_RECOVERY_HALF_LIFE_S while no listener runs dry. The capacity the
gateway reports is what admission takes now: R times the headroom times that share.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Final

from libs.upstream.playback import PlaybackClock

_log = logging.getLogger(__name__)

DEFAULT_AUDIO_S_PER_CHAR: Final = 0.07
"""Audio seconds per character of English text at speed 1, until this gateway has measured its own."""
RATE_WEIGHT: Final = 0.1
"""Share of the difference to a finished stream's audio per character that is taken."""
EPSILON_S: Final = 1e-6
MIN_RETRY_AFTER_S: Final = 0.2
MAX_RETRY_AFTER_S: Final = 10.0
DEFAULT_ACTIVE_CLIENT_S: Final = MAX_RETRY_AFTER_S
"""How long a client counts as active after it last asked or its last stream ended: as long as a
refused client may be told to wait before it asks again."""
MAX_REMEMBERED_CLIENTS: Final = 4096
"""Clients remembered as recently active at most (the oldest are forgotten first)."""
MAX_REMEMBERED_VOICES: Final = 256
"""Voices whose audio per character is remembered at most (the first learned is forgotten first)."""
STALL_BAR_S: Final = 0.1
"""A gap shorter than this is not counted against the capacity (a player's jitter buffer hides it)."""
SHARE_CUT: Final = 0.9
"""What one counted gap multiplies the trusted share of the capacity by."""
CUT_SPACING_S: Final = 2.0
"""Gaps within this long of the last cut are one overload, cut once: a burst's listeners run dry together."""
DEFAULT_MIN_SHARE: Final = 0.5
"""The least share of the capacity admission trusts, however many gaps listeners hear (1: gaps cut nothing)."""
SHARE_RECOVERY_HALF_LIFE_S: Final = 60.0
"""How long the distrusted part of the capacity takes to halve while no listener runs dry."""
LOADED_SHARE: Final = 0.5
"""A gap counts against the capacity only while the listeners are at least this share of what admission
takes: one heard on a quiet mesh (a worker lost mid-stream, a slow hop) is no sign of too many listeners."""


@dataclass
class Listener:
    """One open stream as admission sees it."""

    client: str
    """Who it counts against (an API key or an address; "" for work no listener waits for)."""
    expected_audio_s: float
    """The audio it will have in all (an estimate until its text is all spoken)."""
    clock: PlaybackClock | None = None
    """Its listener's clock, once its audio flows."""
    on_stall: Callable[[float], None] | None = None
    """Told of every gap its listener sits through (set by the admission that holds it)."""
    start_buffer: Callable[[], float] | None = None
    """The audio its listener should hold before it starts playing (set by the admission that holds it)."""
    is_alone: Callable[[], bool] | None = None
    """Whether it is the only stream on the workers now (set by the admission that holds it)."""
    cost: float = 1.0
    """What a second of its audio costs the mesh, in seconds of the capacity (1: the voice's quality tier;
    less for its fast tier, libs.voice.tiers)."""
    voice: str = ""
    """The voice it is spoken in: what a character makes is learned per voice (a Mandarin character is
    a syllable, an English one a fraction of one)."""
    characters: int = 0
    """Characters of its text known so far (all of it for a whole text; what has come of a streamed one)."""
    audio_s_per_char: float = DEFAULT_AUDIO_S_PER_CHAR
    """What a character of text not yet planned is taken to make (set by the admission that holds it:
    its measure for the voice)."""
    text_complete: bool = False
    """Whether `characters` is the whole text: then the estimate may fall as well as rise."""
    refuse_late: Callable[[str], None] | None = None
    """Ends its stream refused, for the reason given, before any of its audio reached its listener (set
    by the synthesizer that serves it, and cleared once its first audio is out): None, it cannot be."""
    id: int = field(default_factory=itertools.count().__next__)
    _planned_characters: int = field(default=0, repr=False)
    _planned_audio_s: float = field(default=0.0, repr=False)

    def sentence_planned(self, characters: int, audio_s: float) -> None:
        """A sentence of `characters` characters was planned: it makes exactly `audio_s`. The audio
        expected becomes what the planned sentences make plus the rest of the text by its characters:
        a text of numbers, or of another script, makes far more audio per character than the
        gateway's average, and the admission test must see what listeners will really need."""
        self._planned_characters += max(0, characters)
        self._planned_audio_s += max(0.0, audio_s)
        estimate = self._estimate_s()
        self.expected_audio_s = estimate if self.text_complete else max(self.expected_audio_s, estimate)

    def all_planned(self) -> None:
        """Every sentence of its text was planned: it makes exactly what they make."""
        self.text_complete = True
        self.expected_audio_s = self._planned_audio_s

    def text_arrived(self, characters: int) -> None:
        """`characters` more of a streamed text came: it needs at least their audio too."""
        self.characters += max(0, characters)
        self.expected_audio_s = max(self.expected_audio_s, self._estimate_s())

    def _estimate_s(self) -> float:
        """What the planned sentences make, and the rest of the text known so far by its characters."""
        return self._planned_audio_s + max(0, self.characters - self._planned_characters) * self.audio_s_per_char

    def alone(self) -> bool:
        """Whether it is the only stream on the workers now: no other of this gateway's, none of
        others' (False where no admission holds it)."""
        return self.is_alone is not None and self.is_alone()

    def start_buffer_s(self) -> float:
        """Audio its listener should hold before it starts, so that it then plays to the end without a gap."""
        return self.start_buffer() if self.start_buffer is not None else 0.0

    def stalled(self, gap_s: float) -> None:
        """Its listener sat `gap_s` seconds with an empty buffer before the latest audio."""
        if self.on_stall is not None:
            self.on_stall(gap_s)

    def buffered_s(self) -> float:
        """Audio its listener holds now."""
        return self.clock.buffered_s() if self.clock is not None else 0.0

    def remaining_s(self) -> float:
        """Audio it still needs made."""
        delivered = self.clock.delivered_s if self.clock is not None else 0.0
        return max(0.0, self.expected_audio_s - delivered)


def keeps_playing(listeners: Sequence[tuple[float, float] | tuple[float, float, float]], rate: float) -> bool:
    """Whether a mesh making `rate` audio seconds per second keeps every listener (buffered seconds,
    remaining seconds[, cost of its audio per second, 1 by default]) playing: the module docstring's
    test, each listener's need weighted by its cost."""
    needing = [(max(0.0, item[0]), item[1], item[2] if len(item) > 2 else 1.0) for item in listeners if item[1] > 0]
    if not needing:
        return True
    if rate <= 0:
        return False
    # Just after now, every listener that holds nothing needs its cost per second.
    if sum(cost for held, _, cost in needing if held <= EPSILON_S) > rate + EPSILON_S:
        return False
    for t in sorted({held for held, _, _ in needing} | {held + remaining for held, remaining, _ in needing}):
        if t <= EPSILON_S:
            continue
        needed = sum(cost * min(remaining, max(0.0, t - held)) for held, remaining, cost in needing)
        if needed > rate * t + EPSILON_S:
            return False
    return True


class StallFeedback:
    """The share of the mesh's capacity that admission trusts, cut when listeners run dry under load
    and recovering while none does (module docstring)."""

    def __init__(self, now: Callable[[], float] = time.monotonic, min_share: float = DEFAULT_MIN_SHARE) -> None:
        self._now = now
        self._min_share = min_share
        self._share_at_cut = 1.0
        self._cut_at: float | None = None

    def share(self) -> float:
        """The share trusted now (the least share to 1)."""
        if self._cut_at is None:
            return 1.0
        elapsed_s = max(0.0, self._now() - self._cut_at)
        return 1.0 - (1.0 - self._share_at_cut) * 0.5 ** (elapsed_s / SHARE_RECOVERY_HALF_LIFE_S)

    def stalled(self, gap_s: float, loaded: bool) -> bool:
        """A listener sat `gap_s` with an empty buffer, the mesh `loaded` or not; whether the share was cut."""
        if gap_s < STALL_BAR_S or not loaded or self._min_share >= 1.0:
            return False
        now = self._now()
        if self._cut_at is not None and now - self._cut_at < CUT_SPACING_S:
            return False
        self._share_at_cut = max(self._min_share, self.share() * SHARE_CUT)
        self._cut_at = now
        return True


class RealtimeAdmission:
    """The listeners of one gateway, and the test a new one must pass."""

    def __init__(
        self,
        capacity: Callable[[], float],
        other_streams: Callable[[], int],
        headroom: float,
        active_client_s: float = DEFAULT_ACTIVE_CLIENT_S,
        now: Callable[[], float] = time.monotonic,
        on_stall: Callable[[float], None] | None = None,
        min_share: float = DEFAULT_MIN_SHARE,
        playing_wait_s: Callable[[], float] = lambda: 0.0,
    ) -> None:
        """`capacity()` is the mesh's real-time capacity (0: unknown, and then every listener is
        admitted); `other_streams()` the streams other gateways hold on the same workers; `headroom`
        the share of the capacity listeners may need; `active_client_s` how long a client that holds
        no stream still counts as active after it last asked; `on_stall(seconds)` hears of every gap
        a listener sits through; `min_share` the least share of the capacity those gaps leave trusted;
        `playing_wait_s()` how long a playing listener may wait for its next piece now (module docstring)."""
        self._capacity = capacity
        self._other_streams = other_streams
        self._headroom = headroom
        self._active_client_s = active_client_s
        self._now = now
        self._on_stall = on_stall
        self._playing_wait_s = playing_wait_s
        self.feedback = StallFeedback(now, min_share)
        self._listeners: dict[int, Listener] = {}
        self._last_asked: dict[str, float] = {}  # client -> when it last asked or its last stream ended, oldest first
        self.audio_s_per_char = DEFAULT_AUDIO_S_PER_CHAR
        """Audio seconds per character over every voice (for a voice not yet heard)."""
        self._per_char_of: dict[str, float] = {}
        """Audio seconds per character of each voice heard to the end of a stream."""

    def other_streams(self) -> int:
        """Streams other gateways hold on the same workers now."""
        return self._other_streams()

    @property
    def listeners(self) -> Iterable[Listener]:
        return self._listeners.values()

    def listening(self) -> list[Listener]:
        """The listeners someone waits on (work no listener waits for left out)."""
        return [listener for listener in self._listeners.values() if listener.client]

    def expected_audio_s(self, characters: int, voice: str = "") -> float:
        """The audio a text of `characters` in `voice` makes, by what this gateway has measured."""
        return characters * self.audio_s_per_char_of(voice)

    def audio_s_per_char_of(self, voice: str) -> float:
        """What a character of `voice` makes, as far as this gateway has measured (every voice's
        measure until one of its streams has finished)."""
        return self._per_char_of.get(voice, self.audio_s_per_char)

    def refusal(self, client: str, expected_audio_s: float, cost: float = 1.0, share: float = 1.0) -> str | None:
        """Why a new listener of `client` that expects `expected_audio_s` of audio at `cost` per second
        (`Listener.cost`) cannot be taken now into `share` of what admission takes, or None. Work no
        listener waits for (client "") is never refused here."""
        if not client or not self._headroom:
            return None
        self._asked(client)
        capacity = self._capacity()
        if capacity <= 0:
            return None
        others = self._other_streams()
        demand = self._demand()
        if not demand and others <= 0:
            return None  # nobody to keep playing: a machine slower than real time still serves one listener
        rate = self._admitted(capacity) * share - others
        demand.append((0.0, max(expected_audio_s, EPSILON_S), cost))
        if not keeps_playing(demand, rate):
            held = f"its {len(demand) - 1} listeners" + (f" and {others} streams of other callers" if others > 0 else "")
            return f"the mesh makes {capacity:.1f} audio s per s and {held} need that to keep playing; retry when one ends"
        reserve = self._reserve_for_others(client, rate)
        if reserve > 0 and not keeps_playing(demand, rate - reserve):
            return (
                "the mesh is nearly full and this client already holds more than an equal share of it; its other "
                "streams go first when the mesh is busy: retry when one ends"
            )
        return None

    def fits(self, share: float, expected_audio_s: float = 0.0, cost: float = 1.0) -> bool:
        """Whether the listeners admitted, with a new one expecting `expected_audio_s` at `cost` per
        second (0: none), keep playing in `share` of what admission takes (True while the capacity is
        unknown or admission is off)."""
        capacity = self._capacity()
        if capacity <= 0 or not self._headroom:
            return True
        demand = self._demand()
        if expected_audio_s > 0:
            demand.append((0.0, expected_audio_s, cost))
        return keeps_playing(demand, self._admitted(capacity) * share - self._other_streams())

    def _demand(self) -> list[tuple[float, float, float]]:
        """Each listener's (audio it holds that can pay for others, audio it still needs, cost): what it
        holds less the wait for its next piece, which it needs itself (module docstring)."""
        return self._demand_of(self.listening())

    def _demand_of(self, listeners: Iterable[Listener]) -> list[tuple[float, float, float]]:
        wait_s = max(0.0, self._playing_wait_s())
        return [(listener.buffered_s() - wait_s, listener.remaining_s(), listener.cost) for listener in listeners]

    def listener_capacity(self) -> float:
        """The listeners admission takes now: the mesh's capacity times the headroom, times the share
        that what listeners heard lets it trust (the capacity itself when admission is off)."""
        return self._admitted(self._capacity())

    def _admitted(self, capacity: float) -> float:
        return capacity * self._headroom * self.feedback.share() if self._headroom else capacity

    def _stalled(self, gap_s: float) -> None:
        if self._on_stall is not None:
            self._on_stall(gap_s)
        listening = len(self.listening())
        if self._headroom and self.feedback.stalled(gap_s, loaded=listening >= LOADED_SHARE * self.listener_capacity()):
            _log.warning(
                "a listener ran dry for %.2f s with %d listeners on the mesh: admission now takes %.0f%% of its capacity",
                gap_s, listening, 100 * self.feedback.share(),
            )  # fmt: skip

    def retry_after_s(self) -> float:
        """When a refused listener may find room: about when the listener nearest its end has all its
        audio, at an equal share of the capacity (at least MIN_RETRY_AFTER_S, at most MAX_RETRY_AFTER_S)."""
        capacity = self._capacity()
        listeners = self.listening()
        if capacity <= 0 or not listeners:
            return MIN_RETRY_AFTER_S
        soonest_s = min(listener.remaining_s() for listener in listeners) * len(listeners) / capacity
        return min(MAX_RETRY_AFTER_S, max(MIN_RETRY_AFTER_S, soonest_s))

    def preemption(self, client: str, expected_audio_s: float, cost: float = 1.0) -> list[Listener] | None:
        """Where a new listener of `client` was refused: the streams to refuse late so that it fits
        (module docstring), or None where none may be. They are those of clients over an equal share
        of the mesh that have sent no audio yet, the newest first, never leaving a client fewer streams
        than `client` then holds (with equal shares of 1.2 streams, a client holding 2 gives one to a
        client holding none); none at all when `client` itself would be over its share with the new
        one. The caller refuses them (`refuse`) and admits the new listener."""
        capacity = self._capacity()
        if not client or not self._headroom or capacity <= 0:
            return None
        rate = self._admitted(capacity) - self._other_streams()
        held = self._held()
        held.setdefault(client, 0)
        share = rate / len(held)
        if held[client] + 1 > share:
            return None
        new = (0.0, max(expected_audio_s, EPSILON_S), cost)
        kept = self.listening()
        refused: list[Listener] = []
        for listener in sorted(kept, key=lambda listener: listener.id, reverse=True):
            holds = held[listener.client]
            if listener.refuse_late is None or listener.client == client or holds <= share or holds - 1 < held[client] + 1:
                continue
            kept.remove(listener)
            refused.append(listener)
            held[listener.client] -= 1
            if keeps_playing([*self._demand_of(kept), new], rate):
                return refused
        return None

    def refuse(self, listeners: Iterable[Listener], reason: str) -> None:
        """End `listeners` refused for `reason` before their first audio (`preemption`); they no
        longer count."""
        for listener in listeners:
            if listener.refuse_late is not None:
                listener.refuse_late(reason)
                listener.refuse_late = None
            self._listeners.pop(listener.id, None)

    def _held(self) -> dict[str, int]:
        """The streams each active client holds (0 for one active without a stream)."""
        held = dict.fromkeys(self._last_asked, 0)
        for listener in self.listening():
            held[listener.client] = held.get(listener.client, 0) + 1
        return held

    def _reserve_for_others(self, client: str, rate: float) -> float:
        """The capacity kept for other clients when `client` holds more than an equal share: what each
        other active client's equal share has left (0 when `client` is within its own)."""
        held = self._held()
        others = [count for name, count in held.items() if name != client]
        if not others:
            return 0.0
        share = rate / (len(others) + 1)
        if held.get(client, 0) + 1 <= share:
            return 0.0
        return sum(max(0.0, share - count) for count in others)

    def _asked(self, client: str) -> None:
        """Note that `client` is active now, and forget the clients that have not been for `active_client_s`."""
        now = self._now()
        self._last_asked.pop(client, None)
        self._last_asked[client] = now
        while self._last_asked:
            oldest, when = next(iter(self._last_asked.items()))
            if now - when <= self._active_client_s and len(self._last_asked) <= MAX_REMEMBERED_CLIENTS:
                break
            del self._last_asked[oldest]

    def add(self, listener: Listener) -> None:
        self._listeners[listener.id] = listener
        listener.is_alone = lambda: self._other_streams() == 0 and all(other is listener for other in self._listeners.values())
        listener.audio_s_per_char = self.audio_s_per_char_of(listener.voice)
        if listener.client:  # work no listener waits for hears nothing
            listener.on_stall = self._stalled
            if self._headroom:
                listener.start_buffer = lambda: self._start_buffer_s(listener)

    def _start_buffer_s(self, listener: Listener) -> float:
        """What `listener` should hold before it plays: where it is alone on a mesh slower than real time
        (taken anyway: nobody else to keep playing), the mesh makes R < 1 audio seconds per second, and a
        listener holding b plays its A seconds through without a gap exactly when b >= (1 - R) * A. R is
        the rate admission trusts (`listener_capacity`): the workers' model overstates what a listener
        gets by as much as gaps heard have shown. With others on the mesh admission has already kept
        everyone playing, and nothing is held."""
        rate = self.listener_capacity()
        if not 0 < rate < 1:
            return 0.0
        if self._other_streams() > 0 or any(other is not listener for other in self.listening()):
            return 0.0
        return (1.0 - rate) * listener.remaining_s()

    def remove(self, listener: Listener, finished: bool = False) -> None:
        """`listener` is over; when it `finished` whole, its text teaches the audio a character of its voice makes."""
        self._listeners.pop(listener.id, None)
        if listener.client:
            self._asked(listener.client)
        if finished and listener.characters > 0 and listener.clock is not None and listener.clock.delivered_s > 0:
            measured = listener.clock.delivered_s / listener.characters
            self.audio_s_per_char += RATE_WEIGHT * (measured - self.audio_s_per_char)
            known = self._per_char_of.get(listener.voice)
            self._per_char_of[listener.voice] = measured if known is None else known + RATE_WEIGHT * (measured - known)
            if len(self._per_char_of) > MAX_REMEMBERED_VOICES:
                del self._per_char_of[next(iter(self._per_char_of))]
