"""Resume points: where a client stands in a stream, so that one whose connection dropped can ask for
the rest and hear it sample-exact, without being sent again what it has.

Synthesis is deterministic and every sentence is its own waveform, resampled as a stream of its own
(libs.synthesis.output), so a stream is a sequence of sentences whose samples never depend on the
others. A point names the sentence of the last sample sent, how many of that sentence's samples
were sent, and how many of the whole stream's. To go on from it, the gateway reads the same text
again, skips the sentences before the point without synthesising them, makes the point's sentence
again and drops the samples the client has, and places everything after on the same timeline.

A token is the point as one opaque, URL-safe string, with two checks: a digest of the options that
shape the samples (voice, speaker, speed, encoding, rate), compared when the request is read, and a
digest of the point's sentence, compared when the text side reaches it. A token of another text or
other options is refused (INVALID_ARGUMENT) rather than giving a seam. Only encodings whose bytes are
the samples (PCM, float, G.711, WAV) can continue byte-exact: a codec's state would not.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import struct
from collections.abc import AsyncIterator
from contextlib import aclosing
from dataclasses import dataclass, replace
from typing import Final

from libs.pb.tts.v1 import tts_pb2
from libs.text.frontend import Sentence
from libs.wire.errors import InvalidRequestError

RESUMABLE_ENCODINGS: Final = frozenset({tts_pb2.LINEAR_PCM, tts_pb2.FLOAT_PCM, tts_pb2.WAV, tts_pb2.MULAW, tts_pb2.ALAW})
"""Encodings whose bytes are the samples, so a stream can go on from any sample."""
TOKEN_VERSION: Final = 1
DIGEST_BYTES: Final = 8
_LAYOUT: Final = struct.Struct(">B8s8sIQQ")  # version, options digest, sentence digest, sentence, its samples, stream samples
FIELD: Final = "resume_token"


@dataclass(frozen=True)
class ResumePoint:
    """Where a stream stands after some of its samples were sent."""

    sentence_index: int
    """The sentence of the last sample sent (0-based)."""
    sentence_samples: int
    """Samples of that sentence sent so far, at the output rate (pauses included)."""
    stream_samples: int
    """Samples of the whole stream sent so far, at the output rate."""
    sentence_digest: bytes = b""
    """A digest of that sentence's text (`sentence_digest`); empty before any sample."""
    complete: bool = False
    """Whether that sentence has been sent whole: the stream goes on with the next one."""
    tier: str = ""
    """The voice's tier that sentence is spoken in ("": the stream's); a stream resumed from here goes on in it."""

    def back(self, samples: int) -> ResumePoint:
        """The point `samples` earlier in the same sentence (none of them may belong to another)."""
        if samples == 0:
            return self
        return replace(self, sentence_samples=self.sentence_samples - samples, stream_samples=self.stream_samples - samples,
                       complete=False)  # fmt: skip

    @property
    def next_sentence(self) -> int:
        """The sentence the next sample belongs to."""
        return self.sentence_index + 1 if self.complete else self.sentence_index

    @property
    def next_sentence_samples(self) -> int:
        """Samples of `next_sentence` the client has."""
        return 0 if self.complete else self.sentence_samples


@dataclass(frozen=True)
class ResumeFrom:
    """A token read back: where to go on, and what it must match."""

    sentence_index: int
    """The first sentence to speak."""
    sentence_samples: int
    """Samples of that sentence to drop (the client has them)."""
    stream_samples: int
    """Where the rest sits on the timeline, in samples at the output rate."""
    anchor_index: int
    """The sentence the token's digest is of (-1: none, at the very start)."""
    anchor_digest: bytes
    options_digest: bytes


def sentence_digest(text: str) -> bytes:
    """The check of a sentence a token carries."""
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=DIGEST_BYTES, person=b"tts-resume-sent").digest()


def options_digest(
    voice: str, speaker_id: int, speed: float, encoding: int, sample_rate_hz: int, tier: str = "", eager_opening: bool = False
) -> bytes:
    """The check of the options that shape a stream's samples; `tier` is the tier spoken in, "" for
    quality (whose tokens read as they did before there were tiers); `eager_opening` whether its first
    sentence opened sooner (`SynthesisOptions.eager_opening`), which cuts its text into other sentences."""
    data = struct.pack(">IdII", speaker_id, speed, encoding, sample_rate_hz) + voice.encode("utf-8", "surrogatepass")
    if tier:
        data += b"\0tier:" + tier.encode("ascii")
    if eager_opening:
        data += b"\0eager-opening"
    return hashlib.blake2b(data, digest_size=DIGEST_BYTES, person=b"tts-resume-opts").digest()


def encode_token(point: ResumePoint, options: bytes) -> str:
    """`point` as the opaque string a client sends back; `options` is `options_digest` of its request."""
    packed = _LAYOUT.pack(
        TOKEN_VERSION, options, point.sentence_digest.ljust(DIGEST_BYTES, b"\0"), point.next_sentence,
        point.next_sentence_samples, point.stream_samples,
    )  # fmt: skip
    return base64.urlsafe_b64encode(packed).decode("ascii").rstrip("=")


def decode_token(token: str) -> ResumeFrom:
    """A token read back; InvalidRequestError (field `resume_token`) for one this gateway did not make."""
    try:
        packed = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        version, options, digest, sentence, samples, stream = _LAYOUT.unpack(packed)
    except (binascii.Error, struct.error, ValueError):
        raise InvalidRequestError("resume_token is not a token this service made; send the `token` of a response's resume point",
                                  field=FIELD) from None  # fmt: skip
    if version != TOKEN_VERSION or samples > stream:
        raise InvalidRequestError("resume_token is not a token this service made; send the `token` of a response's resume point",
                                  field=FIELD)  # fmt: skip
    anchor = sentence if samples > 0 else sentence - 1
    return ResumeFrom(sentence, samples, stream, anchor, digest if anchor >= 0 else b"", options)


async def resumed_sentences(sentences: AsyncIterator[Sentence], resume: ResumeFrom) -> AsyncIterator[Sentence]:
    """`sentences` from the token's sentence on, after checking that the text is the token's."""
    index = 0
    async with aclosing(sentences):  # type: ignore[type-var]
        async for sentence in sentences:
            if index == resume.anchor_index and sentence_digest(sentence.text) != resume.anchor_digest:
                raise _other_text()
            if index >= resume.sentence_index:
                yield sentence
            index += 1
    if index <= resume.anchor_index:
        raise _other_text()


def _other_text() -> InvalidRequestError:
    return InvalidRequestError(
        "resume_token belongs to another text: send the text of the stream the token came from, unchanged", field=FIELD
    )
