"""Parsing worker endpoints from ZONE=HOST:PORT specs and environment variables."""

from __future__ import annotations

import pytest

from libs.routing.endpoints import Endpoint, EndpointParseError, parse_endpoint


def test_parse_endpoint_reads_zone_host_port_and_kind() -> None:
    endpoint = parse_endpoint(" zone-a = acoustic-0.tts.svc:50051 ", "acoustic")
    assert endpoint == Endpoint(zone="zone-a", address="acoustic-0.tts.svc:50051", kind="acoustic")
    assert (endpoint.host, endpoint.port) == ("acoustic-0.tts.svc", 50051)


def test_parse_endpoint_keeps_ipv6_brackets() -> None:
    endpoint = parse_endpoint("eu-west-1a=[::1]:7000", "vocoder")
    assert endpoint.address == "[::1]:7000"
    assert (endpoint.host, endpoint.port) == ("::1", 7000)


@pytest.mark.parametrize(
    ("spec", "message_part"),
    [
        ("10.0.0.1:50051", "has no zone"),
        ("=10.0.0.1:50051", "zone ''"),
        ("zone a=10.0.0.1:50051", "zone 'zone a'"),
        ("zone-a=10.0.0.1", "has no port"),
        ("zone-a=:50051", "has no host"),
        ("zone-a=host:http", "is not a number"),
        ("zone-a=host:0", "outside 1..65535"),
        ("zone-a=host:70000", "outside 1..65535"),
        ("zone-a=::1:50051", "IPv6 hosts in brackets"),
        ("zone-a=[::1:50051", "[HOST]:PORT"),
        ("zone-a=bad_host:1", "not a valid host"),
    ],
)
def test_parse_endpoint_rejects_malformed_specs_with_a_clear_message(spec: str, message_part: str) -> None:
    with pytest.raises(EndpointParseError, match=message_part.replace("[", r"\[").replace("]", r"\]")):
        parse_endpoint(spec, "acoustic")


def test_parse_endpoint_rejects_unknown_kind() -> None:
    with pytest.raises(EndpointParseError, match="unknown endpoint kind 'mixer'"):
        parse_endpoint("zone-a=host:1", "mixer")
