"""How far the gateway runs ahead of its listener: by the audio the listener has coming, not a fixed count.

Sentence k+1's acoustic work overlaps sentence k's vocoding, so the listener never waits at a
sentence boundary. How much more to overlap depends on the listener: one that has little audio
coming needs the sentences after that now too (short sentences go by fast); one with seconds
buffered does not, and work started for it early would only hold mel in the gateway. The workers
run whatever is sent by its deadline, so work sent ahead never delays a listener that needs
audio sooner (docs/ARCHITECTURE.md, "Scheduling and admission").
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Final

from libs.upstream.playback import PlaybackClock

MIN_SENTENCES_AHEAD: Final = 2
"""Sentences always allowed in flight: the one being vocoded and the next."""
MAX_SENTENCES_AHEAD: Final = 4
"""Sentences the producer may have started that are not fully vocoded yet (bounds the mel it holds)."""
AUDIO_AHEAD_S: Final = 5.0
"""Past MIN_SENTENCES_AHEAD, a sentence starts whenever less audio than this is ahead of it (the
listener's buffer plus the audio before it): about two ordinary sentences. Listeners that hold this
much let the gateway admit a new stream while the mesh is full for a moment (libs.synthesis.admission)."""
LOOKAHEAD_COVER: Final = 4.0
"""A sentence also starts while the audio ahead of it is less than this many times its way to first
audio as the mesh runs now (libs.upstream.pool.WorkerPool.first_audio_s): on a slow or busy machine
the work starts earlier."""
MIN_RECHECK_S: Final = 0.01
FIRST_AUDIO_RECHECK_S: Final = 0.02


class Lookahead:
    """Decides when the producer may start each sentence of one utterance."""

    def __init__(
        self,
        clock: PlaybackClock,
        max_sentences: int = MAX_SENTENCES_AHEAD,
        audio_ahead_s: float | Callable[[int], float] = AUDIO_AHEAD_S,
        min_sentences: int = MIN_SENTENCES_AHEAD,
    ) -> None:
        """`audio_ahead_s`: the audio ahead below which a sentence may start, or a function of the
        sentence's index that says it."""
        if not 1 <= min_sentences <= max_sentences:
            raise ValueError(f"need 1 <= min_sentences <= max_sentences, got {min_sentences} and {max_sentences}")
        self._clock = clock
        self._min_sentences = min_sentences
        self._max_sentences = max_sentences
        self._audio_ahead_s = audio_ahead_s if callable(audio_ahead_s) else lambda _index, value=audio_ahead_s: value
        self._vocoded = 0
        self._changed = asyncio.Event()

    @property
    def vocoded(self) -> int:
        """Sentences fully vocoded so far."""
        return self._vocoded

    def sentence_vocoded(self) -> None:
        """The reader has the last samples of one more sentence."""
        self._vocoded += 1
        self._changed.set()

    async def wait_turn(self, sentence_index: int) -> None:
        """Return once sentence `sentence_index` may start (all earlier ones have been started)."""
        while True:
            in_flight = sentence_index - self._vocoded
            if in_flight < self._min_sentences:
                return
            timeout_s: float | None = None
            # Until the listener has its first audio, more than the minimum would only compete with
            # it for the gateway's loop and the workers (a cached text's sentences all come at once).
            if in_flight < self._max_sentences and self._clock.started:
                ahead_s = self._clock.slack_s(self._clock.position_s(sentence_index))
                wanted_s = self._audio_ahead_s(sentence_index)
                if ahead_s < wanted_s:
                    return
                # The listener will have played that far by then (at least a moment: no busy loop).
                timeout_s = max(MIN_RECHECK_S, ahead_s - wanted_s)
            elif not self._clock.started:
                timeout_s = FIRST_AUDIO_RECHECK_S  # look again soon after the first audio
            self._changed.clear()
            try:
                async with asyncio.timeout(timeout_s):
                    await self._changed.wait()
            except TimeoutError:
                pass
