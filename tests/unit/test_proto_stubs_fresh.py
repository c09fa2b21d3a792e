"""The committed stubs in libs/pb are exactly what `make proto` generates from protos/."""

from __future__ import annotations

from pathlib import Path

from scripts.gen_protos import DEFAULT_OUT, generate


def _tree(root: Path) -> dict[str, str]:
    return {
        str(path.relative_to(root)): path.read_text()
        for path in sorted(root.rglob("*"))
        if path.is_file() and "__pycache__" not in path.parts
    }


def test_committed_stubs_match_a_fresh_generation(tmp_path: Path) -> None:
    generate(tmp_path)
    fresh, committed = _tree(tmp_path), _tree(DEFAULT_OUT)
    assert sorted(fresh) == sorted(committed), "file lists differ: run `make proto`"
    stale = [name for name in fresh if fresh[name] != committed[name]]
    assert not stale, f"stale generated files {stale}: run `make proto` and commit libs/pb"


def test_generated_imports_point_inside_libs_pb(tmp_path: Path) -> None:
    generate(tmp_path)
    grpc_module = (tmp_path / "tts" / "acoustic" / "v1" / "acoustic_pb2_grpc.py").read_text()
    assert "from libs.pb.tts.common.v1 import mel_pb2" in grpc_module
    assert "\nfrom tts." not in grpc_module
