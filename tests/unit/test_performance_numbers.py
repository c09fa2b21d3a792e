"""docs/performance.md quotes every benchmark only through its generated sections, copied from the
benchmark's output file in bench/ by `make docs` (scripts/render_docs.py, bench/results_summary.py),
so its numbers are the files' numbers, and a number typed over by hand, or a rerun not copied, fails."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bench.results_summary import summary_markdown
from scripts import render_docs

PERFORMANCE = render_docs.PERFORMANCE
RESULTS = render_docs.BENCH_RESULTS
NUMBER = re.compile(r"\d+(?:\.\d+)?")


def _section(page_text: str, name: str = "bench") -> str:
    begin, end = render_docs.markers(name)
    assert begin in page_text and end in page_text, f"docs/performance.md lost its {name} markers"
    return page_text.split(begin, 1)[1].split(end, 1)[0]


def _bench_section(page_text: str) -> str:
    return _section(page_text, "bench")


def test_performance_bench_section_is_what_results_md_renders_to() -> None:
    in_page = _bench_section(PERFORMANCE.read_text(encoding="utf-8"))
    assert in_page == summary_markdown(RESULTS.read_text(encoding="utf-8")), "docs/performance.md's bench section is stale: run `make docs`"


def test_every_number_of_the_bench_section_is_in_results_md() -> None:
    results = RESULTS.read_text(encoding="utf-8")
    section = _bench_section(PERFORMANCE.read_text(encoding="utf-8"))
    numbers = set(NUMBER.findall(section))
    assert len(numbers) >= 20  # the table is there, not just prose
    assert sorted(number for number in numbers if number not in results) == []


def test_summary_keeps_p50_throughput_and_targets_and_leaves_p95_out() -> None:
    summary = summary_markdown(RESULTS.read_text(encoding="utf-8"))
    assert "| first audio p50, ms, cache cold (lower is better) | paragraph | 1 |" in summary
    assert "| throughput, audio s per wall s (higher is better) | mixed | 8 |" in summary
    assert "| max-batch 1: throughput, audio s per wall s (higher is better) |" in summary
    assert "| peak RSS all processes, MiB (lower is better) |" in summary
    assert "p95, ms" not in summary and "request p50" not in summary
    assert "- Target first audio p50, cold, paragraph" in summary


def test_summary_of_a_file_without_a_table_says_to_run_make_bench() -> None:
    with pytest.raises(ValueError, match="make bench"):
        summary_markdown("nothing measured yet\n")


def _with_mesh_value(row: str, value: str) -> str:
    """A table row with its tts-mesh cell replaced by `value`."""
    cells = row.split("|")
    cells[4] = f" {value} "
    return "|".join(cells)


def _check(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, page_text: str, results_text: str) -> int:
    page, results = tmp_path / "performance.md", tmp_path / "results.md"
    page.write_text(page_text, encoding="utf-8")
    results.write_text(results_text, encoding="utf-8")
    monkeypatch.setattr(render_docs, "PERFORMANCE", page)
    monkeypatch.setattr(render_docs, "BENCH_RESULTS", results)
    return render_docs.main(["--check"])


def test_check_reports_stale_when_performance_numbers_are_edited_by_hand(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    page, results = PERFORMANCE.read_text(encoding="utf-8"), RESULTS.read_text(encoding="utf-8")
    assert _check(monkeypatch, tmp_path, page, results) == 0
    assert "up to date" in capsys.readouterr().out
    row = next(line for line in _bench_section(page).splitlines() if line.startswith("| first audio p50"))
    edited = page.replace(row, _with_mesh_value(row, "1.0"), 1)  # a number typed over
    assert edited != page
    assert _check(monkeypatch, tmp_path, edited, results) == 1
    assert "stale" in capsys.readouterr().out


def test_check_reports_stale_after_make_bench_writes_new_results(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    page, results = PERFORMANCE.read_text(encoding="utf-8"), RESULTS.read_text(encoding="utf-8")
    title = next(line for line in results.splitlines() if line.startswith("## "))
    assert _check(monkeypatch, tmp_path, page, results.replace(title, title + " rerun", 1)) == 1
    assert "stale" in capsys.readouterr().out
    row = next(line for line in results.splitlines() if line.startswith("| throughput,"))
    assert _check(monkeypatch, tmp_path, page, results.replace(row, _with_mesh_value(row, "99.9"), 1)) == 1
    assert "stale" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("name", "source"),
    [
        ("fastpath", "FAST_PATH_RESULTS"),
        ("load", "LOAD_RESULTS"),
        ("doors", "DOORS_RESULTS"),
        ("text-bench", "TEXT_RESULTS"),
        ("jobs-bench", "JOBS_RESULTS"),
        ("prewarm-bench", "PREWARM_RESULTS"),
        ("hostile", "HOSTILE_RESULTS"),
    ],
)
def test_every_benchmark_section_is_its_output_file_and_goes_stale_with_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, source: str
) -> None:
    output = getattr(render_docs, source).read_text(encoding="utf-8")
    page = PERFORMANCE.read_text(encoding="utf-8")
    section = _section(page, name)
    assert section == render_docs.bench_output(getattr(render_docs, source)), f"{name} is stale: run `make docs`"
    numbers = set(NUMBER.findall(section))
    assert numbers and sorted(number for number in numbers if number not in output) == []
    rerun = tmp_path / "rerun.md"
    line = next(line for line in output.splitlines() if line.startswith("|") and NUMBER.search(line))
    rerun.write_text(output.replace(line, NUMBER.sub("987654321", line, count=1), 1), encoding="utf-8")
    monkeypatch.setattr(render_docs, source, rerun)
    page_copy = tmp_path / "performance.md"
    page_copy.write_text(page, encoding="utf-8")
    monkeypatch.setattr(render_docs, "PERFORMANCE", page_copy)
    assert render_docs.main(["--check"]) == 1
    assert "stale" in capsys.readouterr().out
