"""The gateway's view of one listener: how much audio it holds, and so how long each piece of work may wait.

A listener starts playing at its first audio and plays in real time; when its buffer runs dry it
waits (a stall) and resumes with the next audio. The gateway cannot see the client's player, so it
assumes exactly that. Every worker request then carries its slack: the time until the listener runs
dry, plus the audio that will reach it before the request's own audio (docs/ARCHITECTURE.md,
"Scheduling and admission").
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from typing import Final

from libs.scheduling.stream import DEFAULT_VOCODER_LAG_FRAMES, START_STEPS


class PlaybackClock:
    """One utterance's listener, as audio is delivered to it (`time.monotonic()` seconds)."""

    def __init__(
        self,
        frame_s: float,
        now: Callable[[], float] = time.monotonic,
        on_stall: Callable[[float], None] | None = None,
        listened: bool = True,
    ) -> None:
        """`on_stall(seconds)` hears of every gap the mesh makes the listener sit through: audio the
        mesh had ready `seconds` after what the listener held ran out (a client that reads late makes
        its own gaps, which are not the mesh's). `listened` False for an utterance nobody listens to
        as it is made (prewarming, a job): its worker requests say so (`unlistened`), and the workers
        run its steps on what their listeners leave."""
        self.frame_s = frame_s
        """Seconds of audio per mel frame."""
        self.listened = listened
        """Whether someone listens to the utterance as it is made."""
        self._now = now
        self._on_stall = on_stall
        self._asked_at_s = now()
        """When the listener asked: its first audio was due then."""
        self._dry_at_s: float | None = None
        self._delivered_s = 0.0
        self._sentence_frames: dict[int, int] = {}

    @property
    def delivered_s(self) -> float:
        """Audio delivered to the client so far (seconds)."""
        return self._delivered_s

    @property
    def started(self) -> bool:
        """Whether the listener has had its first audio."""
        return self._dry_at_s is not None

    def delivered(self, audio_s: float, ready_s: float | None = None) -> None:
        """`audio_s` more seconds of audio went to the client now, ready since `ready_s` (None: now)."""
        now = self._now()
        ready_s = now if ready_s is None else min(now, ready_s)
        if self._on_stall is not None and self._dry_at_s is not None and ready_s > self._dry_at_s and audio_s > 0:
            self._on_stall(ready_s - self._dry_at_s)
        self._dry_at_s = max(now if self._dry_at_s is None else self._dry_at_s, now) + audio_s
        self._delivered_s += audio_s

    def buffered_s(self) -> float:
        """Audio the listener holds now (seconds; 0 before its first audio or while it stalls)."""
        return 0.0 if self._dry_at_s is None else max(0.0, self._dry_at_s - self._now())

    def note_sentence(self, sentence_index: int, frame_count: int) -> None:
        """Sentence `sentence_index` is `frame_count` mel frames long (known from its first slice)."""
        self._sentence_frames[sentence_index] = frame_count

    def position_s(self, sentence_index: int, frame: int = 0) -> float:
        """Where `frame` of sentence `sentence_index` lies in the utterance's audio (seconds), from the
        lengths of the sentences before it that are known."""
        before = sum(frames for index, frames in self._sentence_frames.items() if index < sentence_index)
        return (before + frame) * self.frame_s

    def slack_s(self, position_s: float) -> float:
        """How long the audio at `position_s` may take to reach the client before the listener stalls:
        what it holds now plus the audio between what it was given and `position_s`. Negative when
        overdue: a first audio is due when the listener asked, a dry listener's audio when it ran
        dry, so every hop orders a late stream by how late it already is."""
        due_s = self._asked_at_s if self._dry_at_s is None else self._dry_at_s
        return due_s - self._now() + max(0.0, position_s - self._delivered_s)

    def slack_ms(self, sentence_index: int, frame: int = 0) -> float:
        """`slack_s` of `frame` of sentence `sentence_index`, in milliseconds, as the workers take it."""
        return 1000.0 * self.slack_s(self.position_s(sentence_index, frame))

    def vocoder_slack_ms(self, sentence_index: int, frame: int, lag_frames: int = DEFAULT_VOCODER_LAG_FRAMES) -> float:
        """The slack of mel slices from `frame` on: the vocoder's samples trail its mel by `lag_frames`,
        so they carry the audio of frames that much earlier."""
        return self.slack_ms(sentence_index, max(0, frame - lag_frames))


START_GAPS_KEPT: Final = 32
"""Listeners' starts whose gap between the first and the second piece `StartGaps` keeps."""
START_GAP_QUANTILE: Final = 0.9
"""The share of recent gaps that `RecentGaps.high_s` is at least."""


class RecentGaps:
    """The last `kept` waits seen, and a high quantile of them."""

    def __init__(self, kept: int) -> None:
        self._gaps: deque[float] = deque(maxlen=kept)

    def __len__(self) -> int:
        return len(self._gaps)

    def observe(self, gap_s: float) -> None:
        """A wait of `gap_s` (a clock that went back, a negative one, says nothing)."""
        if gap_s >= 0:
            self._gaps.append(gap_s)

    def high_s(self) -> float:
        """The START_GAP_QUANTILE quantile of the recent waits (0: none seen)."""
        if not self._gaps:
            return 0.0
        ordered = sorted(self._gaps)
        return ordered[min(len(ordered) - 1, int(START_GAP_QUANTILE * len(ordered)))]


class StartGaps:
    """How long the first piece of a listener's audio has had to last, lately, on this mesh: at most,
    over the next pieces of its first sentence up to STARTED_PIECES, how long after the first each
    came, less the audio of the pieces between. That is the wait a first piece must outlast, measured
    where it happens (queueing behind other streams' steps included, which no step's estimate holds).
    The second piece alone was not enough: where the CPU barely outpaces one listener (a quarter of a
    core) the third step, twice the second, came later than the first two pieces' audio lasted.

    The starts of listeners that were alone on the workers at their first piece are also kept apart,
    for a listener alone at its own: the gaps of the mesh's first requests, made together as it
    started, stayed in the shared history for the next 32 starts and held lone first audios back by
    half a second on a quarter of a core (docs/performance.md). They keep the starts that others joined after the first piece, as a
    listener alone now may be joined too: kept only while alone to the end, the lone history's short
    gaps let a stream that began alone start with too little to outlast the arrivals of a burst."""

    def __init__(self, kept: int = START_GAPS_KEPT) -> None:
        self._gaps = RecentGaps(kept)
        self._alone_gaps = RecentGaps(kept)

    def observe(self, gap_s: float, alone: bool = False) -> None:
        """A listener's first piece had to last `gap_s` (see the class docstring); `alone`: the listener
        was alone on the workers at its first piece."""
        self._gaps.observe(gap_s)
        if alone:
            self._alone_gaps.observe(gap_s)

    def high_s(self, alone: bool = False) -> float:
        """The START_GAP_QUANTILE quantile of the recent gaps (0: none seen); for a listener `alone` on
        the workers, of the recent lone starts' gaps, where there have been any."""
        return (self._alone_gaps if alone and self._alone_gaps else self._gaps).high_s()


PIECE_GAPS_KEPT: Final = 256
"""Waits between pieces of playing listeners that `PieceGaps` keeps (several per listener and second)."""


class PieceGaps(RecentGaps):
    """How long playing listeners have waited for their next piece of a sentence, lately, on this mesh:
    from when the last piece came (or, where the client was slow to take it, from when the reading
    could go on) to when the next came. A listener gets its audio a piece at a time, each up to a
    vocoder step long, and the more listeners share the cores the longer each waits for its next: what
    it holds below that wait it needs itself, and cannot lend another listener (libs.synthesis.admission).
    On an idle machine the wait is one step's time; at capacity, nearly a step's audio."""

    def __init__(self, kept: int = PIECE_GAPS_KEPT) -> None:
        super().__init__(kept)


START_SHARE: Final = 0.25
"""Streams that may be starting at once on a gateway's workers, as a share of the listeners they keep
playing (rounded, at least one). A start makes its listener's first seconds of audio as fast as the
CPU allows. In bursts of about 0.9 of the capacity on one core, all starting at once, a quarter of
the listeners ran dry just after they began (5 of 21), while the others' first seconds were made;
with turns for a quarter of the capacity, 1 to 2 in 21 to 28. Bursts of seven pay little in first
audio (p95 0.92 to 0.99x of all at once), bursts of five or six (0.8 of the capacity) more (p95 1.7x:
no one ran dry, where one or two did). A third of the capacity (three turns) let gaps back in.
Rounded down, a capacity just under eight gave one turn where those bursts had measured two."""
STARTED_PIECES: Final = START_STEPS
"""A stream has started once its listener holds this many pieces of its first sentence (about 2.7 s
of audio: the vocoder's steps of 32, 32, 64 and 128 frames), or the whole of a shorter one; the
vocoder counts the same start in audio made (`libs.scheduling.stream.START_STEPS`). Held on into
the next sentence (after an opening), the turns kept later streams waiting for whole plans: in the
same bursts, first audio p50 1.4x and p95 1.8x those of turns given back at the sentence's end, and
no fewer gaps."""


class StartSlots:
    """How many streams a gateway lets start on its workers at once: those whose first sentence the
    workers must make (a cached one starts at once), from the sentence's request until its listener
    holds STARTED_PIECES pieces of it, or all of it, or all its audio is made. More wait their turn in
    the order they came. `capacity()` is the listeners the workers keep playing (0: not known, and
    then nothing waits).

    Work nobody listens to (prewarming, a job's utterances) starts only while no listener is starting
    or waiting to (`take_unlistened`), and takes no listener's turn: it has no listener to run dry, and
    a turn it held for the seconds its start takes on a small CPU quota would keep a listener waiting
    as long."""

    def __init__(self, capacity: Callable[[], float], share: float = START_SHARE) -> None:
        self._capacity = capacity
        self._share = share
        self._starting = 0
        self._waiting: deque[asyncio.Future[None]] = deque()
        self._unlistened_waiting: list[asyncio.Future[None]] = []

    @property
    def starting(self) -> int:
        """Streams starting now."""
        return self._starting

    @property
    def waiting(self) -> int:
        """Streams waiting for their turn to start."""
        return sum(1 for waiter in self._waiting if not waiter.done())

    def limit(self) -> int:
        """Streams that may be starting at once now (0: any number)."""
        capacity = self._capacity()
        return max(1, round(self._share * capacity)) if capacity > 0 else 0

    async def take(self) -> None:
        """Wait for a turn to start (in the order of asking); `give_back` once started."""
        if not self._waiting and self._fits():
            self._starting += 1
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():  # given a turn as it was cancelled: pass it on
                self._starting -= 1
                self._wake()
            raise
        finally:
            if waiter in self._waiting:
                self._waiting.remove(waiter)

    def give_back(self) -> None:
        """A stream that took a turn has started (or ended)."""
        self._starting = max(0, self._starting - 1)
        self._wake()

    async def take_unlistened(self) -> None:
        """Wait until no listener is starting or waiting to, for work nobody listens to; it holds no
        turn, so there is nothing to give back."""
        while self._starting or self.waiting:
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._unlistened_waiting.append(waiter)
            try:
                await waiter
            finally:
                if waiter in self._unlistened_waiting:
                    self._unlistened_waiting.remove(waiter)

    def _fits(self) -> bool:
        limit = self.limit()
        return limit == 0 or self._starting < limit

    def _wake(self) -> None:
        while self._waiting and self._fits():
            waiter = self._waiting.popleft()
            if not waiter.done():
                self._starting += 1
                waiter.set_result(None)
        if not self._starting and not self.waiting:
            for waiter in self._unlistened_waiting:
                if not waiter.done():
                    waiter.set_result(None)
