"""A client that stops reading stops the pipeline behind it: on the real mesh, three clients that read
one message of a 5,000-character text (48 kHz float audio) and then nothing cost the gateway a
bounded, small amount of memory and no CPU, the workers stop too, a normal client is served
meanwhile, and the memory goes back once they cancel.

Every bound holds on a machine of any speed: the pipeline is given as long as it takes to fill its
buffers and stop (the audio it made is what the buffers hold, whatever the speed), and "no CPU" is a
share of a core's time, which an idle process stays under on any machine. The mesh makes a stream's
audio as its listener will need it, so a pause while the listener still holds audio is pacing, not a
stop: the pipeline has stopped only once it stays quiet past the time a listener playing from the
first message would have run out."""

from __future__ import annotations

import time
import uuid

import grpc

from libs.pb.tts.v1 import tts_pb2, tts_pb2_grpc
from libs.scheduling.capacity import process_cpu_s
from tests.support.client import synthesize
from tests.support.mesh import Mesh

SLOW_CLIENTS = 3
TEXT_CHARS = 4990
STALL_TIMEOUT_S = 180.0
STEADY_S = 10.0
VOCODER_SAMPLES = "tts_vocoder_samples_total"
RATE_HZ = 22050
HELD_AUDIO_LIMIT_S = 120.0
"""Audio a stalled stream may have had made: what fills the buffers between the vocoder and the
client (about 40 s measured), with room; the texts last about 5 minutes."""
GROWTH_LIMIT_MB = 60.0
"""The gateway's memory while the three are stalled, over its baseline (measured: +15 MB)."""
RETURNED_LIMIT_MB = 25.0
"""Its memory after they cancel, over the baseline (measured: +5 MB; before: +70 MB and growing)."""
IDLE_SHARE = 0.05
"""Share of a core a process may use while the clients are stalled: health checks, load reports and
metrics, nothing a stream does."""


def _rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def _text(client: int) -> str:
    sentence = f"Client {client} of the slow ones says something the listener never hears, again and again. "
    return (f"{uuid.uuid4().hex}. " + sentence * 80)[:TEXT_CHARS]


def _wait_until_steady(mesh: Mesh, pids: dict[str, int], started: float, samples_before: float) -> float:
    """The vocoder's sample count once it has not moved for `STEADY_S`, no process used more than
    IDLE_SHARE of a core meanwhile (a step still running makes no samples until it ends), and a listener
    that started playing at `started` would have run out of the audio made for it `STEADY_S` ago; fails
    if the pipeline keeps working for `STALL_TIMEOUT_S`."""
    deadline = time.monotonic() + STALL_TIMEOUT_S
    last, since = mesh.metric("vocoder", VOCODER_SAMPLES), time.monotonic()
    cpu_since = {name: process_cpu_s(pid) for name, pid in pids.items()}
    while time.monotonic() < deadline:
        time.sleep(1.0)
        now, moment = mesh.metric("vocoder", VOCODER_SAMPLES), time.monotonic()
        busy = any(process_cpu_s(pid) - cpu_since[name] > IDLE_SHARE * (moment - since) for name, pid in pids.items())
        if now != last or busy:
            last, since = now, moment
            cpu_since = {name: process_cpu_s(pid) for name, pid in pids.items()}
        elif moment - since >= STEADY_S and moment - started >= (now - samples_before) / RATE_HZ / SLOW_CLIENTS + STEADY_S:
            return now
    raise AssertionError(f"the pipeline kept working for clients that do not read ({last / RATE_HZ:.0f} s of audio)")


def test_clients_that_stop_reading_stop_the_pipeline_and_cost_bounded_memory(mesh: Mesh) -> None:
    pids = {name: service.process.pid for name, service in mesh.services.items()}
    synthesize(mesh.gateway_address, f"Warm up {uuid.uuid4().hex[:6]}.")
    time.sleep(2.0)
    baseline_mb = _rss_mb(pids["gateway"])
    samples_before = mesh.metric("vocoder", VOCODER_SAMPLES)
    channels = [
        grpc.insecure_channel(mesh.gateway_address, options=[("grpc.use_local_subchannel_pool", 1)]) for _ in range(SLOW_CLIENTS)
    ]
    try:
        calls = []
        for client, channel in enumerate(channels):
            request = tts_pb2.SynthesizeRequest(text=_text(client), encoding=tts_pb2.FLOAT_PCM, sample_rate_hz=48000)
            call = tts_pb2_grpc.TextToSpeechStub(channel).Synthesize(request, timeout=600)
            assert next(call).audio  # one message, then nothing
            calls.append(call)
        started = time.monotonic()  # the last listener's first audio
        normal = synthesize(mesh.gateway_address, f"A client who reads is served meanwhile {uuid.uuid4().hex[:6]}.", timeout_s=120)
        assert normal.duration_s > 1.0
        held_samples = _wait_until_steady(mesh, pids, started, samples_before) - samples_before
        peak_mb = _rss_mb(pids["gateway"])
        cpu_before = {name: process_cpu_s(pid) for name, pid in pids.items()}
        time.sleep(STEADY_S)
        cpu_used = {name: process_cpu_s(pid) - cpu_before[name] for name, pid in pids.items()}
        print(
            f"\ngateway {baseline_mb:.0f} MB -> {peak_mb:.0f} MB with {SLOW_CLIENTS} stalled clients; "
            f"{held_samples / RATE_HZ / SLOW_CLIENTS:.0f} s of audio made for each; CPU in {STEADY_S:.0f} s: {cpu_used}"
        )
        assert held_samples / RATE_HZ / SLOW_CLIENTS < HELD_AUDIO_LIMIT_S
        assert peak_mb - baseline_mb < GROWTH_LIMIT_MB
        assert all(seconds < IDLE_SHARE * STEADY_S for seconds in cpu_used.values()), cpu_used
        for call in calls:
            call.cancel()
    finally:
        for channel in channels:
            channel.close()
    deadline = time.monotonic() + 30
    while any(mesh.metric(name, f"tts_{name}_inflight_streams") for name in ("acoustic", "vocoder")):
        assert time.monotonic() < deadline, "the workers still hold the cancelled streams"
        time.sleep(0.2)
    time.sleep(6.0)  # the gateway gives freed memory back a moment after its streams end
    after_mb = _rss_mb(pids["gateway"])
    print(f"after the cancels: {after_mb:.0f} MB")
    assert after_mb - baseline_mb < RETURNED_LIMIT_MB
