"""Malformed request bytes become a precise INVALID_ARGUMENT reason instead of a crash."""

from __future__ import annotations

from libs.pb.tts.v1 import tts_pb2
from libs.wire.request_decoding import UndecodableRequest, request_decoder


def _length_delimited(field_number: int, payload: bytes) -> bytes:
    assert len(payload) < 128
    return bytes([field_number << 3 | 2, len(payload)]) + payload


def test_valid_request_decodes_normally() -> None:
    data = tts_pb2.SynthesizeRequest(text="Hello.", speed=1.5).SerializeToString()
    decoded = request_decoder(tts_pb2.SynthesizeRequest)(data)
    assert isinstance(decoded, tts_pb2.SynthesizeRequest) and decoded.text == "Hello." and decoded.speed == 1.5


def test_invalid_utf8_text_names_the_field_and_byte() -> None:
    data = _length_delimited(1, b"Hi \xff there")
    decoded = request_decoder(tts_pb2.SynthesizeRequest)(data)
    assert isinstance(decoded, UndecodableRequest)
    assert decoded.reason.startswith("field `text` is not valid UTF-8: byte 0xff at byte offset 3")


def test_invalid_utf8_inside_a_nested_config_is_found() -> None:
    config = _length_delimited(1, b"\xc3\x28")  # StreamingSynthesizeConfig.voice
    decoded = request_decoder(tts_pb2.StreamingSynthesizeRequest)(_length_delimited(1, config))
    assert isinstance(decoded, UndecodableRequest)
    assert "`config.voice` is not valid UTF-8" in decoded.reason


def test_garbage_bytes_get_a_generic_reason() -> None:
    decoded = request_decoder(tts_pb2.SynthesizeRequest)(b"\x0a\x7f\x01")
    assert isinstance(decoded, UndecodableRequest)
    assert decoded.reason == "the request is not a valid tts.v1.SynthesizeRequest message"


def test_invalid_utf8_in_a_map_key_is_found_and_every_request_type_still_decodes() -> None:
    # A map's key must stay a string in protobuf, so the decoder reads map entries as plain messages.
    entry = _length_delimited(1, b"\xffword") + _length_delimited(2, b"w3rd")
    decoded = request_decoder(tts_pb2.SynthesizeRequest)(_length_delimited(1, b"Hi.") + _length_delimited(9, entry))
    assert isinstance(decoded, UndecodableRequest)
    assert decoded.reason.startswith("field `lexicon.key` is not valid UTF-8: byte 0xff at byte offset 0")
    for message_type in (tts_pb2.SynthesizeRequest, tts_pb2.StreamingSynthesizeRequest, tts_pb2.ListVoicesRequest):
        assert isinstance(request_decoder(message_type)(b"\x00"), UndecodableRequest)
