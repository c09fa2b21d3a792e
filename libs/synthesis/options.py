"""What a client may ask for besides its text: checked, with defaults applied, or InvalidRequestError."""

from __future__ import annotations

import math
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Final

from libs.encoding.encoders import ENCODINGS
from libs.pb.tts.v1 import tts_pb2
from libs.settings.fields import setting
from libs.synthesis.admission import DEFAULT_ACTIVE_CLIENT_S, DEFAULT_MIN_SHARE
from libs.synthesis.resume import FIELD as RESUME_FIELD
from libs.synthesis.resume import RESUMABLE_ENCODINGS, ResumeFrom, ResumePoint, decode_token, encode_token, options_digest
from libs.text.errors import TextError
from libs.text.frontend import DEFAULT_MAX_TEXT_CHARS
from libs.text.pronounce import parse_lexicon_entries
from libs.voice.checks import MAX_SPEED, MIN_SPEED
from libs.voice.registry import Voice, VoiceRegistry
from libs.voice.tiers import FAST, QUALITY, SPOKEN
from libs.voice.tiers import FIELD as TIER_FIELD
from libs.wire.errors import InvalidRequestError
from libs.wire.limits import MAX_ID_CHARS

MAX_REQUEST_ID_CHARS: Final = MAX_ID_CHARS  # it becomes the utterance id the workers check
# A CPU gateway process relays ~25 slices/s per stream; a few hundred streams keep it well below
# one core, and beyond that queueing in the gateway only adds latency the client would rather
# spend retrying another gateway.
DEFAULT_MAX_STREAMS: Final = 256
# A quarter of the gateway: one client (an address; behind a NAT, many people) cannot take it all.
DEFAULT_MAX_STREAMS_PER_CLIENT: Final = 64
DEFAULT_OPENING_MAX_IDS: Final = 96
"""A first sentence's first audio waits for the plan of all its ids. One of more than twice this many
(`OPENING_AFTER`: about 190, some sixteen words) starts with its opening of at most this many,
whose first audio costs about what a short sentence's does, at no cost in DNSMOS (`make
bench-quality`'s opening table). 96 rather than fewer: an opening that holds a whole clause ends
where the punctuation pauses anyway, where a shorter one is more often cut inside a clause. A
number of ids, not a reading of the moment: a plan's cost over a short sentence's is the same ratio
on every machine, and the same text is always cut in the same place, so its audio and its cache
keys do not depend on the load. The opening is a sentence of its own in the client's timeline (its
own sentence info and words, whose texts together are the sentence's); shorter first sentences are
spoken whole."""
DEFAULT_ADMISSION_HEADROOM: Final = 0.9
"""A tenth of the capacity stays for what the cost model does not see coming (a longer sentence than
the text suggests, another process on the cores)."""
DEFAULT_AUTO_QUALITY_SHARE: Final = 0.3
"""Past three tenths of what admission takes, auto streams speak the fast tier. A burst of cold streams in
the quality tier runs dry well before the capacity the workers report (`make bench-load`'s tier burst: 4
to 7 of 8 stalled at it); auto streams, which ask for no gap and no refusal before the best audio, move
early. At 0.5 that burst at 1.5x the capacity still left 1 or 2 of 13 listeners a gap; at 0.3 none."""
DEFAULT_ROOM_WAIT_MS: Final = 2000
"""A stream that finds the mesh full (a whole text, or one streamed in pieces) waits this long for room
before it is refused (libs.synthesis.room).
Random arrivals at 0.8 of the capacity are above it for moments that a stream ending or the listeners'
buffers growing may end: on one core at 1.2 of the capacity, 5 of the 12 streams that waited 2 s were
admitted, none of the listeners ran dry (docs/performance.md, 2026-12-05, night). A longer wait mostly
holds callers of a mesh that is overloaded, not unlucky, who are better told to retry elsewhere."""
MIN_OUTPUT_SAMPLE_RATE_HZ: Final = 8000
MAX_OUTPUT_SAMPLE_RATE_HZ: Final = 48000
MIN_FRAME_MS: Final = 10
MAX_FRAME_MS: Final = 100
PACED_ENCODINGS: Final = frozenset({tts_pb2.LINEAR_PCM, tts_pb2.FLOAT_PCM, tts_pb2.MULAW, tts_pb2.ALAW})
"""Encodings whose bytes are the samples and carry no header: they can be cut into frames of exact length."""


@dataclass(frozen=True)
class RequestLimits:
    """How much a gateway takes on."""

    max_text_chars: int = setting(
        DEFAULT_MAX_TEXT_CHARS, env="TTS_MAX_TEXT_CHARS", unit="characters", minimum=1,
        doc="longest text of a Synthesize request, and of each StreamingSynthesize piece",
    )  # fmt: skip
    max_streams: int = setting(
        DEFAULT_MAX_STREAMS, env="TTS_GATEWAY_MAX_STREAMS", unit="count", minimum=1,
        doc="client streams a gateway serves at once; more are refused at once with RESOURCE_EXHAUSTED",
    )  # fmt: skip
    max_streams_per_client: int = setting(
        DEFAULT_MAX_STREAMS_PER_CLIENT, env="TTS_MAX_STREAMS_PER_CLIENT", unit="count", minimum=0,
        doc="streams one client address may have open at a gateway, and as many HTTP requests; more are refused with "
        "RESOURCE_EXHAUSTED (HTTP 429) (0: no limit)",
    )  # fmt: skip
    opening_max_ids: int = setting(
        DEFAULT_OPENING_MAX_IDS, env="TTS_OPENING_MAX_IDS", unit="phoneme ids", minimum=0,
        doc="a first sentence of more than twice as many phoneme ids starts with its opening of at most this many (the "
        "leading clauses that fit, going on as a part of the whole sentence; else words up to a conjunction) spoken on its "
        "own, so its first audio costs about a short sentence's (0: never)",
    )  # fmt: skip
    admission_headroom: float = setting(
        DEFAULT_ADMISSION_HEADROOM, env="TTS_ADMISSION_HEADROOM", unit="ratio", minimum=0, maximum=1,
        doc="share of the mesh's real-time capacity the listeners may need: a new stream that would make one run dry "
        "is refused with RESOURCE_EXHAUSTED and a retry hint, and under contention a client over an equal share is "
        "refused first (0: no real-time admission)",
    )  # fmt: skip
    room_wait_ms: int = setting(
        DEFAULT_ROOM_WAIT_MS, env="TTS_ROOM_WAIT_MS", unit="ms", minimum=0, maximum=60_000,
        doc="how long a stream (a whole text, or one streamed in pieces) that finds the mesh full (by real-time "
        "admission, or all the workers' streams taken) waits for room, oldest first, before it is refused; never more "
        "than half of what its deadline leaves (0: refused at once)",
    )  # fmt: skip
    active_client_s: float = setting(
        DEFAULT_ACTIVE_CLIENT_S, env="TTS_ACTIVE_CLIENT_S", unit="s", minimum=0,
        doc="how long a client keeps its equal share after it last asked or its last stream ended, so a flood from "
        "another client cannot take the share of one that asks for short streams one after another",
    )  # fmt: skip
    realtime_min_share: float = setting(
        DEFAULT_MIN_SHARE, env="TTS_REALTIME_MIN_SHARE", unit="ratio", minimum=0.1, maximum=1,
        doc="least share of the mesh's real-time capacity admission keeps trusting when listeners hear gaps under "
        "load (each gap cuts the share, which grows back while none is heard; 1: gaps cut nothing)",
    )  # fmt: skip
    auto_quality_share: float = setting(
        DEFAULT_AUTO_QUALITY_SHARE, env="TTS_AUTO_QUALITY_SHARE", unit="ratio", minimum=0, maximum=1,
        doc="streams asking for the tier auto speak the quality tier while the listeners fit in this share of what "
        "admission takes; past it new ones start in the fast tier and playing ones move to it at their next sentence "
        "(1: only when a stream would otherwise be refused)",
    )  # fmt: skip


@dataclass(frozen=True)
class SynthesisOptions:
    """Everything about a request except its text, validated and with defaults applied."""

    voice: Voice
    """The voice to speak with."""
    speed: float
    """Speaking-rate multiple, in [MIN_SPEED, MAX_SPEED]."""
    encoding: int
    """AudioEncoding of the output (never UNSPECIFIED)."""
    sample_rate_hz: int
    """Output sample rate."""
    speaker_id: int
    """Speaker index within the voice."""
    request_id: str
    """The caller's request id, or a generated one."""
    include_alignment: bool
    """Whether sentences carry per-phoneme durations."""
    lexicon: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """The request's pronunciations: lower-cased word -> phonemes, checked against the voice."""
    ssml: bool = False
    """The text is an SSML document (a text that starts with <speak> is one anyway)."""
    resume: ResumeFrom | None = None
    """Where a broken stream goes on (libs.synthesis.resume); None: from the start."""
    frame_ms: int = 0
    """Audio leaves in real-time frames of this many milliseconds (libs.synthesis.pacing); 0: as it is made."""
    tier: str = ""
    """The voice's tier (libs.voice.tiers): as asked ("" for none, quality, fast or auto) until the
    stream is admitted, then the one it is spoken in (quality or fast)."""
    eager_opening: bool = False
    """Whether its first sentence opens sooner, as for a stream that starts alone on the mesh
    (`TextFrontend.chunk_sentences`): decided when the stream is admitted, or read from its resume token."""

    @property
    def resumable(self) -> bool:
        """Whether the stream's chunks carry resume points (its encoding's bytes are its samples)."""
        return self.encoding in RESUMABLE_ENCODINGS

    @property
    def digest(self) -> bytes:
        """The check a resume token carries of these options (libs.synthesis.resume.options_digest)."""
        spoken = self.tier if self.tier in SPOKEN and self.tier != QUALITY else ""
        return options_digest(
            self.voice.name, self.speaker_id, self.speed, self.encoding, self.sample_rate_hz, spoken, self.eager_opening
        )  # fmt: skip

    def resume_token(self, point: ResumePoint) -> str:
        """The token a client sends back to go on from `point` of a stream spoken with these options: it
        names the tier of the point's sentence (an auto stream may have moved to the fast tier since its start)."""
        return encode_token(point, (replace(self, tier=point.tier) if point.tier else self).digest)


def _output_rate(encoding: int, sample_rate_hz: int, voice: Voice) -> int:
    """The output rate for `encoding`: the one asked for if the encoding carries it, its default for 0."""
    spec = ENCODINGS[encoding]
    default_hz = spec.default_rate_hz or voice.sample_rate_hz
    if sample_rate_hz == 0:
        return default_hz
    name = tts_pb2.AudioEncoding.Name(encoding)
    if not MIN_OUTPUT_SAMPLE_RATE_HZ <= sample_rate_hz <= MAX_OUTPUT_SAMPLE_RATE_HZ:
        raise InvalidRequestError(
            f"sample_rate_hz {sample_rate_hz} is not supported; use {MIN_OUTPUT_SAMPLE_RATE_HZ} to "
            f"{MAX_OUTPUT_SAMPLE_RATE_HZ} Hz, or 0 for {name}'s default of {default_hz} Hz",
            field="sample_rate_hz",
        )
    if spec.sample_rates_hz is not None and sample_rate_hz not in spec.sample_rates_hz:
        rates = ", ".join(str(rate) for rate in spec.sample_rates_hz)
        raise InvalidRequestError(
            f"{name} cannot carry {sample_rate_hz} Hz; use one of {rates}, or 0 for its default of {default_hz} Hz",
            field="sample_rate_hz",
        )
    return sample_rate_hz


def resolve_options(
    registry: VoiceRegistry,
    *,
    voice: str,
    speed: float,
    encoding: int,
    sample_rate_hz: int,
    speaker_id: int,
    request_id: str,
    include_alignment: bool,
    lexicon: Mapping[str, str] | None = None,
    ssml: bool = False,
    resume_token: str = "",
    frame_ms: int = 0,
    speaker: str = "",
    tier: str = "",
) -> SynthesisOptions:
    """Validate the non-text fields of a request: UnknownVoiceError for an unknown voice, else
    InvalidRequestError whose `field` names the field to fix (a lexicon entry that is not a word, or
    a phoneme the voice cannot speak, is one of `lexicon`, and its message names the entry; a resume
    token made for other options is one of `resume_token`; a tier the voice lacks is one of `tier`)."""
    chosen = registry.get(voice)
    if tier == FAST and FAST not in chosen.tiers:
        with_fast = [other.name for other in registry.voices() if FAST in other.tiers]
        raise InvalidRequestError(
            f"voice {chosen.name} has no fast tier; use tier quality or auto"
            + (f", or a voice that has one: {', '.join(with_fast)}" if with_fast else ""),
            field=TIER_FIELD,
        )
    if speed == 0:
        speed = 1.0
    if not math.isfinite(speed) or not MIN_SPEED <= speed <= MAX_SPEED:
        raise InvalidRequestError(f"speed {speed} is out of range; use {MIN_SPEED} to {MAX_SPEED} (0 means 1.0)", field="speed")
    if encoding == tts_pb2.AUDIO_ENCODING_UNSPECIFIED:
        encoding = tts_pb2.LINEAR_PCM
    if encoding not in ENCODINGS:
        names = ", ".join(tts_pb2.AudioEncoding.Name(value) for value in ENCODINGS)
        raise InvalidRequestError(f"audio encoding {encoding} is not supported; use one of {names}", field="encoding")
    sample_rate_hz = _output_rate(encoding, sample_rate_hz, chosen)
    if speaker:
        speaker_id = chosen.speaker_id(speaker)
    if not 0 <= speaker_id < chosen.num_speakers:
        raise InvalidRequestError(
            f"speaker_id {speaker_id} does not exist in voice {chosen.name!r}; use 0 to {chosen.num_speakers - 1}",
            field="speaker_id",
        )
    if len(request_id) > MAX_REQUEST_ID_CHARS:
        raise InvalidRequestError(
            f"request_id is {len(request_id)} characters long; use at most {MAX_REQUEST_ID_CHARS}", field="request_id"
        )
    _check_frame_ms(frame_ms, encoding, sample_rate_hz)
    options = SynthesisOptions(
        voice=chosen,
        speed=float(speed),
        encoding=encoding,
        sample_rate_hz=sample_rate_hz,
        speaker_id=speaker_id,
        request_id=request_id or uuid.uuid4().hex,
        include_alignment=include_alignment,
        lexicon=_checked_lexicon(lexicon, chosen) if lexicon else {},
        ssml=ssml,
        frame_ms=frame_ms,
        tier=tier,
    )
    return with_resume(options, resume_token) if resume_token else options


def with_resume(options: SynthesisOptions, resume_token: str) -> SynthesisOptions:
    """`options` going on from `resume_token` (libs.synthesis.resume), or InvalidRequestError (field
    `resume_token`) for a token of other options, or an encoding that cannot resume."""
    if not options.resumable:
        names = ", ".join(tts_pb2.AudioEncoding.Name(value) for value in sorted(RESUMABLE_ENCODINGS))
        raise InvalidRequestError(f"a stream resumes only in an encoding whose bytes are its samples ({names})", field=RESUME_FIELD)
    resume = decode_token(resume_token)
    # A stream goes on in the tier it was spoken in (with none or auto asked, the token says which),
    # with its text cut as it was (an eager opening or not).
    asked = [options.tier] if options.tier in SPOKEN else list(SPOKEN)
    candidates = [replace(options, tier=tier, eager_opening=eager) for tier in asked for eager in (False, True)]
    spoken = next((candidate for candidate in candidates if candidate.digest == resume.options_digest), None)
    if spoken is None:
        raise InvalidRequestError(
            "resume_token was made for other options: send the voice, speaker, speed, encoding, rate and tier of the stream it came from",
            field=RESUME_FIELD,
        )
    return replace(spoken, resume=resume)


def with_default_tier(options: SynthesisOptions, default: str) -> SynthesisOptions:
    """`options` in `default` (an API key's tier) when the request named none: a default of fast for a
    voice without a fast tier speaks in quality, as a default is no demand."""
    if options.tier or not default:
        return options
    return replace(options, tier=QUALITY if default == FAST and FAST not in options.voice.tiers else default)


def with_speed(options: SynthesisOptions, speed: float) -> SynthesisOptions:
    """`options` at another speed, checked as a request's speed is."""
    if not math.isfinite(speed) or not MIN_SPEED <= speed <= MAX_SPEED:
        raise InvalidRequestError(f"speed {speed} is out of range; use {MIN_SPEED} to {MAX_SPEED}", field="speed")
    return replace(options, speed=float(speed))


def _check_frame_ms(frame_ms: int, encoding: int, sample_rate_hz: int) -> None:
    if frame_ms == 0:
        return
    if not MIN_FRAME_MS <= frame_ms <= MAX_FRAME_MS:
        raise InvalidRequestError(f"frame_ms {frame_ms} is out of range; use {MIN_FRAME_MS} to {MAX_FRAME_MS} (0: no frames)",
                                  field="frame_ms")  # fmt: skip
    if encoding not in PACED_ENCODINGS:
        names = ", ".join(tts_pb2.AudioEncoding.Name(value) for value in sorted(PACED_ENCODINGS))
        raise InvalidRequestError(f"real-time frames need an encoding without a header or codec: {names}", field="frame_ms")
    if frame_ms * sample_rate_hz % 1000:
        raise InvalidRequestError(
            f"{frame_ms} ms is not a whole number of samples at {sample_rate_hz} Hz; choose a frame length that is (20 ms at 8, 16, 22.05, 24 or 48 kHz)",
            field="frame_ms",
        )


def _checked_lexicon(entries: Mapping[str, str], voice: Voice) -> dict[str, tuple[str, ...]]:
    try:
        return parse_lexicon_entries(entries, voice.phoneme_id_map(), "the request's lexicon")
    except TextError as error:
        raise InvalidRequestError(str(error), field="lexicon") from error
