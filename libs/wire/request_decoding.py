"""Decoding client requests without letting a malformed one turn into INTERNAL.

protobuf rejects a `string` field that is not valid UTF-8 when it parses a message, and gRPC would
answer such a request with a generic error. The gateway decodes requests itself: a message that
fails to parse becomes an `UndecodableRequest` carrying a precise reason (which field, which byte),
and the servicer answers it with INVALID_ARGUMENT like any other bad input.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator, TypeVar

from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import DecodeError, Message

M = TypeVar("M", bound=Message)

_VARINT, _FIXED64, _LENGTH_DELIMITED, _FIXED32 = 0, 1, 2, 5


@dataclass(frozen=True)
class UndecodableRequest:
    """Stands in for a request message that could not be parsed."""

    reason: str
    """Why, in words a client can act on."""


def request_decoder(message_type: type[M]) -> Callable[[bytes], M | UndecodableRequest]:
    """A gRPC request deserializer for `message_type` that never raises."""

    def decode(data: bytes) -> M | UndecodableRequest:
        try:
            return message_type.FromString(data)
        except DecodeError:
            return UndecodableRequest(describe_decode_failure(message_type.DESCRIPTOR, data))

    return decode


def describe_decode_failure(descriptor: Descriptor, data: bytes) -> str:
    """Explain why `data` is not a valid `descriptor` message, naming the first bad string field if any."""
    try:
        problem = _first_invalid_string(descriptor, data, prefix="")
    except ValueError:
        problem = None
    if problem:
        return problem
    return f"the request is not a valid {descriptor.full_name} message"


def _first_invalid_string(descriptor: Descriptor, data: bytes, prefix: str) -> str | None:
    for number, wire_type, value in _iter_fields(data):
        field = descriptor.fields_by_number.get(number)
        if field is None or wire_type != _LENGTH_DELIMITED:
            continue
        name = prefix + field.name
        if field.type == FieldDescriptor.TYPE_STRING:
            try:
                bytes(value).decode("utf-8")
            except UnicodeDecodeError as error:
                return (
                    f"field `{name}` is not valid UTF-8: byte 0x{value[error.start]:02x} at byte offset {error.start}; "
                    "send text encoded as UTF-8"
                )
        elif field.type == FieldDescriptor.TYPE_MESSAGE:
            nested = _first_invalid_string(field.message_type, bytes(value), prefix=name + ".")
            if nested:
                return nested
    return None


def _iter_fields(data: bytes) -> Iterator[tuple[int, int, bytes]]:
    """(field number, wire type, raw value) of each top-level field; ValueError on malformed wire data."""
    position = 0
    while position < len(data):
        key, position = _read_varint(data, position)
        number, wire_type = key >> 3, key & 7
        if wire_type == _VARINT:
            _, end = _read_varint(data, position)
        elif wire_type == _FIXED64:
            end = position + 8
        elif wire_type == _FIXED32:
            end = position + 4
        elif wire_type == _LENGTH_DELIMITED:
            length, position = _read_varint(data, position)
            end = position + length
        else:
            raise ValueError(f"unsupported wire type {wire_type}")
        if end > len(data):
            raise ValueError("truncated field")
        yield number, wire_type, data[position:end]
        position = end


def _read_varint(data: bytes, position: int) -> tuple[int, int]:
    value = 0
    for shift in range(0, 64, 7):
        if position >= len(data):
            raise ValueError("truncated varint")
        byte = data[position]
        position += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, position
    raise ValueError("varint longer than 10 bytes")
