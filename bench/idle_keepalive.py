"""A long idle run: a mesh (gateway, one acoustic and one vocoder worker) that carries no traffic for
`--minutes` while every connection pings as often as it may, with one stream held open through each
quiet spell by a client that stops reading. Keepalive holds when no service logs GOAWAY or
too_many_pings, every held stream ends with all its sentences, no worker stream had to be resumed or
retried, and the mesh speaks at the end.

    python -m bench.idle_keepalive --minutes 10

A held stream lasts at most `--hold-s` (4 minutes by default), so the run crosses the servers'
5-minute connection rotation (`grpc.max_connection_age_ms`) with a stream in flight, which must
go on through it.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import grpc

from bench.mesh import BenchMesh
from libs.pb.tts.v1 import tts_pb2, tts_pb2_grpc
from libs.serving.server import MIN_PING_INTERVAL_MS
from tests.support.client import synthesize
from tests.support.faults.zone_mesh import metric_sum, scrape

HELD_SENTENCES = 16
HELD_TEXT = " ".join(
    f"Number {n} is one of the sentences that wait while nobody listens for a while." for n in range(HELD_SENTENCES)
)
"""About 90 s of audio: more than the buffers between the vocoder and a client that stopped reading hold."""
CLIENT_KEEPALIVE_OPTIONS = (
    ("grpc.keepalive_time_ms", MIN_PING_INTERVAL_MS),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
)
"""The public client pings the gateway as often as the servers allow, idle or not."""
GOAWAY_MARKS = ("GOAWAY", "too_many_pings", "Too many pings", "ENHANCE_YOUR_CALM")


@dataclass
class HeldStream:
    """One stream held through a quiet spell."""

    held_s: float
    sentences: int
    error: str = ""


def hold_one_stream(address: str, held_s: float) -> HeldStream:
    """Read one message, stop reading for `held_s`, then read the rest."""
    with grpc.insecure_channel(address, options=CLIENT_KEEPALIVE_OPTIONS) as channel:
        request = tts_pb2.SynthesizeRequest(text=HELD_TEXT, encoding=tts_pb2.FLOAT_PCM, sample_rate_hz=48000)
        responses = tts_pb2_grpc.TextToSpeechStub(channel).Synthesize(request, timeout=held_s + 600)
        started = time.monotonic()
        try:
            first = next(responses)
            time.sleep(held_s)
            rest = list(responses)
        except grpc.RpcError as error:
            time.sleep(max(0.0, held_s - (time.monotonic() - started)))  # the run stays as idle as planned
            return HeldStream(held_s, 0, f"{error.code().name}: {error.details()}")
    return HeldStream(held_s, sum(response.sentence_end for response in [first, *rest]))


def goaway_lines(mesh: BenchMesh) -> list[str]:
    """Log lines of any service that mention a GOAWAY or a ping strike."""
    found = []
    for name, service in mesh.services.items():
        for line in service.log_path.read_text(errors="replace").splitlines():
            if any(mark in line for mark in GOAWAY_MARKS):
                found.append(f"{name}: {line}")
    return found


def run(minutes: float, hold_s: float, log_dir: Path | None) -> int:
    logs = log_dir or Path(tempfile.mkdtemp(prefix="tts-idle-"))
    logs.mkdir(parents=True, exist_ok=True)
    env = {
        # The gateway pings its workers as often as they allow (its default is half as often).
        "TTS_KEEPALIVE_TIME_MS": str(MIN_PING_INTERVAL_MS),
        # A held stream's client reads nothing for minutes on purpose; a worker that measures its
        # real-time capacity from its streams would count that stall as its own slowness.
        "TTS_REALTIME_HEADROOM": "0",
    }
    mesh = BenchMesh(log_dir=logs, env=env).start()
    try:
        warm = synthesize(mesh.gateway_address, "Warm up before the quiet.")
        print(f"mesh up, warm call {warm.duration_s:.2f} s of audio; idle for {minutes:g} min", flush=True)
        started = time.monotonic()
        end = started + minutes * 60
        held: list[HeldStream] = []
        while (left_s := end - time.monotonic()) > 5:
            result = hold_one_stream(mesh.gateway_address, min(hold_s, left_s))
            held.append(result)
            print(
                f"  held a stream {result.held_s:.0f} s: {result.sentences}/{HELD_SENTENCES} sentences {result.error}", flush=True
            )
        idle_s = time.monotonic() - started
        after = synthesize(mesh.gateway_address, "Still speaking after the quiet.")
        routing = scrape(mesh.services["gateway"].metrics_port)
        resumes = metric_sum(routing, "tts_gateway_resumes_total")
        retries = metric_sum(routing, "tts_gateway_retries_total")
        goaways = goaway_lines(mesh)
        alive = {name: service.process.poll() is None for name, service in mesh.services.items()}
    finally:
        mesh.stop()
    ok = (
        not goaways
        and all(stream.sentences == HELD_SENTENCES and not stream.error for stream in held)
        and resumes == 0
        and retries == 0
        and after.duration_s > 0.5
        and all(alive.values())
    )
    print(f"idle {idle_s / 60:.1f} min, keepalive every {MIN_PING_INTERVAL_MS / 1000:g} s on every connection")
    print(f"held streams complete: {sum(s.sentences == HELD_SENTENCES for s in held)}/{len(held)}")
    print(f"GOAWAY / too_many_pings log lines: {len(goaways)}")
    for line in goaways[:10]:
        print(f"  {line}")
    print(f"worker streams resumed: {resumes:g}, retried: {retries:g}")
    print(f"speaks afterwards: {after.duration_s:.2f} s of audio; processes alive: {alive}")
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0, help="length of the idle run")
    parser.add_argument("--hold-s", type=float, default=240.0, help="longest one stream is held open unread")
    parser.add_argument("--log-dir", type=Path, default=None, help="where the services' logs go (default: a temporary folder)")
    args = parser.parse_args(argv)
    return run(args.minutes, args.hold_s, args.log_dir)


if __name__ == "__main__":
    sys.exit(main())
