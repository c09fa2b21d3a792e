"""Regenerate the Python gRPC stubs in libs/pb/ from protos/.

`python -m scripts.gen_protos [--out DIR]` runs grpc_tools.protoc with -Iprotos, then rewrites the
generated absolute imports (`from tts.v1 import ...`) to package imports (`from libs.pb.tts.v1 ...`)
so the stubs live inside the repository's `libs` package instead of needing protos/ on sys.path.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = REPO_ROOT / "protos"
DEFAULT_OUT = REPO_ROOT / "libs" / "pb"
PACKAGE_PREFIX = "libs.pb"

_IMPORT_PATTERN = re.compile(r"^(from|import) tts(\.| )", re.MULTILINE)


def proto_files(proto_root: Path = PROTO_ROOT) -> list[Path]:
    """Every .proto under `proto_root`, sorted so the output does not depend on directory order."""
    return sorted(proto_root.rglob("*.proto"))


def rewrite_imports(source: str) -> str:
    """Turn `from tts.x import y` / `import tts.x` into imports under libs.pb."""
    return _IMPORT_PATTERN.sub(lambda m: f"{m.group(1)} {PACKAGE_PREFIX}.tts{m.group(2)}", source)


def generate(out_dir: Path) -> list[Path]:
    """Generate stubs for every proto into `out_dir`; returns the files written."""
    from grpc_tools import protoc  # a dev dependency: only needed to regenerate

    out_dir.mkdir(parents=True, exist_ok=True)
    protos = [str(p.relative_to(PROTO_ROOT)) for p in proto_files()]
    include = Path(protoc.__file__).parent / "_proto"
    args = [
        "protoc",
        f"-I{PROTO_ROOT}",
        f"-I{include}",
        f"--python_out={out_dir}",
        f"--pyi_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        *protos,
    ]
    if protoc.main(args) != 0:
        raise RuntimeError(f"protoc failed for {protos}")
    written: list[Path] = []
    for path in sorted(out_dir.rglob("*.py*")):
        if path.suffix not in (".py", ".pyi"):
            continue
        path.write_text(rewrite_imports(path.read_text()))
        written.append(path)
    # Every folder on the way must be a package for `import libs.pb.tts.v1...`.
    for folder in [out_dir, *sorted(p for p in out_dir.rglob("*") if p.is_dir())]:
        init = folder / "__init__.py"
        if not init.exists():
            init.write_text("")
            written.append(init)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output folder (default libs/pb)")
    args = parser.parse_args(argv)
    written = generate(args.out)
    print(f"wrote {len(written)} files under {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
