"""`make bench-doors`: what each front door and each encoding costs, measured on one mesh in one run.

- First audio through the edge (Envoy: gRPC passed through, and grpc-web) against the gateway
  directly, and the HTTP API's first byte against gRPC's first audio: cache warm (the same
  paragraph again), so the door is most of what differs; requests interleaved, door by door.
- First audio of OGG_OPUS (48 kHz) against LINEAR_PCM at the voice's 22.05 kHz and at 48 kHz (which
  tells the resampler's share from the encoder's), cache cold (every request a new text), interleaved.
- Bytes per second of audio for every encoding, on one paragraph.
- The doors for agents, homes and phones (bench/agent_doors.py): first audio over our WebSocket,
  ElevenLabs' socket and Wyoming against gRPC's (cache warm, interleaved with the others), a
  paragraph streamed at 5 words/s to a playing listener, cancel on a playing context, LiveKit's
  ElevenLabs plugin through the gateway, and resume points against the uninterrupted stream.

    python -m bench.doors [--rounds 30] [--out bench/doors.md]
"""

from __future__ import annotations

import argparse
import statistics
import struct
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import grpc
import httpx

from bench import agent_doors
from bench.mesh import BenchMesh
from bench.texts import TEXTS, unique_variants
from libs.edge.envoy import EdgeSettings
from libs.edge.process import EdgeProcess
from libs.encoding.encoders import ENCODINGS
from libs.pb.tts.v1 import tts_pb2, tts_pb2_grpc
from tests.support.mesh import free_port

Probe = Callable[[str], float]
"""Speaks a text through one door and returns seconds to its first audio."""


def grpc_probe(address: str, encoding: int = tts_pb2.LINEAR_PCM, sample_rate_hz: int = 0) -> Probe:
    channel = grpc.insecure_channel(address)
    stub = tts_pb2_grpc.TextToSpeechStub(channel)

    def probe(text: str) -> float:
        started = time.perf_counter()
        first = None
        for response in stub.Synthesize(tts_pb2.SynthesizeRequest(text=text, encoding=encoding, sample_rate_hz=sample_rate_hz), timeout=120):
            if first is None and response.audio:
                first = time.perf_counter() - started
        assert first is not None, "no audio"
        return first

    return probe


def grpc_web_probe(base_url: str) -> Probe:
    client = httpx.Client(timeout=120)
    headers = {"content-type": "application/grpc-web+proto", "x-grpc-web": "1"}

    def probe(text: str) -> float:
        request = tts_pb2.SynthesizeRequest(text=text).SerializeToString()
        body = struct.pack(">BI", 0, len(request)) + request
        started = time.perf_counter()
        first = None
        buffered = b""
        with client.stream("POST", f"{base_url}/tts.v1.TextToSpeech/Synthesize", content=body, headers=headers) as reply:
            for part in reply.iter_bytes():
                buffered += part
                while first is None and len(buffered) >= 5:
                    flag, length = struct.unpack(">BI", buffered[:5])
                    if len(buffered) < 5 + length:
                        break
                    message, buffered = buffered[5 : 5 + length], buffered[5 + length :]
                    if not flag & 0x80 and tts_pb2.SynthesizeResponse.FromString(message).audio:
                        first = time.perf_counter() - started
        assert first is not None, "no audio"
        return first

    return probe


def http_probe(base_url: str) -> Probe:
    client = httpx.Client(timeout=120)

    def probe(text: str) -> float:
        body = {"model": "tts-mesh", "voice": "alloy", "input": text, "response_format": "pcm"}
        started = time.perf_counter()
        first = None
        with client.stream("POST", f"{base_url}/v1/audio/speech", json=body) as reply:
            for part in reply.iter_bytes():
                if part and first is None:
                    first = time.perf_counter() - started
        assert first is not None, "no audio"
        return first

    return probe


def interleaved(probes: dict[str, Probe], texts: Callable[[int], str], rounds: int) -> dict[str, list[float]]:
    """Each probe once per round, in turn, on the round's text."""
    seconds: dict[str, list[float]] = {name: [] for name in probes}
    for index in range(rounds):
        for name, probe in probes.items():
            seconds[name].append(probe(texts(index)))
    return seconds


def bytes_per_audio_second(address: str, text: str) -> list[tuple[str, int, float]]:
    """(encoding, output rate, bytes per second of audio) for every encoding."""
    rows = []
    with grpc.insecure_channel(address) as channel:
        stub = tts_pb2_grpc.TextToSpeechStub(channel)
        for value in ENCODINGS:
            responses = list(stub.Synthesize(tts_pb2.SynthesizeRequest(text=text, encoding=value), timeout=120))
            audio_s = responses[-1].audio_offset_s + responses[-1].audio_duration_s
            rows.append((tts_pb2.AudioEncoding.Name(value), responses[0].sample_rate_hz, sum(len(r.audio) for r in responses) / audio_s))
    return rows


def _paired_ms(values: list[float], baseline: list[float]) -> str:
    """The median of the per-round differences, in ms: each round's pair shared the machine's state."""
    return f"{statistics.median(a - b for a, b in zip(values, baseline, strict=False)) * 1000:+.1f} ms"


def _ms(values: list[float]) -> str:
    return f"{statistics.median(values) * 1000:.1f}"


def agent_rows(warm: dict[str, list[float]], agents: dict[str, Any]) -> list[str]:
    """The table of the doors for agents, homes and phones."""
    grpc_ms = statistics.median(warm["grpc"]) * 1000

    def versus(name: str) -> str:
        ms = statistics.median(warm[name]) * 1000
        return f"{ms:.1f} ms ({(ms - grpc_ms) / grpc_ms * 100:+.0f}% against gRPC's {grpc_ms:.1f} ms; {_paired_ms(warm[name], warm['grpc'])} paired)"

    streamed, cancel = agents["streamed"], agents["cancel"]
    same_audio, same_words, plugin_first_s = agents["livekit"]
    cuts, equal = agents["resume"]
    return [
        "| doors for agents, homes and phones | measured | target | met |",
        "|---|---|---|---|",
        f"| WebSocket first audio, binary frames (paragraph, cache warm, p50) | {versus('socket')} | within 10% of gRPC | {_yes(_within(warm['socket'], warm['grpc']))} |",
        f"| WebSocket first audio, base64 in JSON (same) | {versus('socket_base64')} | within 10% of gRPC | {_yes(_within(warm['socket_base64'], warm['grpc']))} |",
        f"| ElevenLabs socket first audio (same) | {versus('elevenlabs')} | - | - |",
        f"| Wyoming first audio (same) | {versus('wyoming')} | within 10% of gRPC | {_yes(_within(warm['wyoming'], warm['grpc']))} |",
        f"| {streamed.words} words streamed at 5 words/s to a playing listener | first audio {streamed.first_audio_s * 1000:.0f} ms after the first word,"
        f" longest wait for due audio {streamed.longest_wait_s * 1000:.0f} ms over {streamed.audio_s:.1f} s of audio | never starved (0 ms) | {_yes(streamed.longest_wait_s <= 0.0)} |",
        f"| cancel on a playing context | answered in {cancel.answered_ms:.1f} ms (round trip), {cancel.audio_after} audio messages after it |"
        f" stops within 50 ms | {_yes(cancel.answered_ms <= 50 and not cancel.audio_after)} |",
        f"| text heard at cancel | {cancel.heard_words} words, {'exactly' if cancel.heard_exact else 'NOT'} those whose audio ended by played_ms |"
        f" matches the word timestamps exactly | {_yes(cancel.heard_exact)} |",
        f"| the socket's other context | {'same audio as alone' if cancel.other_untouched else 'DIFFERENT audio'} | plays on untouched | {_yes(cancel.other_untouched)} |",
        f"| LiveKit Agents' ElevenLabs plugin, base URL changed | audio {'equal to' if same_audio else 'NOT equal to'} gRPC's, word timings"
        f" {'equal to' if same_words else 'NOT equal to'} ours (1.5 ms), first audio {plugin_first_s * 1000:.0f} ms | speaks unchanged, alignment included |"
        f" {_yes(same_audio and same_words)} |",
        f"| resumed at {cuts} points of a gRPC stream | {equal} of {cuts} joined streams equal to the uninterrupted one | sample for sample | {_yes(equal == cuts)} |",
        "",
    ]


def _within(values: list[float], baseline: list[float], ratio: float = 0.10) -> bool:
    return statistics.median(values) <= statistics.median(baseline) * (1 + ratio)


def _yes(met: bool) -> str:
    return "yes" if met else "NO"


def report(
    warm: dict[str, list[float]], cold: dict[str, list[float]], sizes: list[tuple[str, int, float]], rounds: int,
    agents: dict[str, Any] | None = None,
) -> str:
    lines = [
        f"## Front doors and encodings (`make bench-doors`, {time.strftime('%Y-%m-%d %H:%M')}, {rounds} rounds)",
        "",
        "| first audio, p50 ms (cache warm) | gRPC direct | gRPC via Envoy | grpc-web via Envoy | HTTP API direct (first byte) | HTTP API via Envoy |",
        "|---|---:|---:|---:|---:|---:|",
        "| paragraph | " + " | ".join(_ms(warm[name]) for name in ("grpc", "grpc_edge", "grpc_web_edge", "http", "http_edge")) + " |",
        "",
        f"- Through Envoy, gRPC adds {(statistics.median(warm['grpc_edge']) - statistics.median(warm['grpc'])) * 1000:+.1f} ms"
        f" and grpc-web {(statistics.median(warm['grpc_web_edge']) - statistics.median(warm['grpc'])) * 1000:+.1f} ms"
        " to first audio (p50; target: at most 3 ms more).",
        f"- The HTTP API's first byte is {(statistics.median(warm['http']) - statistics.median(warm['grpc'])) * 1000:+.1f} ms"
        " from gRPC's first audio (p50).",
        f"- Cache cold, first audio p50: LINEAR_PCM {_ms(cold['pcm'])} ms, LINEAR_PCM at 48 kHz {_ms(cold['pcm48'])} ms,"
        f" OGG_OPUS (48 kHz) {_ms(cold['opus'])} ms ({_paired_ms(cold['opus'], cold['pcm'])} against LINEAR_PCM,"
        f" {_paired_ms(cold['opus'], cold['pcm48'])} against LINEAR_PCM at 48 kHz; median of the per-round"
        " differences; target: within 20 ms).",
        "",
        "| encoding | rate, Hz | bytes per second of audio |",
        "|---|---:|---:|",
        *(f"| `{name}` | {rate} | {rate_bytes:,.0f} |" for name, rate, rate_bytes in sizes),
        "",
        *(agent_rows(warm, agents) if agents else []),
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    wyoming_port = free_port()
    mesh = BenchMesh(log_dir=Path(tempfile.mkdtemp(prefix="tts-bench-")), env={"TTS_WYOMING_PORT": str(wyoming_port)}).start()
    try:
        edge = EdgeSettings(
            port=free_port(), admin_port=free_port(), gateway_grpc_port=int(mesh.gateway_address.rsplit(":", 1)[1]),
            gateway_http_port=mesh.http_port, access_log=False,
        )  # fmt: skip
        with EdgeProcess(edge):
            edge_url = f"http://127.0.0.1:{edge.port}"
            paragraph = TEXTS["paragraph"]
            warm_probes = {
                "grpc": grpc_probe(mesh.gateway_address),
                "grpc_edge": grpc_probe(f"127.0.0.1:{edge.port}"),
                "grpc_web_edge": grpc_web_probe(edge_url),
                "http": http_probe(mesh.http_url),
                "http_edge": http_probe(edge_url),
                "socket": agent_doors.socket_probe(mesh.http_url),
                "socket_base64": agent_doors.socket_probe(mesh.http_url, "base64"),
                "elevenlabs": agent_doors.elevenlabs_probe(mesh.http_url),
                "wyoming": agent_doors.wyoming_probe(wyoming_port),
            }
            interleaved(warm_probes, lambda index: paragraph, 2)  # fills the cache, warms the connections
            warm = interleaved(warm_probes, lambda index: paragraph, args.rounds)
            cold_probes = {
                "pcm": grpc_probe(mesh.gateway_address),
                "pcm48": grpc_probe(mesh.gateway_address, tts_pb2.LINEAR_PCM, 48000),
                "opus": grpc_probe(mesh.gateway_address, tts_pb2.OGG_OPUS),
            }
            cold_texts = unique_variants(paragraph, len(cold_probes) * args.rounds, first_number=900_000)
            cold: dict[str, list[float]] = {name: [] for name in cold_probes}
            names = list(cold_probes)
            for index in range(args.rounds):
                order = names[index % len(names) :] + names[: index % len(names)]  # each probe first as often
                for offset, name in enumerate(order):
                    cold[name].append(cold_probes[name](cold_texts[len(names) * index + offset]))
            sizes = bytes_per_audio_second(mesh.gateway_address, paragraph)
            agents = {
                "streamed": agent_doors.streamed_at_llm_pace(mesh.http_url, unique_variants(paragraph, 1, first_number=990_000)[0]),
                "cancel": agent_doors.cancel_on_a_playing_context(mesh.gateway_address, mesh.http_url),
                "livekit": agent_doors.livekit_plugin(mesh.gateway_address, mesh.http_url, paragraph),
                "resume": agent_doors.resumed_equals_uninterrupted(mesh.gateway_address, paragraph),
            }
    finally:
        mesh.stop()
    table = report(warm, cold, sizes, args.rounds, agents)
    print(table)
    if args.out:
        args.out.write_text(table, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
