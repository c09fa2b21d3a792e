"""`make docs`: write the generated parts of README.md from their sources.

These sections are generated, each between `<!-- NAME:begin -->` and `<!-- NAME:end -->` markers:

- `settings`: the table of every flag and variable, from the settings' declarations;
- `bench`: the benchmark summary, from `bench/results.md` (the table `make bench` writes);
- `doors`: what each front door and encoding costs, from `bench/doors.md` (`make bench-doors`);
- `fastpath`: `make bench` before and after a change, from `bench/fast_path.md` (`python -m bench.compare`);
- `text-bench`: how well the text front end reads, from `bench/text.md` (`make bench-text`).

    python -m scripts.render_docs [--check]

With --check it only says whether README.md is up to date (exit 1 when it is not).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bench.results_summary import summary_markdown
from services.settings import markdown_table

README = Path(__file__).resolve().parent.parent / "README.md"
BENCH_RESULTS = README.parent / "bench" / "results.md"
DOORS_RESULTS = README.parent / "bench" / "doors.md"
FAST_PATH_RESULTS = README.parent / "bench" / "fast_path.md"
TEXT_RESULTS = README.parent / "bench" / "text.md"


def markers(name: str) -> tuple[str, str]:
    """The begin and end markers of the generated section `name`."""
    return f"<!-- {name}:begin -->\n", f"<!-- {name}:end -->"


def generated_sections() -> dict[str, str]:
    """Each generated section's name and content, rendered from its source now."""
    return {
        "settings": markdown_table(),
        "bench": summary_markdown(BENCH_RESULTS.read_text(encoding="utf-8")),
        "doors": _without_title(DOORS_RESULTS.read_text(encoding="utf-8")),
        "fastpath": _without_title(FAST_PATH_RESULTS.read_text(encoding="utf-8")),
        "text-bench": _without_title(TEXT_RESULTS.read_text(encoding="utf-8")),
    }


def _without_title(markdown: str) -> str:
    """A results file's body: its first heading becomes a line saying where the numbers come from."""
    lines = markdown.strip().splitlines()
    if lines and lines[0].startswith("#"):
        lines[0] = "Measured by " + lines[0].lstrip("# ").strip() + ":"
    return "\n".join(lines) + "\n"


def rendered(text: str) -> str:
    """`text` (the README) with every generated section replaced by the rendered one."""
    for name, content in generated_sections().items():
        begin, end = markers(name)
        if begin not in text or end not in text:
            raise SystemExit(f"README.md has no {begin.strip()} ... {end} markers")
        head, rest = text.split(begin, 1)
        _, tail = rest.split(end, 1)
        text = head + begin + content + end + tail
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only check that README.md is up to date")
    args = parser.parse_args(argv)
    current = README.read_text(encoding="utf-8")
    updated = rendered(current)
    if args.check:
        print("README.md is up to date" if updated == current else "README.md is stale: run `make docs`")
        return 0 if updated == current else 1
    README.write_text(updated, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
