"""Two `make bench` tables side by side: the mesh's first audio and throughput rows of a run before a
change and of a run after it, on the same machine, with their ratio and piper-tts's own drift
between the two runs (which bounds what the comparison can show).

    python -m bench.compare BEFORE.md AFTER.md --before-label 1f86bdc --after-label main --out bench/fast_path.md
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

Row = tuple[str, str, str]
"""(measure, text, streams), the key of a row of bench/results.md."""


def rows(markdown: str) -> dict[Row, tuple[str, str]]:
    """The (mesh, piper-tts) cells of every measurement row of a results table."""
    found: dict[Row, tuple[str, str]] = {}
    for line in markdown.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) < 5 or cells[0] in ("measure", "") or set(cells[0]) <= {"-"}:
            continue
        found[(cells[0], cells[1], cells[2])] = (cells[3], cells[4])
    return found


def _ratio(after: str, before: str) -> str:
    try:
        return f"{float(after) / float(before):.2f}x"
    except (ValueError, ZeroDivisionError):
        return "n/a"


def comparison(before: str, after: str, before_label: str, after_label: str) -> str:
    """The markdown table of the fast-path rows (first audio p50, throughput) of both runs."""
    old, new = rows(before), rows(after)
    title = next((line.lstrip("# ").strip() for line in after.splitlines() if line.startswith("#")), "make bench")
    lines = [
        f"## Fast path before and after (`make bench` at {before_label} and at {after_label}, same machine, back to back)",
        "",
        f"After: {title}.",
        "",
        f"| measure | text | streams | mesh at {before_label} | mesh at {after_label} | after / before | piper-tts, first run / second run |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for key, (mesh, piper) in new.items():
        measure = key[0]
        if key not in old or measure.startswith("max-batch") or not ("p50" in measure or measure.startswith("throughput")):
            continue
        old_mesh, old_piper = old[key]
        lines.append(
            f"| {measure} | {key[1]} | {key[2]} | {old_mesh} | {mesh} | {_ratio(mesh, old_mesh)} | {old_piper} / {piper} ({_ratio(piper, old_piper)}) |"
        )
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--before-label", default="before")
    parser.add_argument("--after-label", default="after")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    table = comparison(args.before.read_text(encoding="utf-8"), args.after.read_text(encoding="utf-8"), args.before_label, args.after_label)
    print(table)
    if args.out:
        args.out.write_text(table, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
