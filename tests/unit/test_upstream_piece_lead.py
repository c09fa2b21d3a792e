"""How long the gateway expects a listener to wait for its next piece, from what the vocoders report."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from libs.pb.tts.common.v1 import load_pb2
from libs.routing.endpoints import parse_endpoint
from libs.upstream.loads import KnownLoad
from libs.upstream.pool import WorkerPool
from libs.upstream.settings import UpstreamSettings


def _pool(*loads: load_pb2.WorkerLoad) -> WorkerPool:
    upstream = UpstreamSettings(
        acoustic=(parse_endpoint("zone-a=acoustic-a:1", "acoustic"),),
        vocoder=(parse_endpoint("zone-a=vocoder-a:1", "vocoder"),),
    )
    pool = WorkerPool(upstream, "zone-a", registry=CollectorRegistry())
    known = [KnownLoad(load, at_s=0.0, rtt_s=0.01) for load in loads]
    pool.available_loads = lambda kind: known if kind == "vocoder" else []  # type: ignore[method-assign]
    return pool


def test_a_listener_alone_waits_on_a_part_and_one_among_others_on_a_whole_step() -> None:
    pool = _pool(load_pb2.WorkerLoad(step_lead_ms=400.0, piece_lead_ms=100.0))
    assert abs(pool.piece_lead_s() - 0.11) < 1e-9  # the part's lead and the round trip
    assert abs(pool.piece_wait_s(alone=True) - 0.11) < 1e-9
    assert abs(pool.piece_wait_s(alone=False) - 0.41) < 1e-9  # a part may queue behind another's whole step
    pool.start_gaps.observe(0.7)  # starts lately had to outlast more than either
    assert pool.piece_wait_s(alone=True) == 0.7 and pool.piece_wait_s(alone=False) == 0.7


def test_a_vocoder_that_reports_no_part_lead_is_waited_on_for_its_whole_step() -> None:
    pool = _pool(load_pb2.WorkerLoad(step_lead_ms=400.0))
    assert abs(pool.piece_wait_s(alone=True) - 0.41) < 1e-9
    slower = _pool(load_pb2.WorkerLoad(step_lead_ms=400.0, piece_lead_ms=100.0), load_pb2.WorkerLoad(step_lead_ms=900.0))
    assert abs(slower.piece_lead_s() - 0.91) < 1e-9  # the slowest available vocoder's
