"""Properties of request validation for any input: whatever bytes or field values a caller sends, the
decoders and checks either accept values inside the documented ranges or raise the one domain error
that becomes INVALID_ARGUMENT (NOT_FOUND, FAILED_PRECONDITION for the fields naming another model),
with a message of bounded length; nothing else escapes (which would be INTERNAL).

The structure-aware inputs come from the live fuzzer's mutator (tests.support.fuzz.wire_mutations), driven
by hypothesis's own random source, so hypothesis shrinks and replays them."""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from libs.pb.tts.common.v1 import mel_pb2
from libs.pb.tts.v1 import tts_pb2
from libs.pb.tts.vocoder.v1 import vocoder_pb2
from libs.synthesis.options import MAX_SPEED, MIN_SPEED, resolve_options
from libs.text.errors import InvalidTextError
from libs.text.normalize import decode_utf8
from libs.voice.checks import MAX_NOISE_SCALE, check_sentence_request
from libs.voice.registry import UnknownVoiceError, default_registry
from libs.voice.tiers import FAST, QUALITY
from libs.voice.vocode_session import StreamSlices
from libs.wire.errors import InvalidRequestError, ModelVersionMismatchError, echo
from libs.wire.limits import MAX_ID_CHARS, MAX_PHONEME_IDS
from libs.wire.request_decoding import UndecodableRequest, request_decoder
from tests.support.fuzz.wire_mutations import Mutator, encode_fields, parse_fields

MESSAGE_LIMIT_CHARS = 400
"""No refusal repeats more than a few dozen characters of what the caller sent."""
N_MELS = 80
HOP = 256
VOCABULARY = 130

_INTS = st.one_of(st.integers(-(2**31), 2**31 - 1), st.sampled_from([0, 1, -1, 2**31 - 1, -(2**31)]))
_FLOATS = st.floats(width=32, allow_nan=True, allow_infinity=True)
_NAMES = st.one_of(st.text(max_size=40), st.integers(0, 100_000).map(lambda n: "A" * n))
_REQUESTS = {
    "Synthesize": tts_pb2.SynthesizeRequest(text="Hello there.", voice="en_US-joe-medium", speed=1.5, request_id="r"),
    "StreamingSynthesize": tts_pb2.StreamingSynthesizeRequest(config=tts_pb2.StreamingSynthesizeConfig(speed=0.5)),
    "ListVoices": tts_pb2.ListVoicesRequest(language_code="en_US"),
}


@settings(max_examples=300, deadline=None)
@given(
    method=st.sampled_from(sorted(_REQUESTS)),
    rng=st.randoms(use_true_random=False),
    raw=st.binary(max_size=200),
    mutated=st.booleans(),
)
def test_any_bytes_decode_to_a_request_or_a_short_reason(method: str, rng: random.Random, raw: bytes, mutated: bool) -> None:
    valid = _REQUESTS[method]
    data = Mutator(rng).mutate(valid.DESCRIPTOR, valid.SerializeToString()) if mutated else raw
    decoded = request_decoder(type(valid))(data)
    if isinstance(decoded, UndecodableRequest):
        assert decoded.reason and len(decoded.reason) < MESSAGE_LIMIT_CHARS
    else:
        assert isinstance(decoded, type(valid))


@settings(max_examples=300, deadline=None)
@given(voice=_NAMES, speed=_FLOATS, encoding=_INTS, rate=_INTS, speaker=_INTS, request_id=_NAMES, alignment=st.booleans())
def test_any_request_options_resolve_within_the_ranges_or_are_refused_briefly(
    voice: str, speed: float, encoding: int, rate: int, speaker: int, request_id: str, alignment: bool
) -> None:
    registry = default_registry()
    try:
        options = resolve_options(registry, voice=voice, speed=speed, encoding=encoding, sample_rate_hz=rate,
                                  speaker_id=speaker, request_id=request_id, include_alignment=alignment)  # fmt: skip
    except (InvalidRequestError, UnknownVoiceError) as refused:
        assert len(str(refused)) < MESSAGE_LIMIT_CHARS
        return
    assert MIN_SPEED <= options.speed <= MAX_SPEED
    assert 0 <= options.speaker_id < options.voice.num_speakers
    assert 8000 <= options.sample_rate_hz <= 48000
    assert 0 < len(options.request_id) <= 128


@settings(max_examples=400, deadline=None)
@given(
    utterance_id=_NAMES, index=_INTS, ids=st.lists(st.integers(-5, 200), max_size=50) | st.just([1] * (MAX_PHONEME_IDS + 1)),
    voice=st.sampled_from(["", "v", "other"]), speaker=_INTS, speed=_FLOATS, noise_scale=_FLOATS, noise_w=_FLOATS,
    start_frame=_INTS, slice_ms=_FLOATS, dtype=_INTS, version=st.sampled_from(["", "m1", "m2" * 200]),
)  # fmt: skip
def test_any_sentence_request_is_accepted_only_within_every_range(
    utterance_id: str, index: int, ids: list[int], voice: str, speaker: int, speed: float, noise_scale: float,
    noise_w: float, start_frame: int, slice_ms: float, dtype: int, version: str,
) -> None:  # fmt: skip
    try:
        check_sentence_request(
            utterance_id=utterance_id, sentence_index=index, phoneme_ids=ids, voice=voice, speaker_id=speaker,
            speed=speed, noise_scale=noise_scale, noise_w=noise_w, start_frame=start_frame, slice_ms=slice_ms,
            dtype=dtype, expected_model_version=version, worker_voice="v", worker_model_version="m1", num_speakers=1,
            vocabulary_size=VOCABULARY,
        )  # fmt: skip
    except (InvalidRequestError, UnknownVoiceError, ModelVersionMismatchError) as refused:
        assert len(str(refused)) < MESSAGE_LIMIT_CHARS
        return
    assert len(utterance_id) <= MAX_ID_CHARS and index >= 0 and speaker == 0
    assert 0 < len(ids) <= MAX_PHONEME_IDS and all(0 <= i < VOCABULARY for i in ids)
    assert all(math.isfinite(value) for value in (speed, noise_scale, noise_w, slice_ms))
    assert 0 <= noise_scale <= MAX_NOISE_SCALE and 0 <= noise_w <= MAX_NOISE_SCALE and start_frame >= 0


def _opener(tier: str) -> Callable[[int, int], Any]:
    """A vocoder's tiers as `VocoderEngine.for_tier` knows them: any other is refused."""
    if tier not in ("", QUALITY, FAST):
        raise InvalidRequestError(f"this vocoder has no {echo(tier)} tier of this voice; use {QUALITY} or {FAST}", field="tier")
    return lambda origin, emit_from: _CountingStream()


class _CountingStream:
    """Stands in for a vocoder stream: holds what it is given, steps never (bookkeeping only)."""

    def __init__(self) -> None:
        self.frames = 0
        self.ended = False
        self.in_parts = False
        self.step_continues = False

    def add(self, mel: np.ndarray) -> None:
        assert mel.shape[0] == N_MELS and np.isfinite(mel).all()
        self.frames += mel.shape[1]

    def end(self) -> None:
        self.ended = True

    def step_ready(self) -> bool:
        return False

    def step(self) -> np.ndarray:
        return np.zeros(0, np.float32)

    @property
    def done(self) -> bool:
        return self.ended


def _valid_vocode_request() -> vocoder_pb2.VocodeRequest:
    frames = np.zeros((N_MELS, 4), np.float16)
    return vocoder_pb2.VocodeRequest(slices=[mel_pb2.MelSlice(
        utterance_id="u", sentence_index=0, slice_index=0, first_frame=0, frame_count=4, n_mels=N_MELS,
        dtype=mel_pb2.MEL_DTYPE_FLOAT16, frames=frames.T.tobytes(), is_last=True, sentence_frame_count=4,
    )], tier=FAST)  # fmt: skip


@settings(max_examples=400, deadline=None)
@given(rng=st.randoms(use_true_random=False), messages=st.integers(1, 4))
def test_any_stream_of_mutated_mel_slices_is_taken_or_refused_as_invalid(rng: random.Random, messages: int) -> None:
    valid = _valid_vocode_request()
    mutator = Mutator(rng)
    slices = StreamSlices(N_MELS, HOP, _opener)
    try:
        for _ in range(messages):
            request = vocoder_pb2.VocodeRequest.FromString(mutator.mutate(valid.DESCRIPTOR, valid.SerializeToString()))
            for mel_slice in request.slices:
                slices.accept(mel_slice, request.context_only)
    except InvalidRequestError as refused:
        assert len(str(refused)) < MESSAGE_LIMIT_CHARS
    except Exception as error:  # the wire itself did not parse: what the server's decoder answers first
        assert type(error).__name__ == "DecodeError", repr(error)


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=100) | st.text(max_size=50).map(str.encode))
def test_any_bytes_of_text_decode_or_name_the_first_bad_byte(data: bytes) -> None:
    try:
        text = decode_utf8(data)
    except InvalidTextError as refused:
        with pytest.raises(UnicodeDecodeError) as strict:
            data.decode("utf-8")
        assert str(strict.value.start) in str(refused) and len(str(refused)) < MESSAGE_LIMIT_CHARS
        return
    assert text.encode("utf-8") == data


@settings(max_examples=200, deadline=None)
@given(text=st.text(max_size=40), voice=st.text(max_size=10), speed=_FLOATS, rate=_INTS, speaker=_INTS, alignment=st.booleans())
def test_the_fuzzers_wire_reader_and_writer_give_back_any_valid_message(
    text: str, voice: str, speed: float, rate: int, speaker: int, alignment: bool
) -> None:
    request = tts_pb2.SynthesizeRequest(
        text=text, voice=voice, speed=speed, sample_rate_hz=rate, speaker_id=speaker, include_alignment=alignment
    )
    data = request.SerializeToString()
    assert encode_fields(parse_fields(data)) == data
