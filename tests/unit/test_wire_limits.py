"""Every message the mesh sends fits the size limit of the port that takes it, measured at the bounds
the workers enforce; error messages never repeat unbounded client input; explaining an undecodable
request costs no more than parsing it."""

from __future__ import annotations

import contextlib
import time

import grpc
import numpy as np
import pytest

from libs.pb.tts.acoustic.v1 import acoustic_pb2
from libs.pb.tts.common.v1 import mel_pb2
from libs.pb.tts.v1 import tts_pb2
from libs.pb.tts.vocoder.v1 import vocoder_pb2
from libs.serving.server import DEFAULT_MAX_RECEIVE_MESSAGE_BYTES
from libs.serving.status import grpc_status_for
from libs.upstream.vocoder_stream import _requests
from libs.voice.registry import UnknownVoiceError, default_registry
from libs.wire.errors import DownstreamError, echo
from libs.wire.limits import (
    MAX_FRAMES_PER_MESSAGE,
    MAX_GATEWAY_REQUEST_BYTES,
    MAX_ID_CHARS,
    MAX_NAME_CHARS,
    MAX_PHONEME_IDS,
    MAX_RESPONSE_BYTES,
    MAX_SENTENCE_FRAMES,
    MAX_SENTENCE_REQUEST_BYTES,
    MAX_WORKER_MESSAGE_BYTES,
)
from libs.wire.mel_slices import cut_whole_mel, to_message
from libs.wire.request_decoding import UndecodableRequest, request_decoder
from services.settings import load_gateway_settings

N_MELS, HOP, RATE_HZ = 80, 256, 22050
WIDEST = "\U0001f600"  # four bytes of UTF-8: the most a character can take
LONGEST_ID = WIDEST * MAX_ID_CHARS


def _slices(frame_count: int, dtype: int, with_alignment: bool) -> list[mel_pb2.MelSlice]:
    """A sentence's slices from frame 0 with the longest utterance id, and on the first the longest alignment."""
    mel = np.full((N_MELS, frame_count), -3.0, dtype=np.float32)
    cuts = cut_whole_mel(mel, HOP, RATE_HZ)
    alignment = [MAX_SENTENCE_FRAMES - 1] * MAX_PHONEME_IDS
    return [
        to_message(
            cut, utterance_id=LONGEST_ID, sentence_index=2**31 - 1, sentence_frame_count=MAX_SENTENCE_FRAMES, dtype=dtype,
            phoneme_frames=alignment if with_alignment and index == 0 else None,
        )
        for index, cut in enumerate(cuts)
    ]


def test_the_largest_requests_fit_the_ports_that_take_them() -> None:
    sentence = acoustic_pb2.SentenceRequest(
        utterance_id=LONGEST_ID, sentence_index=2**31 - 1, phoneme_ids=[255] * MAX_PHONEME_IDS, voice="v" * MAX_NAME_CHARS,
        speaker_id=2**31 - 1, speed=4.0, noise_scale=2.0, noise_w=2.0, seed=2**64 - 1,
        expected_model_version="m" * MAX_NAME_CHARS, start_frame=MAX_SENTENCE_FRAMES - 1, slice_ms=1000.0,
        dtype=mel_pb2.MEL_DTYPE_FLOAT32,
    )  # fmt: skip
    # The gateway sends float16 mel; a whole cached sentence goes out in messages of at most
    # MAX_FRAMES_PER_MESSAGE frames, the first one with the sentence's alignment.
    vocode = list(_requests(_slices(3 * MAX_FRAMES_PER_MESSAGE, mel_pb2.MEL_DTYPE_FLOAT16, True), context_only=False))
    client = tts_pb2.SynthesizeRequest(
        text=WIDEST * 5000, voice="v" * 200, speed=4.0, encoding=tts_pb2.FLOAT_PCM, sample_rate_hz=48000, speaker_id=2**31 - 1,
        request_id=LONGEST_ID, include_alignment=True,
    )  # fmt: skip
    sizes = {
        "SentenceRequest": sentence.ByteSize(),
        "VocodeRequest": max(request.ByteSize() for request in vocode),
        "SynthesizeRequest": client.ByteSize(),
    }
    print(f"\nlargest requests (bytes): {sizes}")
    assert len(vocode) >= 3
    assert sizes["SentenceRequest"] <= MAX_SENTENCE_REQUEST_BYTES == DEFAULT_MAX_RECEIVE_MESSAGE_BYTES["acoustic"]
    assert sizes["VocodeRequest"] <= MAX_WORKER_MESSAGE_BYTES == DEFAULT_MAX_RECEIVE_MESSAGE_BYTES["vocoder"]
    assert sizes["SynthesizeRequest"] <= MAX_GATEWAY_REQUEST_BYTES == DEFAULT_MAX_RECEIVE_MESSAGE_BYTES["gateway"]


def test_the_largest_answers_fit_the_gateways_channels_and_its_clients() -> None:
    # An acoustic chunk is at most 1,024 frames plus the flow's lag; a caller may ask for float32.
    mel_slices = mel_pb2.MelSlices(slices=_slices(1024 + 64, mel_pb2.MEL_DTYPE_FLOAT32, True))
    # A vocoding step is at most 128 frames, the last one up to 16 frames more, plus the 21-frame lag.
    step_samples = (128 + 16 + 32) * HOP
    vocode = vocoder_pb2.VocodeResponse(
        utterance_id=LONGEST_ID, sentence_index=2**31 - 1, first_sample=2**62, samples=bytes(4 * step_samples),
        sample_rate_hz=RATE_HZ, is_last=True,
    )  # fmt: skip
    audio = tts_pb2.SynthesizeResponse(audio=bytes(4 * round(step_samples * 48000 / RATE_HZ)), request_id=LONGEST_ID)
    audio.sentence.text = WIDEST * 1000
    audio.sentence.phonemes = WIDEST * 4000
    audio.sentence.phoneme_frames.extend([MAX_SENTENCE_FRAMES - 1] * MAX_PHONEME_IDS)
    sizes = {"MelSlices": mel_slices.ByteSize(), "VocodeResponse": vocode.ByteSize(), "SynthesizeResponse": audio.ByteSize()}
    print(f"\nlargest answers (bytes): {sizes}")
    assert sizes["MelSlices"] <= MAX_WORKER_MESSAGE_BYTES
    assert sizes["VocodeResponse"] <= MAX_WORKER_MESSAGE_BYTES
    assert sizes["SynthesizeResponse"] <= MAX_RESPONSE_BYTES


def test_a_cached_sentence_goes_to_the_vocoder_in_bounded_messages_without_losing_a_slice() -> None:
    slices = _slices(5000, mel_pb2.MEL_DTYPE_FLOAT16, False)
    requests = list(_requests(slices, context_only=True))
    assert [s.slice_index for request in requests for s in request.slices] == [s.slice_index for s in slices]
    assert all(request.context_only for request in requests)
    assert all(sum(s.frame_count for s in request.slices) <= MAX_FRAMES_PER_MESSAGE for request in requests)
    assert len(requests) == 3


def test_an_unknown_voice_is_named_only_in_part() -> None:
    registry = default_registry()
    try:
        registry.get("A" * 15_000_000)
    except UnknownVoiceError as error:
        message = str(error)
    assert len(message) < 300, len(message)
    assert "'" + "A" * 64 + "'… (15000000 characters)" in message
    assert "en_US-joe-medium" in message
    assert echo("short") == "'short'"


def _unknown_fields_then_bad_text(size_bytes: int) -> bytes:
    """`size_bytes` of a request: one-byte unknown varint fields (field 99), then invalid UTF-8 text."""
    unknown = bytes([0x98, 0x06, 0x01]) * ((size_bytes - 8) // 3)  # key 99 << 3 | 0 as a varint, value 1
    return unknown + bytes([0x0A, 6]) + b"Hi \xff\xfe!"


def test_explaining_an_undecodable_request_costs_about_what_parsing_it_does() -> None:
    # The explainer runs on the gateway's event loop for every request that fails to parse. It once
    # walked every field in Python: 16 MB of unknown fields stalled the loop for seconds. Now it
    # parses again natively, so its cost is a small multiple of protobuf's own, at any size.
    decode = request_decoder(tts_pb2.SynthesizeRequest)
    data = _unknown_fields_then_bad_text(MAX_GATEWAY_REQUEST_BYTES)
    first = decode(data)  # builds the parser once
    assert isinstance(first, UndecodableRequest)
    assert first.reason.startswith("field `text` is not valid UTF-8: byte 0xff at byte offset 3")
    explain_s = _fastest(lambda: decode(data))
    parse_s = _fastest(lambda: _parse_ignoring_errors(data))
    print(f"\n{len(data)} bytes: parse {parse_s * 1e3:.3f} ms, parse and explain {explain_s * 1e3:.3f} ms")
    assert explain_s < 20 * parse_s + 0.002


def _parse_ignoring_errors(data: bytes) -> None:
    with contextlib.suppress(Exception):
        tts_pb2.SynthesizeRequest.FromString(data)


def _fastest(work, repeats: int = 20) -> float:  # type: ignore[no-untyped-def]
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        work()
        best = min(best, time.perf_counter() - started)
    return best


def test_a_status_message_is_bounded_whatever_it_relays() -> None:
    code, message = grpc_status_for(DownstreamError(grpc.StatusCode.INVALID_ARGUMENT, "w" * 100_000))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert len(message) < 1100 and message.endswith("… (100000 characters)")


def test_no_setting_asks_the_text_side_for_sentences_a_worker_would_refuse() -> None:
    longest = load_gateway_settings([], {"TTS_MAX_SENTENCE_IDS": str(MAX_PHONEME_IDS)})
    assert longest.text.max_sentence_ids == MAX_PHONEME_IDS
    with pytest.raises(SystemExit, match=rf"--max-sentence-ids \(TTS_MAX_SENTENCE_IDS\) must be at most {MAX_PHONEME_IDS}"):
        load_gateway_settings(["--max-sentence-ids", str(MAX_PHONEME_IDS + 1)], {})
