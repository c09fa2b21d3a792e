"""DNS discovery: every address of a name is a worker, re-resolved; a failed lookup keeps the last answer."""

from __future__ import annotations

import pytest

from libs.routing.discovery import DnsDiscovery, Snapshot, system_resolver
from libs.routing.endpoints import Endpoint, parse_endpoint
from libs.upstream.settings import UpstreamSettings, check_local_zone
from services.settings import load_gateway_settings

TARGET = parse_endpoint("zone-b=acoustic-zone-b:50052", "acoustic")


class Answers:
    """A resolver whose answer the test sets (None: the lookup fails)."""

    def __init__(self) -> None:
        self.ips: list[str] | None = ["10.0.0.1", "10.0.0.2"]

    async def __call__(self, host: str, port: int) -> list[str]:
        assert (host, port) == ("acoustic-zone-b", 50052)
        if self.ips is None:
            raise OSError("Temporary failure in name resolution")
        return list(self.ips)


async def test_every_address_of_a_name_is_a_worker_in_the_names_zone_and_changes_are_published_once() -> None:
    answers, seen = Answers(), []
    discovery = DnsDiscovery([TARGET], lambda target, snapshot: seen.append((target, snapshot)), resolver=answers)
    await discovery.refresh()
    await discovery.refresh()  # the same answer again: nothing new to say
    assert seen == [
        (TARGET, Snapshot(live=frozenset({Endpoint("zone-b", "10.0.0.1:50052", "acoustic"), Endpoint("zone-b", "10.0.0.2:50052", "acoustic")})))
    ]
    answers.ips = ["10.0.0.2", "fd00::3"]
    await discovery.refresh()
    assert seen[-1][1].live == {Endpoint("zone-b", "10.0.0.2:50052", "acoustic"), Endpoint("zone-b", "[fd00::3]:50052", "acoustic")}


async def test_a_failed_lookup_keeps_the_workers_it_knew() -> None:
    answers, seen = Answers(), []
    discovery = DnsDiscovery([TARGET], lambda target, snapshot: seen.append(snapshot), resolver=answers)
    await discovery.refresh()
    answers.ips = None
    await discovery.refresh()
    assert len(seen) == 1  # no empty snapshot: a DNS hiccup must not drain the fleet


async def test_the_system_resolver_answers_every_address_of_a_real_name() -> None:
    assert "127.0.0.1" in await system_resolver("localhost", 50052)
    with pytest.raises(OSError):
        await system_resolver("no-such-worker.invalid", 50052)


def test_a_gateway_in_no_zone_of_a_multi_zone_fleet_stops_with_the_reason() -> None:
    upstream = UpstreamSettings(
        acoustic=(parse_endpoint("zone-a=a:1", "acoustic"), parse_endpoint("zone-b=b:1", "acoustic")),
        vocoder=(parse_endpoint("zone-a=v:2", "vocoder"),),
    )
    check_local_zone(upstream, "zone-b")
    with pytest.raises(ValueError, match=r"topology\.kubernetes\.io/zone"):
        check_local_zone(upstream, "local")
    with pytest.raises(SystemExit, match="none of its workers' zones"):
        load_gateway_settings(["--acoustic", "zone-a=a:1", "--acoustic", "zone-b=b:1", "--vocoder", "zone-a=v:2"], {})
    # One zone (make run, the dev overlay): any gateway zone is fine, every worker is simply local or not.
    load_gateway_settings(["--acoustic", "zone-a=a:1", "--vocoder", "zone-a=v:2"], {})
