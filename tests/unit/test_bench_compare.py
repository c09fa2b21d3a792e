"""bench.compare reads two `make bench` tables and lines up the fast-path rows with their ratio."""

from __future__ import annotations

from bench.compare import comparison, rows

BEFORE = """## Speed (full run, 2026-12-01 11:50)

| measure | text | streams | tts-mesh | piper-tts | mesh / piper | note |
|---|---|---:|---:|---:|---:|---|
| first audio p50, ms, cache cold (lower is better) | short | 1 | 50.0 | 140 | 0.36x |  |
| first audio p95, ms, cache cold (lower is better) | short | 1 | 60.0 | 150 | 0.40x |  |
| throughput, audio s per wall s (higher is better) | mixed | 8 | 40.0 | 30.0 | 1.33x |  |
| max-batch 1: throughput, audio s per wall s (higher is better) | mixed | 16 | 41.0 | 30.0 | 1.37x |  |
"""
AFTER = BEFORE.replace("| 50.0 | 140 |", "| 55.0 | 126 |").replace("| 40.0 | 30.0 | 1.33x |", "| 44.0 | 33.0 | 1.33x |")


def test_rows_are_keyed_by_measure_text_and_streams() -> None:
    table = rows(BEFORE)
    assert table[("first audio p50, ms, cache cold (lower is better)", "short", "1")] == ("50.0", "140")
    assert len(table) == 4


def test_only_first_audio_p50_and_throughput_rows_are_compared_with_their_ratios() -> None:
    lines = comparison(BEFORE, AFTER, "old", "new").splitlines()
    body = [line for line in lines if line.startswith(("| first", "| throughput"))]
    assert body == [
        "| first audio p50, ms, cache cold (lower is better) | short | 1 | 50.0 | 55.0 | 1.10x | 140 / 126 (0.90x) |",
        "| throughput, audio s per wall s (higher is better) | mixed | 8 | 40.0 | 44.0 | 1.10x | 30.0 / 33.0 (1.10x) |",
    ]
