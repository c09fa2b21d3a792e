"""`make docs`: write the generated parts of README.md (the settings table) from their sources.

    python -m scripts.render_docs [--check]

With --check it only says whether README.md is up to date (exit 1 when it is not).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from services.settings import markdown_table

README = Path(__file__).resolve().parent.parent / "README.md"
BEGIN = "<!-- settings:begin -->\n"
END = "<!-- settings:end -->"


def rendered(text: str) -> str:
    """`text` (the README) with its settings table replaced by the rendered one."""
    if BEGIN not in text or END not in text:
        raise SystemExit(f"README.md has no {BEGIN.strip()} ... {END} markers")
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return head + BEGIN + markdown_table() + END + tail


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
