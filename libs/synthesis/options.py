"""What a client may ask for besides its text: checked, with defaults applied, or InvalidRequestError."""

from __future__ import annotations

import math
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from libs.encoding.encoders import ENCODINGS
from libs.pb.tts.v1 import tts_pb2
from libs.settings.fields import setting
from libs.text.errors import TextError
from libs.text.frontend import DEFAULT_MAX_TEXT_CHARS
from libs.text.pronounce import parse_lexicon_entries
from libs.voice.checks import MAX_SPEED, MIN_SPEED
from libs.voice.registry import Voice, VoiceRegistry
from libs.wire.errors import InvalidRequestError
from libs.wire.limits import MAX_ID_CHARS

MAX_REQUEST_ID_CHARS: Final = MAX_ID_CHARS  # it becomes the utterance id the workers check
# A CPU gateway process relays ~25 slices/s per stream; a few hundred streams keep it well below
# one core, and beyond that queueing in the gateway only adds latency the client would rather
# spend retrying another gateway.
DEFAULT_MAX_STREAMS: Final = 256
# A quarter of the gateway: one client (an address; behind a NAT, many people) cannot take it all.
DEFAULT_MAX_STREAMS_PER_CLIENT: Final = 64
# Half of what the workers behind the gateway take: one client flooding it leaves the other half to
# everyone else, and a client alone still gets most of the mesh.
DEFAULT_OPENING_STRETCH: Final = 1.15
"""Leaves room under the 1.3 times a short sentence's first audio that a long one may take."""
DEFAULT_ADMISSION_HEADROOM: Final = 0.9
"""A tenth of the capacity stays for what the cost model does not see coming (a longer sentence than
the text suggests, another process on the cores)."""
MIN_OUTPUT_SAMPLE_RATE_HZ: Final = 8000
MAX_OUTPUT_SAMPLE_RATE_HZ: Final = 48000


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
    opening_stretch: float = setting(
        DEFAULT_OPENING_STRETCH, env="TTS_OPENING_STRETCH", unit="ratio", minimum=0,
        doc="a first sentence whose first audio would take more than this many times a short sentence's starts with its "
        "opening (a clause, else words up to a conjunction) spoken as a sentence of its own (0: never)",
    )  # fmt: skip
    admission_headroom: float = setting(
        DEFAULT_ADMISSION_HEADROOM, env="TTS_ADMISSION_HEADROOM", unit="ratio", minimum=0, maximum=1,
        doc="share of the mesh's real-time capacity the listeners may need: a new stream that would make one run dry "
        "is refused with RESOURCE_EXHAUSTED and a retry hint, and under contention a client over an equal share is "
        "refused first (0: no real-time admission)",
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
) -> SynthesisOptions:
    """Validate the non-text fields of a request: UnknownVoiceError for an unknown voice, else
    InvalidRequestError whose `field` names the field to fix (a lexicon entry that is not a word, or
    a phoneme the voice cannot speak, is one of `lexicon`, and its message names the entry)."""
    chosen = registry.get(voice)
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
    if not 0 <= speaker_id < chosen.num_speakers:
        raise InvalidRequestError(
            f"speaker_id {speaker_id} does not exist in voice {chosen.name!r}; use 0 to {chosen.num_speakers - 1}",
            field="speaker_id",
        )
    if len(request_id) > MAX_REQUEST_ID_CHARS:
        raise InvalidRequestError(
            f"request_id is {len(request_id)} characters long; use at most {MAX_REQUEST_ID_CHARS}", field="request_id"
        )
    return SynthesisOptions(
        voice=chosen,
        speed=float(speed),
        encoding=encoding,
        sample_rate_hz=sample_rate_hz,
        speaker_id=speaker_id,
        request_id=request_id or uuid.uuid4().hex,
        include_alignment=include_alignment,
        lexicon=_checked_lexicon(lexicon, chosen) if lexicon else {},
        ssml=ssml,
    )


def _checked_lexicon(entries: Mapping[str, str], voice: Voice) -> dict[str, tuple[str, ...]]:
    try:
        return parse_lexicon_entries(entries, voice.phoneme_id_map(), "the request's lexicon")
    except TextError as error:
        raise InvalidRequestError(str(error), field="lexicon") from error
