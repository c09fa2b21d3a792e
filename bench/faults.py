"""The fault table: each fault scenario on real processes, compared with a fault-free run.

    python -m bench.faults [--log-dir DIR] [--containers]

Starts two zones of workers (unbatched float32, so audio can be compared sample for sample),
Redis and a gateway on loopback, as the fault tests do (tests/support/faults/), runs every scenario once
and prints one row per scenario: requests, completed, identical to the fault-free audio, client
errors, and p95 time to first audio next to the fault-free p95 of the same requests.

With `--containers` the same workers, Redis and gateway are containers of the image (`make image`,
scripts/containers/mesh.py) and the scenarios are those a container engine can cause: a worker
container killed mid-sentence, the Redis container killed and restarted, a gateway container
stopped with SIGTERM while it streams.
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from bench.measure import percentile
from tests.support.faults import scenarios
from tests.support.faults.scenarios import ScenarioResult
from tests.support.faults.zone_mesh import EXACT_WORKER_ENV, FAST_FAILOVER_ENV, ZoneMesh

COLUMNS = ("scenario", "requests", "completed", "identical", "client errors", "p95 first audio s", "no-fault p95 s")


def _seconds(values: Sequence[float]) -> str:
    value = percentile([v for v in values if not math.isnan(v)], 95)
    return "-" if math.isnan(value) else f"{value:.3f}"


def row(result: ScenarioResult) -> list[str]:
    """One table row; "identical" is "-" where the scenario has no fault-free reference to compare."""
    compared = result.compared > 0
    return [
        result.name,
        str(result.requests),
        str(result.completed),
        f"{result.identical}/{result.compared}" if compared else "-",
        str(len(result.client_errors)),
        _seconds(result.first_audio_s),
        _seconds(result.baseline_first_audio_s) if result.baseline_first_audio_s else "-",
    ]


def render(results: Sequence[ScenarioResult]) -> str:
    """A Markdown table of `results`, then each scenario's facts and client errors."""
    rows = [list(COLUMNS)] + [row(result) for result in results]
    widths = [max(len(cells[i]) for cells in rows) for i in range(len(COLUMNS))]
    lines = ["| " + " | ".join(cell.ljust(width) for cell, width in zip(cells, widths, strict=False)) + " |" for cells in rows]
    lines.insert(1, "|" + "|".join("-" * (width + 2) for width in widths) + "|")
    for result in results:
        facts = ", ".join(f"{key}={value:.3g}" for key, value in result.facts.items())
        if facts:
            lines.append(f"- {result.name}: {facts}")
        for error, count in Counter(result.client_errors).items():
            lines.append(f"- {result.name}: {count} x client error {error}")
    return "\n".join(lines)


def run(log_dir: Path) -> list[ScenarioResult]:
    """Every scenario once, on one mesh."""
    mesh = ZoneMesh(log_dir=log_dir, worker_env={"acoustic@zone-a": {"TTS_MAX_STREAMS": "1"}}).start()
    attempt_timeout_s = float(FAST_FAILOVER_ENV["TTS_ATTEMPT_TIMEOUT_S"])
    try:
        mesh.start_gateway("gateway")
        results = [
            scenarios.baseline(mesh, "gateway"),
            scenarios.kill_worker_mid_sentence(mesh, "gateway", "vocoder"),
            scenarios.kill_worker_mid_sentence(mesh, "gateway", "acoustic"),
            scenarios.zone_outage(mesh, "gateway"),
            scenarios.blackhole_worker(mesh, "gateway", "acoustic", attempt_timeout_s),
            scenarios.blackhole_worker(mesh, "gateway", "vocoder", attempt_timeout_s),
            scenarios.overloaded_worker(mesh, "gateway"),
        ]
        mesh.start_gateway("gateway-one-acoustic", acoustic=[mesh.spec("acoustic", "zone-a")], redis_url="", env=scenarios.SHED_AT_ONCE_ENV)
        results.append(scenarios.saturated_mesh_sheds(mesh, "gateway-one-acoustic"))
        mesh.stop_gateway("gateway-one-acoustic")
        results.append(scenarios.invalid_argument_not_retried(mesh, mesh.model_info())[0])
        results.append(scenarios.redis_outage(mesh, "gateway"))
        results.append(scenarios.failing_zone_under_load(mesh, mesh.model_info()))
        return results
    finally:
        mesh.stop()


def run_containers(log_dir: Path) -> list[ScenarioResult]:
    """The scenarios a container engine causes, on the mesh in containers."""
    from scripts.containers.mesh import ContainerMesh

    mesh = ContainerMesh(
        zones=("zone-a", "zone-b"), worker_env={"*": dict(EXACT_WORKER_ENV)}, gateway_env=dict(FAST_FAILOVER_ENV), log_dir=log_dir
    ).start()
    try:
        results = [
            scenarios.baseline(mesh, "gateway"),  # type: ignore[arg-type]
            scenarios.kill_worker_mid_sentence(mesh, "gateway", "vocoder"),  # type: ignore[arg-type]
            scenarios.kill_worker_mid_sentence(mesh, "gateway", "acoustic"),  # type: ignore[arg-type]
            scenarios.redis_restart(mesh, "gateway"),  # type: ignore[arg-type]
        ]
        mesh.start_gateway("gateway-drain")
        results.append(scenarios.gateway_drains_on_sigterm(mesh, "gateway-drain"))  # type: ignore[arg-type]
        return results
    finally:
        mesh.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--log-dir", type=Path, default=None, help="where service logs go (default: a temporary folder)")
    parser.add_argument("--containers", action="store_true", help="run the mesh in containers (needs `make image`)")
    args = parser.parse_args(argv)
    log_dir = args.log_dir or Path(tempfile.mkdtemp(prefix="tts-faults-"))
    log_dir.mkdir(parents=True, exist_ok=True)
    print(render(run_containers(log_dir) if args.containers else run(log_dir)))
    print(f"\nservice logs: {log_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
