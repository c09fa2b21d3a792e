"""Resume points and real-time frames on the output side, with synthetic sentences: a resumed output
is the original's tail sample for sample (any rate, G.711 included, SSML pauses included), tokens
are checked, telephone audio is resampled as one stream per sentence (chunk edges leave no mark),
and frames are exact, paced, and know their resume points."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import replace

import numpy as np
import pytest

from libs.audio.resample import SentenceResampler
from libs.pb.tts.v1 import tts_pb2
from libs.synthesis.options import SynthesisOptions, resolve_options, with_resume
from libs.synthesis.output import AudioChunk, AudioOutput
from libs.synthesis.pacing import paced_frames
from libs.synthesis.pipeline import SentenceMeta, SentencePiece
from libs.synthesis.resume import ResumePoint, decode_token, encode_token, resumed_sentences, sentence_digest
from libs.text.frontend import Sentence
from libs.text.words import WordSpan
from libs.voice.registry import default_registry
from libs.wire.errors import InvalidRequestError

VOICE_RATE = 22050
TEXTS = ("The first sentence.", "A second, longer one follows it.", "And the third.")


def _pieces(seed: int = 7) -> list[SentencePiece]:
    """Three sentences of noise cut into uneven pieces, as the vocoder hands them out; the second has SSML pauses."""
    rng = np.random.default_rng(seed)
    pieces = []
    for index, text in enumerate(TEXTS):
        samples = (0.3 * rng.standard_normal(VOICE_RATE // 2 + 977 * index)).astype(np.float32)
        meta = SentenceMeta(
            text, "ðə", frame_count=len(samples) // 256, phoneme_frames=(len(samples) // 256,), words=(WordSpan(text.split()[0], 0, 1),),
            pause_before_s=0.0, pause_after_s=0.25 if index == 1 else 0.0,
        )  # fmt: skip
        cuts = np.array_split(samples, 5 + index)
        for number, cut in enumerate(cuts):
            pieces.append(SentencePiece(index, cut, VOICE_RATE, number == len(cuts) - 1, meta, 256 / VOICE_RATE))
    return pieces


def _output(encoding: int, rate_hz: int, pieces: list[SentencePiece], resume: object = None) -> list[AudioChunk]:
    output = AudioOutput(encoding, rate_hz, False, resume)  # type: ignore[arg-type]
    chunks = [chunk for piece in pieces if (chunk := output.push(piece)) is not None]
    tail = output.finish()
    assert not tail
    return chunks


def _options(encoding: int, rate_hz: int = 0) -> SynthesisOptions:
    return resolve_options(default_registry(), voice="", speed=1.0, encoding=encoding, sample_rate_hz=rate_hz, speaker_id=0,
                           request_id="", include_alignment=False)  # fmt: skip


@pytest.mark.parametrize(
    ("encoding", "rate_hz"), [(tts_pb2.LINEAR_PCM, 22050), (tts_pb2.LINEAR_PCM, 16000), (tts_pb2.MULAW, 8000), (tts_pb2.FLOAT_PCM, 48000)]
)
def test_a_resumed_output_is_the_original_tail_sample_for_sample_from_every_chunk(encoding: int, rate_hz: int) -> None:
    pieces = _pieces()
    original = _output(encoding, rate_hz, pieces)
    whole = b"".join(chunk.audio for chunk in original)
    options = _options(encoding, rate_hz)
    for cut in range(1, len(original)):
        point = original[cut - 1].resume
        assert point is not None
        resume = decode_token(encode_token(point, options.digest))
        rest = _output(encoding, rate_hz, _from(pieces, resume.sentence_index), resume)
        joined = b"".join(chunk.audio for chunk in original[:cut]) + b"".join(chunk.audio for chunk in rest)
        assert joined == whole, f"resumed after chunk {cut}"
        if rest:  # on the same timeline, numbered as in the original
            assert rest[0].audio_offset_s == pytest.approx(original[cut].audio_offset_s)
            assert rest[0].sentence_index == original[cut].sentence_index


def _from(pieces: list[SentencePiece], first: int) -> list[SentencePiece]:
    """The pieces a resumed pipeline hands out: the sentences from `first` on, numbered from 0."""
    return [
        SentencePiece(p.sentence_index - first, p.samples, p.sample_rate_hz, p.is_last, p.sentence, p.frame_duration_s)
        for p in pieces
        if p.sentence_index >= first
    ]


def test_a_resumed_wav_goes_on_with_samples_and_no_second_header() -> None:
    pieces = _pieces()
    original = _output(tts_pb2.WAV, 22050, pieces)
    point = original[2].resume
    assert point is not None
    resume = decode_token(encode_token(point, _options(tts_pb2.WAV).digest))
    rest = _output(tts_pb2.WAV, 22050, _from(pieces, resume.sentence_index), resume)
    assert b"".join(c.audio for c in original[:3]) + b"".join(c.audio for c in rest) == b"".join(c.audio for c in original)


def test_a_token_of_other_options_or_a_compressed_encoding_is_refused_naming_the_field() -> None:
    point = ResumePoint(1, 100, 5000, sentence_digest("x"))
    token = encode_token(point, _options(tts_pb2.LINEAR_PCM).digest)
    with pytest.raises(InvalidRequestError) as other:
        with_resume(_options(tts_pb2.LINEAR_PCM, 16000), token)
    assert other.value.field == "resume_token"
    with pytest.raises(InvalidRequestError) as compressed:
        with_resume(_options(tts_pb2.OGG_OPUS), token)
    assert compressed.value.field == "resume_token"
    with pytest.raises(InvalidRequestError):
        decode_token("not-a-token")
    assert with_resume(_options(tts_pb2.LINEAR_PCM), token).resume == decode_token(token)


def test_a_token_of_an_eagerly_opened_stream_resumes_it_cut_as_it_was() -> None:
    point = ResumePoint(1, 100, 5000, sentence_digest("x"))
    eager = replace(_options(tts_pb2.LINEAR_PCM), eager_opening=True)
    assert eager.digest != _options(tts_pb2.LINEAR_PCM).digest
    resumed = with_resume(_options(tts_pb2.LINEAR_PCM), eager.resume_token(point))
    assert resumed.eager_opening and resumed.resume == decode_token(eager.resume_token(point))
    # A token of a stream spoken whole goes on whole, however the gateway would cut the text now.
    assert not with_resume(eager, _options(tts_pb2.LINEAR_PCM).resume_token(point)).eager_opening


async def _sentences(texts: tuple[str, ...]) -> AsyncIterator[Sentence]:
    for text in texts:
        yield Sentence(text, ("a",), (1, 0, 2))


def test_resumed_sentences_skip_what_the_client_has_and_refuse_another_text() -> None:
    async def run(texts: tuple[str, ...], point: ResumePoint) -> list[str]:
        resume = decode_token(encode_token(point, b"\0" * 8))
        return [sentence.text async for sentence in resumed_sentences(_sentences(texts), resume)]

    assert asyncio.run(run(TEXTS, ResumePoint(1, 10, 99, sentence_digest(TEXTS[1])))) == list(TEXTS[1:])
    assert asyncio.run(run(TEXTS, ResumePoint(1, 10, 99, sentence_digest(TEXTS[1]), complete=True))) == list(TEXTS[2:])
    with pytest.raises(InvalidRequestError):
        asyncio.run(run(("Another text.", *TEXTS[1:]), ResumePoint(0, 10, 10, sentence_digest(TEXTS[0]))))
    with pytest.raises(InvalidRequestError):  # the text ends before the token's sentence
        asyncio.run(run(TEXTS[:1], ResumePoint(2, 10, 99, sentence_digest(TEXTS[2]))))


def test_telephone_audio_resampled_in_chunks_equals_the_sentence_resampled_whole() -> None:
    samples = (0.3 * np.sin(np.arange(VOICE_RATE) * 2 * np.pi * 300 / VOICE_RATE)).astype(np.float32)
    whole = SentenceResampler(VOICE_RATE, 8000).push(samples, last=True)
    streamed = SentenceResampler(VOICE_RATE, 8000)
    cuts = np.array_split(samples, 37)
    chunked = np.concatenate([streamed.push(cut, last=index == len(cuts) - 1) for index, cut in enumerate(cuts)])
    assert len(chunked) == len(whole) == 8000
    np.testing.assert_allclose(chunked, whole, atol=1e-6)  # no seam where the chunks met


class _FakeClock:
    def __init__(self) -> None:
        self.now_s = 100.0
        self.sent_at: list[float] = []

    def clock(self) -> float:
        return self.now_s

    async def sleep(self, seconds: float) -> None:
        self.now_s += seconds


async def _listed(chunks: list[AudioChunk]) -> AsyncIterator[AudioChunk]:
    for chunk in chunks:
        yield chunk


def _frames(chunks: list[AudioChunk], clock: _FakeClock, encoding: int = tts_pb2.MULAW) -> list[AudioChunk]:
    async def run() -> list[AudioChunk]:
        frames = []
        async for frame in paced_frames(_listed(chunks), encoding=encoding, sample_rate_hz=8000, frame_ms=20,
                                        clock=clock.clock, sleep=clock.sleep):  # fmt: skip
            clock.sent_at.append(clock.now_s)
            frames.append(frame)
        return frames

    return asyncio.run(run())


def test_telephone_frames_are_exactly_20_ms_paced_in_real_time_and_padded_with_silence() -> None:
    chunks = _output(tts_pb2.MULAW, 8000, _pieces())
    clock = _FakeClock()
    frames = _frames(chunks, clock)
    whole = b"".join(chunk.audio for chunk in chunks)
    assert all(len(frame.audio) == 160 for frame in frames)
    assert b"".join(frame.audio for frame in frames)[: len(whole)] == whole
    assert b"".join(frame.audio for frame in frames)[len(whole) :] == b"\xff" * (len(frames) * 160 - len(whole))
    assert np.allclose(np.diff(clock.sent_at), 0.020)  # each frame at its moment
    assert [frame.audio_offset_s for frame in frames] == pytest.approx([0.02 * index for index in range(len(frames))])
    assert sum(frame.sentence_end for frame in frames) == len(TEXTS)
    assert [frame.sentence.index for frame in frames if frame.sentence is not None] == [0, 1, 2]


def test_a_late_frame_leaves_at_once_and_the_pace_goes_on_from_it() -> None:
    chunks = _output(tts_pb2.MULAW, 8000, _pieces())

    async def late(items: list[AudioChunk], clock: _FakeClock) -> AsyncIterator[AudioChunk]:
        for index, chunk in enumerate(items):
            if index == 3:
                clock.now_s += 0.5  # the mesh fell behind
            yield chunk

    clock = _FakeClock()

    async def run() -> list[float]:
        sent = []
        async for _ in paced_frames(late(chunks, clock), encoding=tts_pb2.MULAW, sample_rate_hz=8000, frame_ms=20,
                                    clock=clock.clock, sleep=clock.sleep):  # fmt: skip
            sent.append(clock.now_s)
        return sent

    gaps = np.diff(asyncio.run(run()))
    assert max(gaps) == pytest.approx(0.5, abs=0.021)  # one late gap, no burst after it
    assert np.all(gaps >= 0.0199)


def test_every_frame_knows_the_resume_point_at_its_end() -> None:
    pieces = _pieces()
    chunks = _output(tts_pb2.MULAW, 8000, pieces)
    frames = _frames(chunks, _FakeClock())
    whole = b"".join(chunk.audio for chunk in chunks)
    digest = _options(tts_pb2.MULAW).digest
    for number, frame in enumerate(frames[:-1]):
        assert frame.resume is not None
        resume = decode_token(encode_token(frame.resume, digest))
        assert resume.stream_samples == (number + 1) * 160
        rest = _output(tts_pb2.MULAW, 8000, _from(pieces, resume.sentence_index), resume)
        assert whole[: (number + 1) * 160] + b"".join(chunk.audio for chunk in rest) == whole
