"""What the gateway knows of its workers' loads: `LoadWatcher.ensure` asks, before a decision that
must not be made blind, only the workers whose load is not known fresh."""

from __future__ import annotations

from libs.pb.tts.common.v1 import load_pb2
from libs.routing.endpoints import Endpoint
from libs.upstream.loads import STALE_AFTER_S, LoadWatcher

A = Endpoint("zone-a", "a:1", "acoustic")
B = Endpoint("zone-b", "b:1", "acoustic")


async def test_ensure_asks_only_the_workers_not_known_fresh() -> None:
    now = [100.0]
    asked: list[Endpoint] = []

    async def ask(endpoint: Endpoint) -> load_pb2.WorkerLoad:
        asked.append(endpoint)
        return load_pb2.WorkerLoad(loaded_voices=["voice-of-" + endpoint.zone])

    watcher = LoadWatcher(lambda: [A, B], ask, clock=lambda: now[0])
    await watcher.ensure([A])
    assert asked == [A] and watcher.load(B) is None
    await watcher.ensure([A, B])  # A is known: only B is asked
    assert asked == [A, B]
    assert list(watcher.load(B).load.loaded_voices) == ["voice-of-zone-b"]
    now[0] += STALE_AFTER_S + 1  # both stale: both asked again
    await watcher.ensure([A, B])
    assert sorted(asked[2:]) == sorted([A, B])
