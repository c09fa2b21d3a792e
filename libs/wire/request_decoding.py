"""Decoding client requests without letting a malformed one turn into INTERNAL.

protobuf rejects a `string` field that is not valid UTF-8 when it parses a message, and gRPC would
answer such a request with a generic error. The gateway decodes requests itself: a message that
fails to parse becomes an `UndecodableRequest` carrying a precise reason (which field, which byte),
and the servicer answers it with INVALID_ARGUMENT like any other bad input.

Finding the bad field must stay cheap whatever the client sent (the decoder runs on the event
loop): the message is parsed again, natively, as its "bytes twin" (the same message with every
`string` field declared `bytes`, which protobuf does not check), and only the fields the schema
knows are looked at, however many unknown ones the request carries.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cache
from typing import TypeVar

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor, FileDescriptor
from google.protobuf.message import DecodeError, Message

from libs.wire.errors import InvalidRequestError

M = TypeVar("M", bound=Message)


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


def decoded(request: M | UndecodableRequest) -> M:
    """`request` as the servicer receives it from a `request_decoder`: the message itself, or
    InvalidRequestError with the reason it could not be parsed."""
    if isinstance(request, UndecodableRequest):
        raise InvalidRequestError(request.reason)
    return request


def describe_decode_failure(descriptor: Descriptor, data: bytes) -> str:
    """Explain why `data` is not a valid `descriptor` message, naming the first bad string field if any."""
    try:
        twin = _bytes_twin(descriptor).FromString(data)
    except DecodeError:
        twin = None  # not even the wire format holds
    problem = None if twin is None else _first_invalid_string(descriptor, twin, prefix="")
    if problem:
        return problem
    return f"the request is not a valid {descriptor.full_name} message"


def _first_invalid_string(descriptor: Descriptor, twin: Message, prefix: str) -> str | None:
    """The first string field (in schema order, nested messages included) of `twin` that is not UTF-8."""
    for twin_field, value in twin.ListFields():
        field = descriptor.fields_by_number[twin_field.number]
        name = prefix + field.name
        for item in _values(field, value):
            if field.type == FieldDescriptor.TYPE_STRING:
                problem = _utf8_problem(name, item)
            elif field.type == FieldDescriptor.TYPE_MESSAGE:
                problem = _first_invalid_string(field.message_type, item, prefix=name + ".")
            else:
                problem = None
            if problem:
                return problem
    return None


def _values(field: FieldDescriptor, value: object) -> Iterator[object]:
    """The values a field holds: one for a singular field, each of a repeated one (a map's entries
    as messages of its entry type are not reached: no request of ours has a map)."""
    if field.is_repeated:
        yield from value  # type: ignore[attr-defined]
    else:
        yield value


def _utf8_problem(name: str, raw: object) -> str | None:
    try:
        bytes(raw).decode("utf-8")  # type: ignore[call-overload]
    except UnicodeDecodeError as error:
        return (
            f"field `{name}` is not valid UTF-8: byte 0x{error.object[error.start]:02x} at byte offset {error.start}; "
            "send text encoded as UTF-8"
        )
    return None


@cache
def _bytes_twin(descriptor: Descriptor) -> type[Message]:
    """The message class of `descriptor` with every string field (its file's and its imports') as bytes."""
    pool = descriptor_pool.DescriptorPool()
    for file in _with_imports(descriptor.file):
        proto = descriptor_pb2.FileDescriptorProto()
        file.CopyToProto(proto)
        for message in proto.message_type:
            _strings_to_bytes(message)
        pool.Add(proto)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(descriptor.full_name))


def _with_imports(file: FileDescriptor) -> list[FileDescriptor]:
    """`file` after everything it imports, each once."""
    ordered: list[FileDescriptor] = []
    for dependency in file.dependencies:
        ordered.extend(found for found in _with_imports(dependency) if found not in ordered)
    return [*ordered, file]


def _strings_to_bytes(message: descriptor_pb2.DescriptorProto) -> None:
    for field in message.field:
        if field.type == descriptor_pb2.FieldDescriptorProto.TYPE_STRING:
            field.type = descriptor_pb2.FieldDescriptorProto.TYPE_BYTES
    for nested in message.nested_type:
        # A map's entries travel as repeated messages of this nested type; a map key may not be
        # bytes, so the twin reads them as plain messages, which have the same wire format.
        nested.options.ClearField("map_entry")
        _strings_to_bytes(nested)
