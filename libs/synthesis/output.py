"""An utterance's samples become what the client hears: resampled to its rate, encoded in its
encoding, and placed on the output timeline.

Each sentence is resampled as a stream of its own (libs.audio.resample); the whole utterance goes
through one encoder (libs.encoding). `audio_offset_s` and `audio_duration_s` count samples at the
output rate, so concatenating the chunks' audio gives the utterance and every chunk knows where it
sits.

Word times come from the model's own durations: a word starts where the frames of the phoneme ids
before it end, so they are exact to one mel frame at any speed and any output rate.

A resumed stream (libs.synthesis.resume) starts at a sentence of the original one: its sentences
are numbered and placed as in the original, and the samples of its first sentence that the client
already has are dropped here, after resampling, so what follows is sample for sample the original.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate

import numpy as np

from libs.audio.resample import SentenceResampler
from libs.encoding.encoders import encoder_for
from libs.encoding.pcm import LinearPcmEncoder
from libs.pb.tts.v1 import tts_pb2
from libs.synthesis.pipeline import SentenceMeta, SentencePiece
from libs.synthesis.resume import RESUMABLE_ENCODINGS, ResumeFrom, ResumePoint, sentence_digest
from libs.text.words import WordSpan


@dataclass(frozen=True)
class WordTime:
    """A word as written and when it is spoken, in seconds on the output timeline."""

    text: str
    start_s: float
    end_s: float


def word_times(
    words: Sequence[WordSpan], phoneme_frames: Sequence[int], frame_duration_s: float, offset_s: float
) -> tuple[WordTime, ...]:
    """When each word of a sentence that starts at `offset_s` is spoken (none without frames)."""
    if not phoneme_frames:
        return ()
    frame_at = [0, *accumulate(phoneme_frames)]  # frames before each phoneme id
    last = len(phoneme_frames)
    return tuple(
        WordTime(
            word.text,
            offset_s + frame_at[min(word.first_id, last)] * frame_duration_s,
            offset_s + frame_at[min(word.end_id, last)] * frame_duration_s,
        )
        for word in words
    )


@dataclass(frozen=True)
class MarkTime:
    """An SSML mark and when it is reached, in seconds on the output timeline."""

    name: str
    time_s: float


@dataclass(frozen=True)
class SentenceInfo:
    """A sentence as the client is told about it, on its first chunk."""

    index: int
    """0-based sentence index."""
    text: str
    """The sentence as spoken (normalised)."""
    phonemes: str
    """Its IPA phonemes."""
    audio_offset_s: float
    """Where the sentence starts on the output timeline."""
    audio_duration_s: float
    """The sentence's length."""
    phoneme_frames: tuple[int, ...]
    """Mel frames per phoneme id (empty unless alignment was asked for)."""
    frame_duration_s: float
    """Seconds per mel frame (0 unless alignment was asked for)."""
    words: tuple[WordTime, ...] = ()
    """Its words and when each is spoken."""
    pause_before_s: float = 0.0
    """Silence before its speech (SSML breaks), at the start of its first chunk; `audio_offset_s` is
    where the speech starts."""
    pause_after_s: float = 0.0
    """Silence after its speech (SSML breaks), at the end of its last chunk."""
    marks: tuple[MarkTime, ...] = ()
    """SSML marks in or around it, in order, each with its time."""
    tier: str = ""
    """The voice's tier it is spoken in (libs.voice.tiers; "": the stream's)."""


@dataclass(frozen=True)
class AudioChunk:
    """The next piece of the utterance's audio, ready for the client."""

    audio: bytes
    """Encoded audio that follows the previous chunk's."""
    sentence_index: int
    """The sentence it belongs to."""
    audio_offset_s: float
    """Where it starts on the output timeline."""
    audio_duration_s: float
    """How much audio it carries."""
    sentence_end: bool
    """Whether the sentence ends with it."""
    sentence: SentenceInfo | None
    """The sentence, on its first chunk only."""
    resume: ResumePoint | None = None
    """Where the stream stands once this chunk is received (None for an encoding that cannot resume)."""


def _mark_times(meta: SentenceMeta, start_s: float, speech_end_s: float) -> tuple[MarkTime, ...]:
    """The sentence's SSML marks on the timeline: those before its speech from `start_s`, those
    after it from `speech_end_s`."""
    return tuple(MarkTime(name, start_s + into_s) for name, into_s in meta.marks_before) + tuple(
        MarkTime(name, speech_end_s + into_s) for name, into_s in meta.marks_after
    )


class AudioOutput:
    """Turns one utterance's sentence pieces into audio chunks in `encoding` at `sample_rate_hz`."""

    def __init__(self, encoding: int, sample_rate_hz: int, include_alignment: bool, resume: ResumeFrom | None = None) -> None:
        """With `resume`, the output goes on from that point of an earlier stream: the sentences
        handed in start at its sentence, and its samples the client has are not sent again."""
        self.sample_rate_hz = sample_rate_hz
        # A resumed WAV stream goes on with its samples: the client has the header.
        self._encoder = LinearPcmEncoder(sample_rate_hz) if resume and encoding == tts_pb2.WAV else encoder_for(encoding, sample_rate_hz)
        self._include_alignment = include_alignment
        self._resampler: SentenceResampler | None = None
        self._first_index = resume.sentence_index if resume else 0
        self._samples_out = resume.stream_samples if resume else 0  # samples sent so far, at the output rate
        self._to_drop = resume.sentence_samples if resume else 0  # of the first sentence: the client has them
        self._sentence_samples = 0  # samples of the current sentence made so far (sent or dropped)
        self._resumable = encoding in RESUMABLE_ENCODINGS
        self._digest = b""
        self._current = -1
        self._described = -1

    def push(self, piece: SentencePiece) -> AudioChunk | None:
        """The chunk for `piece` (None when it adds nothing the client can hear yet)."""
        if self._resampler is None:
            self._resampler = SentenceResampler(piece.sample_rate_hz, self.sample_rate_hz)
        samples = self._resampler.push(piece.samples, last=piece.is_last)
        meta = piece.sentence
        new_sentence = self._current != piece.sentence_index
        first_piece = self._described != piece.sentence_index  # the first the client gets of the sentence
        # SSML breaks: real silence, on the timeline like speech.
        before = round(meta.pause_before_s * self.sample_rate_hz) if new_sentence else 0
        after = round(meta.pause_after_s * self.sample_rate_hz) if piece.is_last else 0
        if before or after:
            samples = np.concatenate([np.zeros(before, np.float32), samples, np.zeros(after, np.float32)])
        if piece.is_last:
            self._resampler = None
        if new_sentence:
            self._current = piece.sentence_index
            self._sentence_samples = 0
            self._digest = sentence_digest(meta.text)
        start_in_sentence = self._sentence_samples  # where these samples start within the sentence
        self._sentence_samples += len(samples)
        if self._to_drop and piece.sentence_index == 0:
            dropped = min(self._to_drop, len(samples))
            samples = samples[dropped:]
            self._to_drop -= dropped
            start_in_sentence += dropped
        if not len(samples) and not piece.is_last:
            return None
        offset_s = self._samples_out / self.sample_rate_hz
        index = piece.sentence_index + self._first_index
        sentence = None
        if first_piece:
            self._described = piece.sentence_index
            start_s = (self._samples_out - start_in_sentence) / self.sample_rate_hz
            speech_s = start_s + meta.pause_before_s
            sentence = SentenceInfo(
                index=index,
                text=meta.text,
                phonemes=meta.phonemes,
                audio_offset_s=speech_s,
                audio_duration_s=meta.frame_count * piece.frame_duration_s,
                phoneme_frames=meta.phoneme_frames if self._include_alignment else (),
                frame_duration_s=piece.frame_duration_s if self._include_alignment else 0.0,
                words=word_times(meta.words, meta.phoneme_frames, piece.frame_duration_s, speech_s),
                pause_before_s=meta.pause_before_s,
                pause_after_s=meta.pause_after_s,
                marks=_mark_times(meta, start_s, speech_s + meta.frame_count * piece.frame_duration_s),
                tier=meta.tier,
            )
        self._samples_out += len(samples)
        resume = None
        if self._resumable:
            resume = ResumePoint(index, self._sentence_samples, self._samples_out, self._digest, piece.is_last, meta.tier)
        return AudioChunk(
            audio=self._encoder.encode(samples),
            sentence_index=index,
            audio_offset_s=offset_s,
            audio_duration_s=len(samples) / self.sample_rate_hz,
            sentence_end=piece.is_last,
            sentence=sentence,
            resume=resume,
        )

    def finish(self) -> bytes:
        """What the encoder still holds at the end of the utterance."""
        return self._encoder.finish()
