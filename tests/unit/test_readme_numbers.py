"""README.md quotes `make bench` only through its generated section, copied from bench/results.md by
`make docs` (scripts/render_docs.py, bench/results_summary.py), so its numbers are the table's."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bench.results_summary import summary_markdown
from scripts import render_docs

README = Path(__file__).resolve().parents[2] / "README.md"
RESULTS = Path(__file__).resolve().parents[2] / "bench" / "results.md"
NUMBER = re.compile(r"\d+(?:\.\d+)?")


def _bench_section(readme_text: str) -> str:
    begin, end = render_docs.markers("bench")
    assert begin in readme_text and end in readme_text, "README.md lost its bench markers"
    return readme_text.split(begin, 1)[1].split(end, 1)[0]


def test_readme_bench_section_is_what_results_md_renders_to() -> None:
    in_readme = _bench_section(README.read_text(encoding="utf-8"))
    assert in_readme == summary_markdown(RESULTS.read_text(encoding="utf-8")), "README's bench section is stale: run `make docs`"


def test_every_number_of_the_bench_section_is_in_results_md() -> None:
    results = RESULTS.read_text(encoding="utf-8")
    section = _bench_section(README.read_text(encoding="utf-8"))
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


def _check(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, readme_text: str, results_text: str) -> int:
    readme, results = tmp_path / "README.md", tmp_path / "results.md"
    readme.write_text(readme_text, encoding="utf-8")
    results.write_text(results_text, encoding="utf-8")
    monkeypatch.setattr(render_docs, "README", readme)
    monkeypatch.setattr(render_docs, "BENCH_RESULTS", results)
    return render_docs.main(["--check"])


def test_check_reports_stale_when_readme_numbers_are_edited_by_hand(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    readme, results = README.read_text(encoding="utf-8"), RESULTS.read_text(encoding="utf-8")
    assert _check(monkeypatch, tmp_path, readme, results) == 0
    assert "up to date" in capsys.readouterr().out
    row = next(line for line in _bench_section(readme).splitlines() if line.startswith("| first audio p50"))
    edited = readme.replace(row, _with_mesh_value(row, "1.0"), 1)  # a number typed over
    assert edited != readme
    assert _check(monkeypatch, tmp_path, edited, results) == 1
    assert "stale" in capsys.readouterr().out


def test_check_reports_stale_after_make_bench_writes_new_results(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    readme, results = README.read_text(encoding="utf-8"), RESULTS.read_text(encoding="utf-8")
    title = next(line for line in results.splitlines() if line.startswith("## "))
    assert _check(monkeypatch, tmp_path, readme, results.replace(title, title + " rerun", 1)) == 1
    assert "stale" in capsys.readouterr().out
    row = next(line for line in results.splitlines() if line.startswith("| throughput,"))
    assert _check(monkeypatch, tmp_path, readme, results.replace(row, _with_mesh_value(row, "99.9"), 1)) == 1
    assert "stale" in capsys.readouterr().out
