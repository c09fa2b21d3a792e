"""The Grafana dashboard reads only metrics of the catalogue, and the catalogue follows Prometheus naming."""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CATALOG = ROOT / "libs" / "telemetry" / "CATALOG.md"
DASHBOARD = ROOT / "dashboards" / "tts-mesh.json"
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")


def load_catalog() -> dict[str, dict[str, str]]:
    """Metric name -> its row (type, labels, unit, service, meaning) from CATALOG.md's table."""
    rows: dict[str, dict[str, str]] = {}
    columns: list[str] = []
    for line in CATALOG.read_text().splitlines():
        if not line.startswith("|") or line.startswith("| ---"):
            continue
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        if not columns:
            columns = cells
            continue
        rows[cells[0]] = dict(zip(columns, cells, strict=False))
    return rows


def dashboard_expressions() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    return [target["expr"] for panel in dashboard["panels"] for target in panel.get("targets", [])]


def metric_names(expression: str) -> set[str]:
    return set(re.findall(r"\b(?:tts|process)_[a-z0-9_]+", expression))


def test_catalogue_names_follow_prometheus_conventions() -> None:
    catalog = load_catalog()
    assert len(catalog) >= 20
    for name, row in catalog.items():
        assert re.fullmatch(r"(tts|process)_[a-z0-9_]+", name), name
        assert row["type"] in {"counter", "gauge", "histogram"}, name
        assert name.endswith("_total") == (row["type"] == "counter"), f"{name}: only counters end in _total"
        assert not name.endswith(HISTOGRAM_SUFFIXES), name
        if row["unit"] in {"seconds", "bytes"}:
            # The unit ends the name, before a counter's _total (process_cpu_seconds_total).
            suffix = f"_{row['unit']}_total" if row["type"] == "counter" else f"_{row['unit']}"
            assert name.endswith(suffix), f"{name}: the unit belongs in the name"


def test_dashboard_reads_only_catalogued_metrics_in_the_right_way() -> None:
    catalog = load_catalog()
    used: set[str] = set()
    for expression in dashboard_expressions():
        for name in metric_names(expression):
            base = name
            if name.endswith(HISTOGRAM_SUFFIXES) and name not in catalog:
                base = name.rsplit("_", 1)[0]
                assert catalog.get(base, {}).get("type") == "histogram", f"{name} in {expression}"
            assert base in catalog, f"{name} is not in CATALOG.md: {expression}"
            if catalog[base]["type"] == "gauge":
                assert f"rate({name}" not in expression and f"increase({name}" not in expression, expression
            if catalog[base]["type"] == "counter":
                assert re.search(rf"(rate|increase)\({name}\b", expression), f"counter {name} read raw: {expression}"
            used.add(base)
    # What the dashboard must show: first audio, errors, cache, routing and the workers' load.
    required = {
        "tts_gateway_time_to_first_audio_seconds",
        "tts_gateway_audio_seconds_total",
        "tts_gateway_cache_operations_total",
        "tts_acoustic_batch_size",
        "tts_vocoder_batch_size",
        "tts_acoustic_queue_seconds",
        "tts_vocoder_mel_queue_seconds",
        "tts_gateway_requests_total",
        "tts_gateway_retries_total",
        "tts_gateway_ejections_total",
        "tts_acoustic_inflight_streams",
        "tts_vocoder_inflight_streams",
        "process_resident_memory_bytes",
    }
    assert required <= used, required - used


def test_dashboard_panels_have_unique_ids_and_do_not_overlap() -> None:
    panels = json.loads(DASHBOARD.read_text())["panels"]
    assert len({panel["id"] for panel in panels}) == len(panels)
    cells: set[tuple[int, int]] = set()
    for panel in panels:
        grid = panel["gridPos"]
        area = {(x, y) for x in range(grid["x"], grid["x"] + grid["w"]) for y in range(grid["y"], grid["y"] + grid["h"])}
        assert grid["x"] + grid["w"] <= 24
        assert not cells & area, f"panel {panel['title']!r} overlaps another"
        cells |= area
