"""What a client sends the real gateway is bounded: a request past the port's message limit is refused
by gRPC before any of it is decoded, and no error message repeats more than a bounded part of the
client's input (an unknown voice once came back whole, and broke the client's metadata limit)."""

from __future__ import annotations

import threading

import grpc
import pytest

from libs.pb.tts.v1 import tts_pb2, tts_pb2_grpc
from libs.wire.limits import MAX_GATEWAY_REQUEST_BYTES
from tests.support.client import synthesize
from tests.support.mesh import Mesh

MESSAGE_LIMIT_CHARS = 400


def _raw_synthesize(address: str, body: bytes) -> grpc.RpcError:
    with grpc.insecure_channel(address, options=[("grpc.max_send_message_length", -1)]) as channel:
        call = channel.unary_stream("/tts.v1.TextToSpeech/Synthesize", request_serializer=None, response_deserializer=None)
        with pytest.raises(grpc.RpcError) as caught:
            list(call(body, timeout=60))
    return caught.value


def _status(address: str, **fields: object) -> grpc.RpcError:
    with grpc.insecure_channel(address, options=[("grpc.max_send_message_length", -1)]) as channel:
        call = tts_pb2_grpc.TextToSpeechStub(channel).Synthesize(tts_pb2.SynthesizeRequest(**fields), timeout=60)
        with pytest.raises(grpc.RpcError) as caught:
            list(call)
    return caught.value


def test_a_16_mb_request_is_refused_unread_while_other_calls_go_on(mesh: Mesh) -> None:
    # An unknown field of 16 MB, then text that is not UTF-8: once decoded field by field, for seconds.
    body = bytes([0xFA, 0x06]) + _varint(16_000_000) + bytes(16_000_000) + bytes([0x0A, 3]) + b"\xff\xfe!"
    other: dict[str, float] = {}
    worker = threading.Thread(target=lambda: other.update(seconds=synthesize(mesh.gateway_address, "Meanwhile.").duration_s))
    worker.start()
    error = _raw_synthesize(mesh.gateway_address, body)
    worker.join(timeout=120)
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, error.details()
    assert f"vs. {MAX_GATEWAY_REQUEST_BYTES}" in error.details(), error.details()
    assert other["seconds"] > 0.3


def test_a_request_just_over_the_limit_is_refused_and_one_under_it_is_decoded(mesh: Mesh) -> None:
    over = _status(mesh.gateway_address, text="Hi.", voice="v" * MAX_GATEWAY_REQUEST_BYTES)
    assert over.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    under = _status(mesh.gateway_address, text="Hi.", voice="A" * 20_000)
    assert under.code() == grpc.StatusCode.NOT_FOUND
    assert "… (20000 characters); available voices: en_US-joe-medium" in under.details()
    assert len(under.details()) < MESSAGE_LIMIT_CHARS


def test_a_huge_voice_name_is_refused_by_size_not_echoed(mesh: Mesh) -> None:
    error = _status(mesh.gateway_address, text="Hi.", voice="A" * 15_000_000)
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "metadata" not in error.details() and len(error.details()) < MESSAGE_LIMIT_CHARS, error.details()


def test_a_long_request_id_is_measured_not_echoed(mesh: Mesh) -> None:
    error = _status(mesh.gateway_address, text="Hi.", request_id="r" * 1000)
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error.details() == "request_id is 1000 characters long; use at most 128"


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)
