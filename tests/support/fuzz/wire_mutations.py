"""Structure-aware mutation of protobuf messages at the level of their wire bytes.

A message is read into its fields as they travel (number, wire type, raw value), one field is
changed in a way its schema makes interesting (a float turned NaN, a string turned invalid UTF-8,
an id past any vocabulary, a nested message mutated in turn, a field sent with the wrong wire
type, an unknown field, a duplicate), and the fields are written back. Some inputs then get a
byte-level change on top (a flipped bit, a cut, a length prefix that lies), so the parsers see
garbage as well as plausible messages. Everything is drawn from one `random.Random`, so a seed
gives the same inputs again.
"""

from __future__ import annotations

import random
import struct
from dataclasses import dataclass
from typing import Final

from google.protobuf.descriptor import Descriptor, FieldDescriptor

VARINT: Final = 0
FIXED64: Final = 1
LENGTH_DELIMITED: Final = 2
FIXED32: Final = 5
_WIRE_TYPES: Final = (VARINT, FIXED64, LENGTH_DELIMITED, 3, 4, FIXED32, 6, 7)

INTERESTING_INTS: Final = (
    0,
    1,
    -1,
    2,
    7,
    79,
    80,
    81,
    255,
    256,
    1024,
    4096,
    65_536,
    2**31 - 1,
    -(2**31),
    2**32 - 1,
    2**63 - 1,
    -(2**63),
)
INTERESTING_FLOATS: Final = (
    0.0, -0.0, 1.0, -1.0, 0.25, 0.2499, 4.0, 4.0001, 2.0, 2.0001, 1e-45, 1e38, -1e38, 3.4e38,
    float("nan"), float("inf"), float("-inf"),
)  # fmt: skip
INVALID_UTF8: Final = (b"\xff", b"\xc3", b"\xc0\xaf", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\x80abc", b"ok\xe2\x82")
ATTACK_TEXTS: Final = (
    "s'" * 220, " " * 5000 + "a B", "😀 مرحبا 你好 привет ש Hello " * 40, "and so it goes on " * 55, "x" * 300,
    "\x00", "\u200b" * 100, "e\u0301" * 300, "Dr. " * 200, "1,234,567.89 " * 50, "\ud7ff\ue000\uffff",
)  # fmt: skip


@dataclass
class WireField:
    """One field as it travels: its number, wire type and raw value (an int for varints, bytes otherwise)."""

    number: int
    wire_type: int
    value: int | bytes


def encode_varint(value: int) -> bytes:
    """A varint; negative values as protobuf writes them (ten bytes of two's complement)."""
    value &= (1 << 64) - 1
    out = bytearray()
    while True:
        low = value & 0x7F
        value >>= 7
        if value:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def _read_varint(data: bytes, position: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if position >= len(data) or shift > 63:
            raise ValueError("truncated varint")
        byte = data[position]
        position += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, position


def parse_fields(data: bytes) -> list[WireField]:
    """The fields of a well-formed message, in order (ValueError for anything else)."""
    fields: list[WireField] = []
    position = 0
    while position < len(data):
        tag, position = _read_varint(data, position)
        number, wire_type = tag >> 3, tag & 7
        if wire_type == VARINT:
            value, position = _read_varint(data, position)
            fields.append(WireField(number, wire_type, value))
        elif wire_type in (FIXED64, FIXED32):
            width = 8 if wire_type == FIXED64 else 4
            if position + width > len(data):
                raise ValueError("truncated fixed field")
            fields.append(WireField(number, wire_type, data[position : position + width]))
            position += width
        elif wire_type == LENGTH_DELIMITED:
            length, position = _read_varint(data, position)
            if position + length > len(data):
                raise ValueError("truncated length-delimited field")
            fields.append(WireField(number, wire_type, data[position : position + length]))
            position += length
        else:
            raise ValueError(f"wire type {wire_type} is not used by proto3")
    return fields


def encode_fields(fields: list[WireField]) -> bytes:
    """The wire bytes of `fields` (a value of the wrong kind for its wire type is written as given)."""
    out = bytearray()
    for field in fields:
        out += encode_varint((field.number << 3) | field.wire_type)
        value = field.value
        if field.wire_type == VARINT:
            out += encode_varint(value if isinstance(value, int) else len(value))
        elif field.wire_type == LENGTH_DELIMITED:
            raw = value if isinstance(value, bytes) else encode_varint(value)
            out += encode_varint(len(raw)) + raw
        else:
            out += value if isinstance(value, bytes) else encode_varint(value)
    return bytes(out)


class Mutator:
    """Mutations of messages of known types, drawn from `rng`."""

    def __init__(self, rng: random.Random, max_bytes: int = 64 * 1024) -> None:
        self.rng = rng
        self.max_bytes = max_bytes
        """Roughly the largest input made: a little over the largest message a server takes, so its
        size limit is tried too."""

    def mutate(self, descriptor: Descriptor, data: bytes, rounds: int | None = None) -> bytes:
        """`data` (a `descriptor` message) with 1-3 structural changes and sometimes a byte-level one."""
        rng = self.rng
        try:
            fields = parse_fields(data)
        except ValueError:
            fields = []
        for _ in range(rounds or rng.choice((1, 1, 1, 2, 3))):
            fields = self._mutate_fields(descriptor, fields)
        out = encode_fields(fields)
        if rng.random() < 0.15:
            out = self.byte_level(out)
        return out[: self.max_bytes]

    def _mutate_fields(self, descriptor: Descriptor, fields: list[WireField]) -> list[WireField]:
        rng = self.rng
        fields = list(fields)
        known = list(descriptor.fields)
        roll = rng.random()
        if roll < 0.55 and known:
            field = rng.choice(known)
            present = [i for i, wire in enumerate(fields) if wire.number == field.number]
            new = self._value_for(field)
            if present and rng.random() < 0.8:
                fields[rng.choice(present)] = new
            else:
                fields.insert(rng.randrange(len(fields) + 1), new)
        elif roll < 0.65 and known:  # a known field with another wire type
            field = rng.choice(known)
            wire_type = rng.choice([t for t in (VARINT, FIXED64, LENGTH_DELIMITED, FIXED32) if t != _wire_type_of(field)])
            fields.append(WireField(field.number, wire_type, self._raw_value(wire_type)))
        elif roll < 0.75 and fields:
            del fields[rng.randrange(len(fields))]
        elif roll < 0.85 and fields:
            fields.insert(rng.randrange(len(fields) + 1), rng.choice(fields))
        else:  # an unknown field
            number = rng.choice((15, 99, 1000, 2**29 - 1, rng.randint(16, 2**20)))
            wire_type = rng.choice((VARINT, FIXED64, LENGTH_DELIMITED, FIXED32))
            fields.insert(rng.randrange(len(fields) + 1), WireField(number, wire_type, self._raw_value(wire_type)))
        return fields

    def _value_for(self, field: FieldDescriptor) -> WireField:
        """A new value for `field`, in its own wire type, chosen to probe its checks."""
        rng = self.rng
        kind = field.type
        number = field.number
        if kind == FieldDescriptor.TYPE_FLOAT:
            return WireField(number, FIXED32, struct.pack("<f", self._float()) if rng.random() < 0.9 else rng.randbytes(4))
        if kind == FieldDescriptor.TYPE_DOUBLE:
            return WireField(number, FIXED64, struct.pack("<d", self._float()) if rng.random() < 0.9 else rng.randbytes(8))
        if kind == FieldDescriptor.TYPE_STRING:
            return WireField(number, LENGTH_DELIMITED, self._string())
        if kind == FieldDescriptor.TYPE_BYTES:
            return WireField(number, LENGTH_DELIMITED, self._bytes())
        if kind == FieldDescriptor.TYPE_MESSAGE:
            if rng.random() < 0.7:
                inner = self.mutate(field.message_type, b"", rounds=rng.randint(1, 4))
            else:
                inner = rng.randbytes(rng.randint(0, 64))
            return WireField(number, LENGTH_DELIMITED, inner)
        if field.is_repeated and rng.random() < 0.8:  # packed scalars
            count = rng.choice((0, 1, 3, 50, 500, 5000))
            packed = b"".join(encode_varint(self._int()) for _ in range(count))
            return WireField(number, LENGTH_DELIMITED, packed)
        return WireField(number, VARINT, self._int())

    def _raw_value(self, wire_type: int) -> int | bytes:
        rng = self.rng
        if wire_type == VARINT:
            return self._int()
        if wire_type == FIXED64:
            return rng.randbytes(8)
        if wire_type == FIXED32:
            return rng.randbytes(4)
        return self._bytes()

    def _int(self) -> int:
        rng = self.rng
        return rng.choice(INTERESTING_INTS) if rng.random() < 0.7 else rng.randint(-(2**31), 2**31 - 1)

    def _float(self) -> float:
        rng = self.rng
        return rng.choice(INTERESTING_FLOATS) if rng.random() < 0.7 else rng.uniform(-10, 10)

    def _string(self) -> bytes:
        rng = self.rng
        roll = rng.random()
        if roll < 0.3:
            return rng.choice(INVALID_UTF8) + self._text(rng.randint(0, 20)).encode()
        if roll < 0.55:
            return rng.choice(ATTACK_TEXTS).encode()
        if roll < 0.65:
            return b"A" * rng.choice((129, 257, 5001, 40_000))
        return self._text(rng.choice((0, 1, 5, 30, 200))).encode()

    def _text(self, length: int) -> str:
        rng = self.rng
        alphabet = "aB .,!?'-\n\t0" + "".join(chr(rng.randint(0x20, 0x2FFFF)) for _ in range(8))
        text = "".join(rng.choice(alphabet) for _ in range(length))
        return text.encode("utf-8", "replace").decode("utf-8")  # no lone surrogates: those are for INVALID_UTF8

    def _bytes(self) -> bytes:
        rng = self.rng
        return rng.randbytes(rng.choice((0, 1, 3, 7, 64, 321, 4096)))

    def byte_level(self, data: bytes) -> bytes:
        """`data` with one change that ignores its structure."""
        rng = self.rng
        raw = bytearray(data)
        roll = rng.random()
        if roll < 0.3 and raw:
            position = rng.randrange(len(raw))
            raw[position] ^= 1 << rng.randrange(8)
        elif roll < 0.5 and raw:
            del raw[rng.randrange(len(raw)) :]
        elif roll < 0.7:
            position = rng.randrange(len(raw) + 1)
            raw[position:position] = rng.randbytes(rng.randint(1, 16))
        elif roll < 0.85:  # a length-delimited field whose length runs past the message
            raw += encode_varint((rng.randint(1, 20) << 3) | LENGTH_DELIMITED) + encode_varint(rng.choice((10**6, 2**31, 2**35)))
        else:  # an unterminated varint
            raw += b"\x08" + b"\xff" * rng.randint(1, 12)
        return bytes(raw)


def _wire_type_of(field: FieldDescriptor) -> int:
    if field.type in (FieldDescriptor.TYPE_FLOAT, FieldDescriptor.TYPE_FIXED32, FieldDescriptor.TYPE_SFIXED32):
        return FIXED32
    if field.type in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FIXED64, FieldDescriptor.TYPE_SFIXED64):
        return FIXED64
    if field.type in (FieldDescriptor.TYPE_STRING, FieldDescriptor.TYPE_BYTES, FieldDescriptor.TYPE_MESSAGE) or field.is_repeated:
        return LENGTH_DELIMITED
    return VARINT
