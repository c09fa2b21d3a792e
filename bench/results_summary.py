"""The part of `bench/results.md` (the table `make bench` writes) that docs/performance.md shows.

The docs quote no benchmark number by hand: `make docs` (scripts/render_docs.py) copies this
summary between its `<!-- bench:begin -->` and `<!-- bench:end -->` markers, and a test fails when
the two differ. Rows and notes are copied verbatim, so every number in the summary is in the file.
"""

from __future__ import annotations

import re
import textwrap
from typing import Final

INTRO_WIDTH_CHARS: Final = 100
"""Width the summary's opening sentence is wrapped to, as the docs' prose is."""

SUMMARY_ROWS: Final = re.compile(
    r"(first audio p50, ms, cache |throughput, |max-batch \d+: throughput, |peak RSS all processes, )"
)
"""Rows the summary shows, by the start of their measure: first audio p50, throughput (also across the
max-batch sweep) and the memory of all processes. The p95s, the sweep's latencies and the memory of
each service stay in the file."""

SUMMARY_NOTES: Final = re.compile(r"Target |.*pinned to CPUs")
"""Notes the summary shows: every target with its verdict, and the machine the run was pinned to."""


def summary_markdown(results_markdown: str) -> str:
    """The summary of `results_markdown` (the text of bench/results.md)."""
    lines = results_markdown.splitlines()
    title = next((line.removeprefix("## ") for line in lines if line.startswith("## ")), None)
    table = [line for line in lines if line.startswith("|")]
    if title is None or len(table) < 3:
        raise ValueError("bench/results.md has no '## ' title or no table: run `make bench` to write it")
    header, rows = table[:2], table[2:]
    shown_rows = [row for row in rows if SUMMARY_ROWS.match(row.split("|")[1].strip())]
    notes = [line for line in lines if line.startswith("- ") and SUMMARY_NOTES.match(line.removeprefix("- "))]
    intro = textwrap.fill(
        f"From `bench/results.md`, *{title}*: first audio p50, throughput and the memory of all processes; "
        "the p95s, the sweep's latencies, each service's memory and how each row was measured are in the file.",
        width=INTRO_WIDTH_CHARS,
        break_on_hyphens=False,  # dates and names such as piper-tts stay whole
    )
    return "\n".join([intro, "", *header, *shown_rows, "", *notes]) + "\n"
