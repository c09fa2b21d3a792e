"""The gateway's keepalive pings and the workers' ping policy agree: an idle gateway pinging as often
as its settings allow keeps its worker connections, and a stream open through the quiet keeps going.

The workers once took a ping without data only every 5 minutes (their setting had a name gRPC does
not know), so pings every 10 s earned GOAWAY too_many_pings on the third strike, about 40 s in."""

from __future__ import annotations

import time
from pathlib import Path

import grpc

from libs.pb.tts.v1 import tts_pb2, tts_pb2_grpc
from libs.serving.server import MIN_PING_INTERVAL_MS
from tests.support.client import synthesize
from tests.support.faults.zone_mesh import metric_sum, scrape
from tests.support.gateway_process import extra_gateway
from tests.support.mesh import Mesh

QUIET_S = 55.0
"""Five pings at the fastest interval a gateway may ping: the old policy failed at the fourth."""
HELD_SENTENCES = 16
HELD_TEXT = " ".join(f"Number {n} is one of the sentences that wait while nobody listens for a minute." for n in range(HELD_SENTENCES))
"""About 90 s of audio: more than fills the buffers between the vocoder and a client that stopped reading."""


def test_an_idle_gateway_keeps_its_worker_connections_and_its_open_stream(mesh: Mesh, tmp_path: Path) -> None:
    offsets = {name: mesh.services[name].log_path.stat().st_size for name in ("acoustic", "vocoder")}
    log_path = tmp_path / "gateway.log"
    env = {"TTS_KEEPALIVE_TIME_MS": str(MIN_PING_INTERVAL_MS)}
    with extra_gateway(mesh, log_path, env=env) as gateway:
        with grpc.insecure_channel(gateway.address) as channel:
            # A client that reads one message and then nothing through the quiet: the pipeline stops,
            # and its worker calls stay open with no data on them, as the health Watches do.
            request = tts_pb2.SynthesizeRequest(text=HELD_TEXT, encoding=tts_pb2.FLOAT_PCM, sample_rate_hz=48000)
            responses = tts_pb2_grpc.TextToSpeechStub(channel).Synthesize(request, timeout=QUIET_S + 300)
            first = next(responses)
            time.sleep(QUIET_S)
            rest = list(responses)
        assert first.audio and sum(response.sentence_end for response in [first, *rest]) == HELD_SENTENCES
        assert synthesize(gateway.address, "Still connected after the quiet.").duration_s > 0.5
        routing = scrape(gateway.metrics_port)
        assert metric_sum(routing, "tts_gateway_resumes_total") == 0, "an open stream broke during the quiet"
        assert metric_sum(routing, "tts_gateway_retries_total") == 0
    gateway_log = log_path.read_text(errors="replace")
    assert "too_many_pings" not in gateway_log and "GOAWAY" not in gateway_log, gateway_log[-2000:]
    for name, offset in offsets.items():
        with mesh.services[name].log_path.open("rb") as log:
            log.seek(offset)
            assert b"GOAWAY" not in log.read(), f"{name} logged a GOAWAY"
