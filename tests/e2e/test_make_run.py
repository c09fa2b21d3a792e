"""`make run` as a newcomer runs it: the embedded Redis, the three services and the edge start from
nothing, and the mesh speaks through each door of the edge (gRPC, the HTTP API and the page)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import grpc
import httpx

from libs.pb.tts.v1 import tts_pb2, tts_pb2_grpc
from scripts.run_mesh import MeshPorts
from tests.support.ports import free_port

REPO_ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 240.0


def _port_offset() -> int:
    """An offset that puts every port of `make run` but the gRPC ones on free ports."""
    defaults = MeshPorts()
    ports = sorted(set(defaults.all()) - set(defaults.grpc_ports.values()))
    return free_port([port - ports[0] for port in ports]) - ports[0]


def test_make_run_starts_the_mesh_behind_the_edge_and_speaks(tmp_path: Path) -> None:
    log = (tmp_path / "run.log").open("wb")
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("REDIS_URL", None)
    # Every port moved by one offset, as on a host where a default port is taken, and so that no
    # test beside this one can hold one; the gRPC ports on their own below the ephemeral range,
    # since 50051-50053 lie inside it, where any connection on the host may hold them a while.
    offset, grpc_port = _port_offset(), free_port((0, 1, 2))
    ports = MeshPorts().moved(offset)  # all but the gRPC ones, which the edge stands for here
    runner = subprocess.Popen(
        [sys.executable, "-m", "scripts.run_mesh", "--port-offset", str(offset), "--grpc-port", str(grpc_port)],
        cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while b"[run] ready" not in (tmp_path / "run.log").read_bytes():
            assert runner.poll() is None, (tmp_path / "run.log").read_text(errors="replace")[-3000:]
            assert time.monotonic() < deadline, "make run was not ready in time"
            time.sleep(0.5)
        edge = f"127.0.0.1:{ports.edge}"
        with grpc.insecure_channel(edge) as channel:
            request = tts_pb2.SynthesizeRequest(text="Hello from make run.", encoding=tts_pb2.LINEAR_PCM)
            audio = b"".join(r.audio for r in tts_pb2_grpc.TextToSpeechStub(channel).Synthesize(request, timeout=60))
        assert len(audio) > 22050  # over half a second of 16-bit speech
        speech = httpx.post(
            f"http://{edge}/v1/audio/speech", json={"model": "tts-1", "voice": "alloy", "input": "And over HTTP."}, timeout=60
        )
        assert speech.status_code == 200 and speech.headers["content-type"] == "audio/mpeg" and len(speech.content) > 1000
        page = httpx.get(f"http://{edge}/", timeout=10)
        assert page.status_code == 200 and "<html" in page.text
        assert httpx.get(f"http://{edge}/healthz", timeout=10).status_code == 200
        assert httpx.get(f"http://127.0.0.1:{ports.http}/v1/models", timeout=10).status_code == 200  # the gateway's own
        for service, port in ports.metrics.items():
            assert f"tts_{service}_" in httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    finally:
        os.killpg(runner.pid, signal.SIGINT)
        try:
            runner.wait(timeout=60)
        finally:
            if runner.poll() is None:
                os.killpg(runner.pid, signal.SIGKILL)
    assert runner.returncode == 0, (tmp_path / "run.log").read_text(errors="replace")[-3000:]
