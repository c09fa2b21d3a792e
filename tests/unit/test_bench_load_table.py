"""The load benchmark's player and table: stalls measured through real gRPC against a stand-in gateway
whose timing is known, and the rows and the largest real-time count computed from them."""

from __future__ import annotations

import math

import pytest

from bench.load_table import (
    LoadRow,
    first_audio_floor,
    first_audio_floor_p95,
    largest_real_time,
    render,
    row_of,
    with_first_audio_cost,
)
from bench.loadgen import LoadConfig, run_load
from bench.measure import RequestResult, percentile
from tests.integration.test_loadgen import SLACK_S, stand_in  # noqa: F401 - the fixture

# 3200 bytes of 16-bit audio at 16 kHz is 0.1 s: a chunk every 0.3 s leaves the player dry 0.2 s each time.
STALLING = "first_s=0.05 gap_s=0.3 chunks=3 chunk_bytes=3200"
# A chunk of 0.5 s every 0.1 s keeps the player fed.
FLOWING = "first_s=0.05 gap_s=0.1 chunks=3 chunk_bytes=16000"
# A stall is the time between two arrivals, less audio: when the earlier chunk is delivered a little
# late and the later one on time, the gap the player sees is shorter than the server's sleep.
ARRIVAL_JITTER_S = 0.005


async def test_the_player_stalls_exactly_when_audio_comes_slower_than_it_plays(stand_in) -> None:  # noqa: F811
    target, _ = stand_in
    run = await run_load(LoadConfig(target=target, concurrency=2, requests=2), [STALLING, FLOWING])
    stalling, flowing = run.results
    assert 0.4 - ARRIVAL_JITTER_S <= stalling.stall_s < 0.4 + SLACK_S  # two gaps of 0.2 s
    assert 0.2 - ARRIVAL_JITTER_S <= stalling.longest_stall_s < 0.2 + SLACK_S
    assert flowing.stall_s == 0.0


def _result(index: int, ttfa_s: float | None, stall_s: float = 0.0, status: str = "OK") -> RequestResult:
    return RequestResult(index, status, ttfa_s, total_s=10.0, audio_s=10.0, audio_bytes=0, text_chars=0, stall_s=stall_s)


def test_a_row_counts_stalls_and_refusals_over_the_streams_served() -> None:
    results = [
        _result(0, 0.1),
        _result(1, 0.2, stall_s=0.15),
        _result(2, 0.3, stall_s=0.05),
        _result(3, None, status="RESOURCE_EXHAUSTED"),
    ]
    row = row_of(4, results)
    assert (row.served, row.refused, row.stalled) == (3, 1, 1)
    assert row.first_audio_p50_s == pytest.approx(0.2)
    assert row.worst_stall_s == pytest.approx(0.15)
    assert row.audio_s_per_s == pytest.approx(3.0)  # 30 s of audio served over 10 s
    assert not row.real_time


def test_the_largest_real_time_count_needs_p95_stalls_and_refusals_all_within_the_bar() -> None:
    def row(streams: int, p95_s: float, stalled: int = 0, refused: int = 0) -> LoadRow:
        return LoadRow(streams, p95_s / 2, p95_s, stalled, streams - refused, 0.0, float(streams), refused)

    rows = [row(1, 0.06), row(8, 0.2), row(16, 0.24), row(24, 0.26), row(32, 0.2, stalled=1), row(48, 0.1, refused=3)]
    assert largest_real_time(rows) == 16
    assert largest_real_time([row(1, math.nan, refused=1)]) == 0
    table = render(rows, rows[:2])
    assert "mesh 16, piper-tts 8" in table
    assert "| 16 | 120 / 240 ms | 0 of 16 |" in table


def test_the_first_audio_floor_is_the_cpu_of_every_earlier_first_audio_shared_by_the_cores() -> None:
    # A stream's own steps run one after another: two cores do not halve one stream's first audio.
    assert first_audio_floor(4, 0.04, 2) == pytest.approx([0.04, 0.04, 0.06, 0.08])
    assert first_audio_floor(3, 0.04, 1) == pytest.approx([0.04, 0.08, 0.12])
    # Under a quota of half a core, even one stream's steps run at half speed.
    assert first_audio_floor(2, 0.04, 0.5) == pytest.approx([0.08, 0.16])
    with pytest.raises(ValueError, match="cores"):
        first_audio_floor(4, 0.04, 0)


def test_the_floor_p95_shares_the_cost_over_the_streams_and_is_nan_for_none() -> None:
    # 16 first audios costing 0.64 s in all on 2 cores: 20 ms apart, p95 305 ms (as the row below).
    assert first_audio_floor_p95(16 * 0.04, 16, 2) == pytest.approx(0.305)
    assert first_audio_floor_p95(0.12, 3, 1) == pytest.approx(percentile([0.04, 0.08, 0.12], 95))
    assert math.isnan(first_audio_floor_p95(0.0, 0, 1))  # nobody heard audio: no floor, not zero


def test_a_row_with_its_first_audio_cost_shows_the_floor_that_cost_sets() -> None:
    results = [_result(index, 0.1 * (index + 1)) for index in range(16)] + [_result(16, None, status="RESOURCE_EXHAUSTED")]
    row = with_first_audio_cost(row_of(17, results), first_audio_cpu_s=16 * 0.04, cores=2)
    assert row.first_audio_cpu_s == pytest.approx(0.04)  # over the 16 streams that heard audio
    # 16 first audios of 40 ms on 2 cores come 20 ms apart; the p95 of 20, 40, ... 320 ms is 305 ms.
    assert row.first_audio_floor_p95_s == pytest.approx(0.305)
    table = render([row], [])
    assert "| 17 | 40 ms | 305 ms | 1525 ms |" in table
    # Without the workers' metrics (a gateway driven from outside) there is no cost section.
    assert "CPU per first audio" not in render([row_of(17, results)], [])
    nobody = row_of(1, [_result(0, None, status="RESOURCE_EXHAUSTED")])
    assert math.isnan(with_first_audio_cost(nobody, 0.0, 2).first_audio_cpu_s)
