"""One toy worker as its own process, on a chosen loopback address: several of them share one port
on 127.0.0.x and stand behind one name, as the pods of a headless Service do.

    python -m tests.support.faults.toy_worker --kind acoustic --host 127.0.0.11 --port 50700 --metrics-port 50701

The servicer is the real one around the small engines of tests/faults/toy_mesh.py. It prints
"ready" once SERVING. SIGTERM does what a worker's does: NOT_SERVING at once, then in-flight streams
get `--grace-s` to finish while new calls are refused. /metrics serves the worker's own counters
(`tts_<kind>_streams_total`, `tts_<kind>_inflight_streams`) on the same address.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from prometheus_client import start_http_server

from libs.pb.tts.acoustic.v1 import acoustic_pb2_grpc
from libs.pb.tts.vocoder.v1 import vocoder_pb2_grpc
from libs.serving.voice_shelf import VoiceShelf
from libs.telemetry.metrics import AcousticMetrics, VocoderMetrics
from services.acoustic.servicer import AcousticServicer
from services.settings import load_worker_settings
from services.vocoder.servicer import VocoderServicer
from tests.support.faults.toy_mesh import VOICE, ToyAcousticEngine, toy_scheduling, toy_vocoder_engine
from tests.support.servers import aio_server


async def serve(kind: str, host: str, port: int, metrics_port: int, chunk_delay_s: float, grace_s: float) -> None:
    executor = ThreadPoolExecutor(max_workers=8)
    # Admission as a real worker's: from the environment (TTS_REALTIME_HEADROOM=0 switches real-time
    # admission off, as tests about anything else want on any machine), then the defaults.
    admission = load_worker_settings(kind, argv=[]).admission
    server = aio_server()
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    if kind == "acoustic":
        metrics: Any = AcousticMetrics()
        servicer: Any = AcousticServicer(metrics, *toy_scheduling("acoustic", executor, metrics, admission))
        servicer.install(VoiceShelf.holding(ToyAcousticEngine(chunk_delay_s), VOICE))
        acoustic_pb2_grpc.add_AcousticServicer_to_server(servicer, server)
    else:
        metrics = VocoderMetrics()
        servicer = VocoderServicer(metrics, *toy_scheduling("vocoder", executor, metrics, admission))
        servicer.install(VoiceShelf.holding(toy_vocoder_engine(), VOICE))
        vocoder_pb2_grpc.add_VocoderServicer_to_server(servicer, server)
    server.add_insecure_port(f"{host}:{port}")
    if metrics_port:
        start_http_server(metrics_port, addr=host, registry=metrics.registry)
    await server.start()
    await health_servicer.set("", health_pb2.HealthCheckResponse.SERVING)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    print("ready", flush=True)
    await stop.wait()
    await health_servicer.enter_graceful_shutdown()
    await server.stop(grace_s)
    executor.shutdown(wait=False, cancel_futures=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kind", choices=("acoustic", "vocoder"), required=True)
    parser.add_argument("--host", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--metrics-port", type=int, default=0)
    parser.add_argument("--chunk-delay-s", type=float, default=0.02, help="acoustic model time per chunk")
    parser.add_argument("--grace-s", type=float, default=30.0, help="time in-flight streams get after SIGTERM")
    args = parser.parse_args()
    asyncio.run(serve(args.kind, args.host, args.port, args.metrics_port, args.chunk_delay_s, args.grace_s))
    return 0


if __name__ == "__main__":
    sys.exit(main())
