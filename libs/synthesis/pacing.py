"""Audio in real-time frames, for a caller that forwards each frame to a phone line as it comes (no
jitter buffer of its own).

The chunks of an utterance (libs.synthesis.output) are cut into frames of exactly `frame_ms` of
audio, the last padded with the encoding's silence, and each frame leaves when its moment comes:
frame k at the first frame's time plus k frames. A frame that is late by a frame or more (the mesh
fell behind) leaves at once and the frames after it keep the new pace, rather than a burst that
would overrun the line; one a little late (a timer that woke late) keeps the old pace, so the
event loop's lateness does not accumulate. The samples are the chunks' own bytes, so framing changes
where audio is cut, never what it is; each frame still says its sentence, carries the sentence's
words when the sentence starts in it, and knows its resume point.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import aclosing
from dataclasses import dataclass
from typing import Final

from libs.pb.tts.v1 import tts_pb2
from libs.synthesis.options import SynthesisOptions
from libs.synthesis.output import AudioChunk

SILENT_SAMPLE: Final[Mapping[int, bytes]] = {
    tts_pb2.LINEAR_PCM: b"\0\0",
    tts_pb2.FLOAT_PCM: b"\0\0\0\0",
    tts_pb2.MULAW: b"\xff",  # G.711 mu-law's zero
    tts_pb2.ALAW: b"\xd5",  # G.711 A-law's zero
}
"""One sample of silence in each encoding that can be framed (the bytes per sample are its length)."""


@dataclass
class _Span:
    """A chunk's bytes in the utterance: [start, end)."""

    start: int
    end: int
    chunk: AudioChunk


async def paced_frames(
    chunks: AsyncIterator[AudioChunk],
    *,
    encoding: int,
    sample_rate_hz: int,
    frame_ms: int,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> AsyncIterator[AudioChunk]:
    """`chunks` as frames of `frame_ms` (libs.synthesis.options checks that it is a whole number of
    samples), each yielded at its real-time moment."""
    silence = SILENT_SAMPLE[encoding]
    frame_samples = frame_ms * sample_rate_hz // 1000
    frame_bytes = frame_samples * len(silence)
    frame_s = frame_samples / sample_rate_hz
    spans: list[_Span] = []
    buffered = bytearray()  # bytes from `framed` on
    framed = 0  # bytes already sent in frames
    total = 0
    origin_s: float | None = None  # timeline second of the first byte
    pace = _Pace(frame_s, clock, sleep)
    async with aclosing(chunks):  # type: ignore[type-var]  # a client gone mid-frame ends the utterance now
        async for chunk in chunks:
            if origin_s is None:
                origin_s = chunk.audio_offset_s
            spans.append(_Span(total, total + len(chunk.audio), chunk))
            total += len(chunk.audio)
            buffered += chunk.audio
            while len(buffered) >= frame_bytes:
                frame = bytes(buffered[:frame_bytes])
                del buffered[:frame_bytes]
                await pace.wait()
                yield _frame(frame, framed, framed + frame_bytes, spans, origin_s, len(silence), sample_rate_hz, frame_s)
                framed += frame_bytes
                spans = [span for span in spans if span.end > framed or span is spans[-1]]
    if buffered:  # the last frame, filled up with silence
        frame = bytes(buffered) + silence * ((frame_bytes - len(buffered)) // len(silence))
        await pace.wait()
        yield _frame(frame, framed, framed + frame_bytes, spans, origin_s or 0.0, len(silence), sample_rate_hz, frame_s)
    elif spans and spans[-1].start >= framed:  # an empty chunk after the last frame: what it says still counts
        yield spans[-1].chunk


class _Pace:
    """Frame k's moment: the first frame's time plus k frames, moved on after a late frame."""

    def __init__(self, frame_s: float, clock: Callable[[], float], sleep: Callable[[float], Awaitable[None]]) -> None:
        self._frame_s = frame_s
        self._clock = clock
        self._sleep = sleep
        self._due_s: float | None = None

    async def wait(self) -> None:
        now = self._clock()
        if self._due_s is None or now > self._due_s + self._frame_s:
            self._due_s = now  # the first frame, or one a whole frame late: leave now, and pace on from here
        elif now < self._due_s:
            await self._sleep(self._due_s - now)
        # A frame only a little late (a timer that woke late) leaves now and keeps the pace: the line's
        # clock does not drift by the event loop's lateness.
        self._due_s += self._frame_s


def _frame(
    audio: bytes, start: int, end: int, spans: list[_Span], origin_s: float, bytes_per_sample: int, rate_hz: int, frame_s: float
) -> AudioChunk:
    """The frame of bytes [start, end) of the utterance (past its end: padding), described by the
    chunks whose bytes it holds."""
    inside = [span for span in spans if span.start < end and (span.end > start or (span.start == span.end == start))]
    first = inside[0] if inside else spans[-1]
    sentence = next((span.chunk.sentence for span in inside if span.start >= start and span.chunk.sentence is not None), None)
    ended = any(span.chunk.sentence_end and start < span.end <= end for span in inside) or any(
        span.chunk.sentence_end and span.start == span.end for span in inside
    )
    last = next((span for span in reversed(inside) if span.end >= min(end, spans[-1].end)), spans[-1])
    resume = None
    if last.chunk.resume is not None:
        resume = last.chunk.resume.back(max(0, last.end - end) // bytes_per_sample)
    return AudioChunk(
        audio=audio,
        sentence_index=first.chunk.sentence_index,
        audio_offset_s=origin_s + start / bytes_per_sample / rate_hz,
        audio_duration_s=frame_s,
        sentence_end=ended,
        sentence=sentence,
        resume=resume,
    )


def as_asked(chunks: AsyncIterator[AudioChunk], options: SynthesisOptions) -> AsyncIterator[AudioChunk]:
    """`chunks` in real-time frames when the request asked for them (`frame_ms`), else as they are."""
    if not options.frame_ms:
        return chunks
    return paced_frames(chunks, encoding=options.encoding, sample_rate_hz=options.sample_rate_hz, frame_ms=options.frame_ms)
