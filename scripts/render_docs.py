"""`make docs`: write the generated parts of the docs from their sources.

Each generated part sits in a page between `<!-- NAME:begin -->` and `<!-- NAME:end -->` markers:

- docs/settings.md, `settings`: every flag and variable, from the settings' declarations
  (`python -m services.settings` prints the same table);
- docs/performance.md, one part per benchmark output in bench/ (each file is what its benchmark
  writes; a rerun replaces it):
  - `bench`: the summary of `bench/results.md` (`make bench`);
  - `fastpath`: `bench/fast_path.md` (`python -m bench.compare`, `make bench` before and after a change);
  - `load`: `bench/load.md` (`make bench-load`);
  - `realtime`: `bench/realtime.md` (`python -m bench.realtime`, part of `make bench-load`);
  - `opening`: `bench/opening.md` (`python -m bench.opening`, part of `make bench-quality`);
  - `doors`: `bench/doors.md` (`make bench-doors`);
  - `text-bench`: `bench/text.md` (`make bench-text`);
  - `jobs-bench` and `prewarm-bench`: `bench/jobs.md` and `bench/prewarm.md` (`make bench-jobs`);
  - `hostile`: `bench/hostile.md` (`make bench-hostile`);
  - `door-soak`: `bench/door_soak.md` (`make bench-door-soak`);
  - `voices-bench`: `bench/voices.md` (`make bench-voices`).

    python -m scripts.render_docs [--check]

With --check it only says whether every page is up to date (exit 1 when one is not).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from bench.results_summary import summary_markdown
from services.settings import markdown_table

ROOT = Path(__file__).resolve().parent.parent
SETTINGS_PAGE = ROOT / "docs" / "settings.md"
PERFORMANCE = ROOT / "docs" / "performance.md"
BENCH_RESULTS = ROOT / "bench" / "results.md"
FAST_PATH_RESULTS = ROOT / "bench" / "fast_path.md"
LOAD_RESULTS = ROOT / "bench" / "load.md"
REALTIME_RESULTS = ROOT / "bench" / "realtime.md"
OPENING_RESULTS = ROOT / "bench" / "opening.md"
DOORS_RESULTS = ROOT / "bench" / "doors.md"
TEXT_RESULTS = ROOT / "bench" / "text.md"
JOBS_RESULTS = ROOT / "bench" / "jobs.md"
PREWARM_RESULTS = ROOT / "bench" / "prewarm.md"
HOSTILE_RESULTS = ROOT / "bench" / "hostile.md"
DOOR_SOAK_RESULTS = ROOT / "bench" / "door_soak.md"
VOICES_RESULTS = ROOT / "bench" / "voices.md"


def markers(name: str) -> tuple[str, str]:
    """The begin and end markers of the generated section `name`."""
    return f"<!-- {name}:begin -->\n", f"<!-- {name}:end -->"


def generated_sections() -> dict[Path, dict[str, Callable[[], str]]]:
    """Each page with a generated part, and how each of its parts is rendered from its source now.

    The paths are read when this is called, so a test can point any of them elsewhere."""
    return {
        SETTINGS_PAGE: {"settings": markdown_table},
        PERFORMANCE: {
            "bench": lambda: summary_markdown(BENCH_RESULTS.read_text(encoding="utf-8")),
            "fastpath": lambda: bench_output(FAST_PATH_RESULTS),
            "load": lambda: bench_output(LOAD_RESULTS),
            "realtime": lambda: bench_output(REALTIME_RESULTS),
            "opening": lambda: bench_output(OPENING_RESULTS),
            "doors": lambda: bench_output(DOORS_RESULTS),
            "text-bench": lambda: bench_output(TEXT_RESULTS),
            "jobs-bench": lambda: bench_output(JOBS_RESULTS),
            "prewarm-bench": lambda: bench_output(PREWARM_RESULTS),
            "hostile": lambda: bench_output(HOSTILE_RESULTS),
            "door-soak": lambda: bench_output(DOOR_SOAK_RESULTS),
            "voices-bench": lambda: bench_output(VOICES_RESULTS),
        },
    }


def bench_output(path: Path) -> str:
    """A benchmark's output file as a page shows it: its heading (what ran, by which command, when)
    becomes a line saying where the numbers come from, and the file is named."""
    lines = path.read_text(encoding="utf-8").strip().splitlines()
    source = f"`{_shown(path)}`"
    if lines and lines[0].startswith("#"):
        lines[0] = f"Measured by {lines[0].lstrip('# ').strip()}; from {source}:"
    else:
        lines.insert(0, f"From {source}:\n")
    return "\n".join(lines) + "\n"


def _shown(path: Path) -> str:
    """`path` as the docs write it: relative to the repository root when it is inside it."""
    return path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else str(path)


def rendered(text: str, parts: dict[str, Callable[[], str]], page: str = "the page") -> str:
    """`text` (a page) with each of its generated `parts` replaced by the rendered one."""
    for name, render in parts.items():
        begin, end = markers(name)
        if begin not in text or end not in text:
            raise SystemExit(f"{page} has no {begin.strip()} ... {end} markers")
        head, rest = text.split(begin, 1)
        _, tail = rest.split(end, 1)
        text = head + begin + render() + end + tail
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only check that every generated part is up to date")
    args = parser.parse_args(argv)
    stale = []
    for page, parts in generated_sections().items():
        name = _shown(page)
        current = page.read_text(encoding="utf-8")
        updated = rendered(current, parts, name)
        if updated == current:
            continue
        stale.append(name)
        if not args.check:
            page.write_text(updated, encoding="utf-8")
    if args.check:
        print("the docs are up to date" if not stale else f"{', '.join(stale)}: stale; run `make docs`")
        return 1 if stale else 0
    print(f"wrote {', '.join(stale)}" if stale else "the docs were up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
