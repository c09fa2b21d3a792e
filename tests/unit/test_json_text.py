"""Client JSON is read or refused with a reason, whatever the client sent: never an internal error."""

from __future__ import annotations

import pytest

from libs.wire.json_text import ClientJsonError, parse_client_json


def test_json_is_read_from_text_or_utf8_bytes() -> None:
    assert parse_client_json('{"text": "caf\u00e9"}') == {"text": "caf\u00e9"}
    assert parse_client_json('{"text": "caf\u00e9"}'.encode()) == {"text": "caf\u00e9"}
    assert parse_client_json(bytearray(b"[1, [2, [3]]]")) == [1, [2, [3]]]


@pytest.mark.parametrize(
    ("data", "says"),
    [
        ("{text: hi}", "is not JSON"),
        (b"", "is not JSON"),
        (b'{"text": "\xff"}', "is not UTF-8 (byte 10"),
        ("[" * 100_000 + "]" * 100_000, "too deeply"),
        ('{"a": ' * 50_000 + "0" + "}" * 50_000, "too deeply"),
    ],
    ids=["not json", "empty", "not utf-8", "deep arrays", "deep objects"],
)
def test_what_cannot_be_read_says_why(data: str | bytes, says: str) -> None:
    with pytest.raises(ClientJsonError) as refused:
        parse_client_json(data)
    assert says in str(refused.value)


def test_nesting_a_client_may_use_is_read() -> None:
    nested = "[" * 200 + "]" * 200
    value = parse_client_json(nested)
    for _ in range(199):
        value = value[0]
    assert value == []
