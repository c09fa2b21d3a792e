"""One stream's schedule on a worker: when its listener needs each step's audio.

Each request from the gateway says how long its listener can wait (`playback_slack_ms`): the audio
buffered ahead of the listener, or, overdue, minus how long it has waited (a first audio, or a
listener that ran dry), less what the gateway knows must follow this worker's step (the next
worker's step, the hops). The worker turns that into a deadline on its own clock when the request
arrives and moves it on by the audio each step makes (docs/ARCHITECTURE.md, "Scheduling and
admission").
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from libs.voice.chunking import VOCODER_SCHEDULE, ChunkSchedule
from libs.wire.errors import InvalidRequestError

RequestT = TypeVar("RequestT")

DEFAULT_VOCODER_LAG_FRAMES: Final = 21
"""The default voice's vocoder lag (frames its samples trail its mel: `VocoderEngine.lag_frames`); an
acoustic request that carries no pacing of its vocoder is paced with it (a test ties the two)."""
UNLISTENED_DUE_S: Final = 3600.0
"""When a step of work nobody listens to as it is made (prewarming, a long-form job) is due: this long
after its request arrived, so that it runs after every listener's step (which are due within seconds),
on what they leave, in the order such requests came."""
START_STEPS: Final = 4
"""A stream is in its start until its listener has the audio of this many of a sentence's first vocoder
steps (32, 32, 64 and 128 frames, less the lag: about 2.7 s), or the whole of a shorter sentence: the
gateway counts them as pieces (`libs.upstream.playback.STARTED_PIECES`, where the length was tuned),
the vocoder as audio made (`libs.serving.vocoder_work`)."""
READ_AHEAD_REQUESTS: Final = 16
"""Requests a worker reads ahead of the one it works on: enough that each is stamped when it
arrives, few enough that gRPC flow control still holds back a gateway that writes too much."""


@dataclass(frozen=True)
class VocoderPacing:
    """How a vocoder turns mel into audio: in steps of `schedule`, its samples trailing the mel by
    `lag_frames`. The acoustic worker paces its chunks by it: a chunk is needed when the audio before
    the vocoder step it completes runs out."""

    lag_frames: int = DEFAULT_VOCODER_LAG_FRAMES
    """Frames the vocoder's samples trail its mel."""
    schedule: ChunkSchedule = VOCODER_SCHEDULE
    """The vocoder's steps."""

    @classmethod
    def from_message(cls, message: Any) -> VocoderPacing:
        """The pacing a request carries (`tts.acoustic.v1.VocoderPacing`), or the default one when it
        carries none or one that makes no sense."""
        if message is None or message.lag_frames <= 0 or message.first_step_frames <= 0:
            return DEFAULT_PACING
        try:
            schedule = ChunkSchedule(
                first_chunk_frames=int(message.first_step_frames),
                growth=float(message.step_growth) if message.step_growth >= 1 else 1.0,
                max_chunk_frames=max(int(message.max_step_frames), int(message.first_step_frames)),
                first_chunks=max(1, int(message.first_steps)),
            )
        except ValueError:
            return DEFAULT_PACING
        return cls(lag_frames=int(message.lag_frames), schedule=schedule)

    def first_audio_frames(self) -> int:
        """Frames of audio a sentence's first vocoder step makes: its frames less the lag."""
        return max(0, self.schedule.chunk_frames(0) - self.lag_frames)

    def frames_out(self, mel_frames: int, total_frames: int) -> int:
        """Frames of a sentence's audio the vocoder can have made once its first `mel_frames` of mel
        are in: whole steps only, each trailing its mel by `lag_frames`; the sentence's last step
        takes what is left and ends its audio."""
        if mel_frames >= total_frames:
            return total_frames
        end, index = 0, 0
        while end + self.schedule.chunk_frames(index) <= mel_frames:
            end += self.schedule.chunk_frames(index)
            index += 1
        return max(0, end - self.lag_frames)


DEFAULT_PACING: Final = VocoderPacing()


@dataclass
class StreamPlayback:
    """A worker's own view of one stream's listener: when the stream's first audio was made here, and
    how much audio it has made since. A listener starts playing at its first audio, not when it asked,
    so the audio made here says when it runs dry at the earliest; a request's slack, measured by the
    gateway, may have been taken before the listener started and then says "overdue" too soon."""

    started_s: float | None
    """When the stream's first audio was made (`time.monotonic()`); None while its listener has heard
    nothing; -inf for a stream that opened on a playing listener (a resumed one), or that nobody listens to."""
    made_s: float = 0.0
    """Audio made since (seconds)."""
    startup_audio_s: float = 0.0
    """Audio a just-started listener holds while its stream is still starting: what the vocoder's first
    step makes, less than a step's worth of audio (`VocoderPacing.first_audio_frames`)."""
    asked_s: float = math.nan
    """When its listener asked, by its first request's slack (this worker's clock): how a starting
    stream ranks among first audios."""
    unlistened: bool = False
    """Nobody listens to the stream's audio as it is made (prewarming, a job): its steps are due
    UNLISTENED_DUE_S after their requests, and it never counts as starting or as a first audio."""

    @classmethod
    def opening(cls, first_audio: bool, startup_audio_s: float = 0.0, unlistened: bool = False) -> StreamPlayback:
        """A stream whose first request starts its audio (`first_audio`) or continues a playing
        listener's; a starting one stays starting until it has made more than `startup_audio_s`.
        `unlistened`: a stream nobody listens to as it is made (its first request's `unlistened`)."""
        if unlistened:
            return cls(float("-inf"), unlistened=True)
        return cls(None if first_audio else float("-inf"), startup_audio_s=startup_audio_s if first_audio else 0.0)

    @property
    def first_audio(self) -> bool:
        """True while the stream's listener has heard nothing."""
        return self.started_s is None

    @property
    def never_starts(self) -> bool:
        """True for a stream that opened on a playing listener (a resumed one) or on none (unlistened):
        its steps are never a start."""
        return self.started_s == float("-inf")

    @property
    def starting(self) -> bool:
        """True while the stream is starting: its listener has heard nothing, or only the first step's
        audio, which lasts less than the next step takes while other first audios wait. Its steps go
        with first audios, in the order the listeners asked, so a listener that heard its first words
        hears the next ones before a later listener's first."""
        return self.started_s is None or (not self.never_starts and self.made_s <= self.startup_audio_s + 1e-9)

    def within_first(self, audio_s: float) -> bool:
        """True while this worker has made less than the first `audio_s` of the listener's audio (never
        for a stream that `never_starts`)."""
        return not self.never_starts and self.made_s < audio_s

    def deadline(self, received_s: float, playback_slack_ms: float, downstream_ms: float = 0.0) -> PlaybackDeadline:
        """The deadline of a request that arrived at `received_s` with `playback_slack_ms` of slack
        (negative: overdue already), of which `downstream_ms` was taken off for what follows this
        worker's step; InvalidRequestError when either is not a finite number (or downstream_ms is
        negative)."""
        if not math.isfinite(playback_slack_ms):
            raise InvalidRequestError(
                f"playback_slack_ms is {playback_slack_ms}; send a finite number of milliseconds (the audio the "
                "listener holds before this request's audio, negative when overdue)"
            )
        if not math.isfinite(downstream_ms) or downstream_ms < 0:
            raise InvalidRequestError(
                f"downstream_ms is {downstream_ms}; send the milliseconds that follow this worker's step before the "
                "listener hears it (0 or more)"
            )
        due_s = received_s + (UNLISTENED_DUE_S if self.unlistened else float(playback_slack_ms) / 1000.0)
        if math.isnan(self.asked_s):
            self.asked_s = due_s
        return PlaybackDeadline(due_s, self, float(downstream_ms) / 1000.0)

    def made(self, audio_s: float, done_s: float | None = None) -> None:
        """A step done at `done_s` (now by default) made `audio_s` of the listener's audio."""
        if self.started_s is None:
            self.started_s = time.monotonic() if done_s is None else done_s
        self.made_s += max(0.0, audio_s)


@dataclass
class PlaybackDeadline:
    """When the listener of one request needs its next audio, on this worker's `time.monotonic()` clock."""

    listener_s: float
    """When the listener needs the audio of the request's next step, by the request's slack."""
    stream: StreamPlayback
    """The request's stream."""
    downstream_s: float = 0.0
    """What follows this worker's step before the listener hears its audio (the next worker's step,
    the hops): taken off the stream's own view of when the listener runs dry, as the gateway took it
    off the slack."""

    @property
    def first_audio(self) -> bool:
        """True while the stream's listener has heard nothing."""
        return self.stream.first_audio

    @property
    def starting(self) -> bool:
        """True while the stream is starting (`StreamPlayback.starting`): the step goes with first
        audios, before steps not about to run dry (libs.scheduling.executor)."""
        return self.stream.starting

    @property
    def at_s(self) -> float:
        """The deadline of the request's next step: by its slack, or later when the audio this worker
        made since the stream's first audio lasts longer."""
        return self.at_offset_s(0.0)

    def at_offset_s(self, offset_s: float) -> float:
        """The deadline of a step whose audio starts `offset_s` after the audio the request's slack
        was measured for (negative: before it): by the slack, or by the audio made here since the
        stream's first, less what must follow this step, whichever is later."""
        by_slack = self.listener_s + offset_s
        if self.stream.started_s is None:
            return by_slack
        return max(by_slack, self.stream.started_s + self.stream.made_s - self.downstream_s)

    def advance(self, audio_s: float, done_s: float | None = None) -> None:
        """A step done at `done_s` (now by default) made `audio_s` of audio: the next one is needed that
        much later."""
        self.listener_s += max(0.0, audio_s)
        self.stream.made(audio_s, done_s)


async def stamped(requests: AsyncIterator[RequestT]) -> AsyncIterator[tuple[RequestT, float]]:
    """`requests` with the `time.monotonic()` at which each arrived.

    A background task reads up to READ_AHEAD_REQUESTS ahead, so a request that arrives while the
    stream's previous one is still being worked on is stamped then, not when its turn comes (its
    slack was measured when it was sent). An error reading the stream is raised in order.
    """
    queue: asyncio.Queue[tuple[Any, float]] = asyncio.Queue(READ_AHEAD_REQUESTS)
    end = object()

    async def read() -> None:
        try:
            async for request in requests:
                await queue.put((request, time.monotonic()))
        except Exception as error:  # handed to the consumer, raised there in order
            await queue.put((error, 0.0))
            return
        await queue.put((end, 0.0))

    reader = asyncio.ensure_future(read())
    try:
        while True:
            item, received_s = await queue.get()
            if item is end:
                return
            if isinstance(item, Exception):
                raise item
            yield item, received_s
    finally:
        reader.cancel()
