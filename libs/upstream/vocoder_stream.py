"""One utterance's vocoder stream that survives worker failures, giving each sample exactly once.

The stream keeps every mel slice of each sentence the client has not fully received. When the
call breaks (or the worker goes silent while it owes samples), a new call is opened on another
endpoint and primed: the current sentence's slices that lie wholly before the client's position go
as `context_only` (vocoded for context, not returned), the rest and every later sentence's slices
go again as normal. Chunk windows are fixed by frame index, so the new worker's samples
are bit-identical to the broken call's; replies carry `first_sample`, and whatever the client
already has is dropped, so it hears no gap and no repeat.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import grpc
import numpy as np

from libs.pb.tts.common.v1 import mel_pb2
from libs.pb.tts.vocoder.v1 import vocoder_pb2
from libs.routing.endpoints import Endpoint
from libs.scheduling.stream import DEFAULT_VOCODER_LAG_FRAMES
from libs.upstream.calls import CALL_ERRORS, Deadline, StreamEnded, WorkerSilent
from libs.upstream.playback import PlaybackClock
from libs.upstream.pool import WorkerPool
from libs.upstream.resumable import ResumableCall
from libs.voice.tiers import FAST
from libs.wire.errors import DownstreamError
from libs.wire.limits import MAX_FRAMES_PER_MESSAGE

# A vocoder answers a step once its frames have arrived: its longest step plus the frames its output
# trails the mel. Past this many unanswered frames (a wide margin over both) it owes samples even
# before the sentence's last slice, so its silence counts against the attempt timeout.
UNANSWERED_FRAMES_OWED: Final = 384


@dataclass
class _SentenceMel:
    """The slices of one sentence sent so far, kept until the client has all of its samples."""

    index: int
    tier: str = ""
    """The voice's tier it is spoken in ("": the stream's)."""
    slices: list[mel_pb2.MelSlice] = field(default_factory=list)
    frames_sent: int = 0
    complete: bool = False
    """Whether its last slice is among `slices`."""


@dataclass(frozen=True)
class Samples:
    """New samples for the client, in order, none repeated."""

    sentence_index: int
    """0-based sentence index."""
    samples: np.ndarray
    """float32 mono samples that follow the previous ones of the sentence."""
    sample_rate_hz: int
    """Rate of `samples`."""
    is_last: bool
    """Whether the sentence ends with these."""
    model_version: str = ""
    """Model version of the vocoder that made them ("" when it did not say)."""
    step_continues: bool = False
    """Whether more samples of the same vocoder step follow at once (the worker ran it a part at a
    time): a listener's pacing counts a step's parts as one piece."""


class ResumableVocoderStream(ResumableCall):
    """Feeds mel slices to a vocoder worker and yields the samples, resuming elsewhere on failure.

    `send` and `finish` are called by the producer; `samples` is iterated by one reader.
    """

    kind = "vocoder"

    def __init__(
        self,
        pool: WorkerPool,
        deadline: Deadline,
        hop_length: int,
        clock: PlaybackClock | None = None,
        voice: str = "",
        speaker_id: int = 0,
        tier: str = "",
    ) -> None:
        """`clock`, when given, is the listener's: each request then tells the worker its slack.
        `voice` ("": the workers' default) picks the workers that may vocode it; a multi-speaker
        voice's decoder needs `speaker_id`; `tier` ("": quality) is the voice's tier it speaks in."""
        super().__init__(pool, deadline, pool.attempts(self.kind, voice=voice))
        self._voice = voice
        self._speaker_id = speaker_id
        self._tier = tier
        self._hop_length = hop_length
        self._clock = clock
        self._sentences: dict[int, _SentenceMel] = {}  # insertion order is sentence order
        self._lock = asyncio.Lock()  # one writer at a time: the producer, or a reopen's priming
        self._writing_done = False
        self._next_sample = 0  # within the sentence being delivered (the first of `_sentences`)
        self._delivering: int | None = None  # the sentence `_next_sample` belongs to, once it has begun
        self._delivered_elsewhere: dict[int, int] = {}  # sentence -> samples the client got from elsewhere

    async def send(self, slices: list[mel_pb2.MelSlice], tier: str = "") -> None:
        """Vocode `slices` (consecutive, of one sentence, in order) in `tier` ("": the stream's; a
        sentence keeps the tier it began with), in one message (several for more than
        MAX_FRAMES_PER_MESSAGE frames); they are kept for priming a reopened stream."""
        if not slices:
            return
        async with self._lock:
            last = slices[-1]
            sentence = self._sentences.setdefault(last.sentence_index, _SentenceMel(last.sentence_index, tier))
            sentence.slices.extend(slices)
            sentence.frames_sent = last.first_frame + last.frame_count
            sentence.complete = last.is_last
            if self._clock is not None:
                self._clock.note_sentence(last.sentence_index, last.sentence_frame_count)
            # Owed from now: a write into a hung worker can block on flow control, and the silence
            # must count against the attempt timeout while it does.
            if self._owed_since_s is None and self._owes():
                self._owed_since_s = time.monotonic()
            if self._call is not None:
                try:
                    for message in _requests(slices, context_only=False, tier=sentence.tier):
                        await self._call.write(self._with_slack(message))
                except CALL_ERRORS:
                    pass  # the reader sees the broken call and reopens it with these slices included

    async def finish(self) -> None:
        """No more slices will come: announce the end and half-close the stream once everything is sent."""
        async with self._lock:
            self._writing_done = True
            if self._call is not None:
                with contextlib.suppress(CALL_ERRORS):
                    await self._announce_end(self._call)

    async def samples(self) -> AsyncIterator[Samples]:
        """Every sample of every sentence, in order, exactly once, across as many calls as it takes."""
        while True:
            try:
                if self._call is None:
                    await self._open()
                reply = await self._read()
                if reply is grpc.aio.EOF:
                    if self._writing_done and not self._sentences:
                        self._drop()
                        return
                    raise StreamEnded()
            except CALL_ERRORS as error:
                await self._recover(error)
                continue
            if reply.busy:  # the worker is working through its queue: not silent
                self._owed_since_s = time.monotonic() if self._owes() else None
                continue
            fresh = self._take(reply)
            if fresh is not None:
                yield fresh

    def delivered_elsewhere(self, sentence_index: int, samples: int) -> None:
        """The client already has the first `samples` of a sentence that has not begun here (a cached
        audio head): they are dropped from the vocoder's answers, as after a resume."""
        if sentence_index == self._delivering:
            raise ValueError(f"sentence {sentence_index} is already being delivered")
        self._delivered_elsewhere[sentence_index] = samples
        self._progressed = True  # the client has audio of this utterance: a reopen from now on is a resume
        if self._owed_since_s is None and self._owes():
            self._owed_since_s = time.monotonic()

    def _start_of(self, sentence_index: int) -> int:
        """The first sample of `sentence_index` the client does not have."""
        if sentence_index == self._delivering:
            return self._next_sample
        return self._delivered_elsewhere.get(sentence_index, 0)

    def _take(self, reply: vocoder_pb2.VocodeResponse) -> Samples | None:
        """The part of `reply` the client does not have yet; moves the delivery position on."""
        current = next(iter(self._sentences.values()), None)
        if current is None or reply.sentence_index != current.index:
            raise DownstreamError(
                grpc.StatusCode.INTERNAL,
                f"vocoder answered for sentence {reply.sentence_index} while sentence "
                f"{None if current is None else current.index} was being delivered",
            )
        if self._delivering != current.index:
            self._delivering = current.index
            self._next_sample = self._delivered_elsewhere.pop(current.index, 0)
        if reply.first_sample > self._next_sample:
            raise DownstreamError(
                grpc.StatusCode.INTERNAL,
                f"vocoder skipped samples {self._next_sample}..{reply.first_sample} of sentence {reply.sentence_index}",
            )
        self._progressed = True
        samples = np.frombuffer(reply.samples, dtype="<f4")[self._next_sample - reply.first_sample :]
        self._next_sample += len(samples)
        if reply.is_last:
            del self._sentences[current.index]
            self._next_sample = 0
            self._delivering = None
            self.attempts.succeeded(self._endpoint)  # type: ignore[arg-type]
        self._owed_since_s = time.monotonic() if self._owes() else None
        if not len(samples) and not reply.is_last:
            return None
        return Samples(
            reply.sentence_index, samples, reply.sample_rate_hz, reply.is_last, self.model_version_of(current.tier), reply.step_continues and not reply.is_last
        )

    def model_version_of(self, tier: str) -> str:
        """The model version the current call's worker speaks `tier` with ("": the stream's tier)."""
        return self.fast_model_version if (tier or self._tier) == FAST else self.model_version

    def _owes(self) -> bool:
        """Whether the worker owes samples now: a sentence it has whole, or too many unanswered frames."""
        if any(sentence.complete for sentence in self._sentences.values()):
            return True
        current = next(iter(self._sentences.values()), None)
        if current is None:
            return False
        return current.frames_sent - self._start_of(current.index) // self._hop_length >= UNANSWERED_FRAMES_OWED

    def _start(self, endpoint: Endpoint, timeout_s: float | None) -> Any:
        metadata = self._open_metadata(self._pool.stream_metadata(self._voice, self._speaker_id, self._tier))
        return self._pool.vocoder_stub(endpoint).Vocode(timeout=timeout_s, metadata=metadata)

    def _owed_on_open(self) -> float | None:
        return time.monotonic() if self._owes() else None

    def _end_request(self) -> vocoder_pb2.VocodeRequest:
        return vocoder_pb2.VocodeRequest(end=True)

    def _position(self) -> str:
        return f"in sentence {next(iter(self._sentences), None)} at sample {self._next_sample}"

    async def _open(self) -> None:
        """Open a call on the best endpoint and prime it with everything the client still needs."""
        async with self._lock:
            await super()._open()
            try:
                # A worker that hangs while being primed is as silent as one that hangs later.
                async with asyncio.timeout(self._timeout_s):
                    await self._prime(self._call)
            except TimeoutError:
                raise WorkerSilent() from None

    async def _prime(self, call: Any) -> None:
        first = next(iter(self._sentences), None)
        client_frame = 0 if first is None else self._start_of(first) // self._hop_length
        for position, sentence in enumerate(self._sentences.values()):
            # Slices wholly before the client's position are context: the worker needs them to
            # compute the chunk the client is in, and must not send their samples again.
            context = [s for s in sentence.slices if position == 0 and s.first_frame + s.frame_count <= client_frame]
            rest = sentence.slices[len(context) :]
            for slices, context_only in ((context, True), (rest, False)):
                for message in _requests(slices, context_only, sentence.tier):
                    await call.write(self._with_slack(message))
        if self._writing_done:
            await self._announce_end(call)


    def _with_slack(self, message: vocoder_pb2.VocodeRequest) -> vocoder_pb2.VocodeRequest:
        """`message` with the time its listener can wait for it (none without a clock: "now")."""
        if self._clock is not None:
            first = message.slices[0]
            pacing = self._pool.vocoder_pacing(self._endpoint)
            lag_frames = pacing.lag_frames if pacing is not None else DEFAULT_VOCODER_LAG_FRAMES
            slack_ms = self._clock.vocoder_slack_ms(first.sentence_index, first.first_frame, lag_frames)
            downstream_s = self._pool.round_trip_s(self._endpoint)
            message.playback_slack_ms = slack_ms - 1000.0 * downstream_s
            message.downstream_ms = 1000.0 * downstream_s
            message.unlistened = not self._clock.listened
        return message


def _requests(slices: Sequence[mel_pb2.MelSlice], context_only: bool, tier: str = "") -> Iterator[vocoder_pb2.VocodeRequest]:
    """`slices` (of one sentence, spoken in `tier`) in as few VocodeRequests as keep each within
    MAX_FRAMES_PER_MESSAGE frames (the vocoder's message limit is sized for that); a slice is never cut."""
    start, frames = 0, 0
    for end, mel_slice in enumerate(slices):
        if frames and frames + mel_slice.frame_count > MAX_FRAMES_PER_MESSAGE:
            yield vocoder_pb2.VocodeRequest(slices=slices[start:end], context_only=context_only, tier=tier)
            start, frames = end, 0
        frames += mel_slice.frame_count
    if start < len(slices):
        yield vocoder_pb2.VocodeRequest(slices=slices[start:], context_only=context_only, tier=tier)
