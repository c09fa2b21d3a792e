"""A streaming load generator for the public `TextToSpeech.Synthesize` API (grpc.aio).

`run_load` drives `concurrency` concurrent streams over a list of texts until `requests` requests
have been sent or `duration_s` has passed, and records, per request, time to first audio, total
time, audio seconds and status. Runs are bounded in count and time and only go to loopback
addresses: this is a benchmark tool, not a load-testing service.

    python -m bench.loadgen --target 127.0.0.1:50051 --concurrency 8 --requests 32 --texts paragraph
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Final

import grpc

from bench.measure import OK, LoadSummary, RequestResult, format_playback, format_summary, playback_stalls, summarize
from bench.texts import TEXTS, unique_variants
from libs.pb.tts.v1 import tts_pb2, tts_pb2_grpc

MAX_REQUESTS: Final = 100_000
MAX_DURATION_S: Final = 3600.0
MAX_CONCURRENCY: Final = 1024
DEFAULT_REQUEST_TIMEOUT_S: Final = 120.0
CHANNEL_OPTIONS: Final = (("grpc.max_receive_message_length", 16 * 1024 * 1024),)
INVALID_RESPONSE: Final = "INVALID_RESPONSE"
"""Client-side status of a stream that sent audio without a sample rate (its length cannot be known)."""

TextSource = Sequence[str] | Callable[[int], str]
"""The texts of a run: a list (request i speaks texts[i % len]) or a function of the request index."""

_BYTES_PER_SAMPLE: Final = {
    tts_pb2.AUDIO_ENCODING_UNSPECIFIED: 2,
    tts_pb2.LINEAR_PCM: 2,
    tts_pb2.FLOAT_PCM: 4,
}


@dataclass(frozen=True)
class LoadConfig:
    """One load run."""

    target: str
    """Gateway address, HOST:PORT; the host must be a loopback address."""
    concurrency: int = 1
    """Streams open at the same time (count)."""
    requests: int | None = None
    """Stop after this many requests (count); None to run for `duration_s`."""
    duration_s: float | None = None
    """Stop starting requests after this long (seconds); None to run for `requests`."""
    request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S
    """Deadline of each request (seconds)."""
    encoding: int = tts_pb2.LINEAR_PCM
    """`tts.v1.AudioEncoding` asked for."""
    voice: str = ""
    """Voice name; empty for the default voice."""
    speed: float = 0.0
    """Speaking-rate multiple; 0 for the voice's normal rate."""

    def __post_init__(self) -> None:
        check_loopback(self.target)
        if not 1 <= self.concurrency <= MAX_CONCURRENCY:
            raise ValueError(f"concurrency must be within 1..{MAX_CONCURRENCY}, got {self.concurrency}")
        if self.requests is None and self.duration_s is None:
            raise ValueError("give requests or duration_s (or both): a run must be bounded")
        if self.requests is not None and not 1 <= self.requests <= MAX_REQUESTS:
            raise ValueError(f"requests must be within 1..{MAX_REQUESTS}, got {self.requests}")
        if self.duration_s is not None and not 0 < self.duration_s <= MAX_DURATION_S:
            raise ValueError(f"duration_s must be within (0, {MAX_DURATION_S}], got {self.duration_s}")
        if self.request_timeout_s <= 0:
            raise ValueError(f"request_timeout_s must be positive, got {self.request_timeout_s}")


@dataclass(frozen=True)
class LoadRun:
    """The outcome of `run_load`."""

    results: list[RequestResult]
    """Every request, in the order they were started."""
    summary: LoadSummary
    """Percentiles, throughput and error rate over `results`."""


def check_loopback(target: str) -> None:
    """Raise ValueError unless `target` is HOST:PORT with a loopback HOST (127.0.0.0/8, ::1, localhost)."""
    host, separator, port = target.rpartition(":")
    if not separator or not port.isdigit():
        raise ValueError(f"target {target!r} is not HOST:PORT")
    host = host.strip("[]")
    if host == "localhost":
        return
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise ValueError(f"target {target!r} is not a loopback address; the load generator only drives local services")


def audio_seconds(byte_count: int, sample_rate_hz: int, encoding: int) -> float:
    """Seconds of mono audio in `byte_count` bytes of `encoding` at `sample_rate_hz`."""
    if sample_rate_hz <= 0:
        raise ValueError(f"sample_rate_hz must be positive, got {sample_rate_hz}")
    bytes_per_sample = _BYTES_PER_SAMPLE.get(encoding)
    if bytes_per_sample is None:
        raise ValueError(f"unknown audio encoding {encoding}")
    return byte_count // bytes_per_sample / sample_rate_hz


async def synthesize_once(
    stub: tts_pb2_grpc.TextToSpeechStub,
    request: tts_pb2.SynthesizeRequest,
    *,
    index: int,
    run_start_s: float,
    timeout_s: float,
    metadata: Sequence[tuple[str, str]] = (),
) -> RequestResult:
    """Send one request, read its whole stream, and time it (`run_start_s` is a perf_counter value);
    `metadata` goes with the call (a client's `x-forwarded-for` behind a trusted proxy, an API key)."""
    started = time.perf_counter()
    first_audio: float | None = None
    audio_bytes = 0
    audio_s = 0.0
    arrivals: list[tuple[float, float]] = []  # (received, audio seconds): what a player would have had when
    status, error = OK, ""
    try:
        async for response in stub.Synthesize(request, timeout=timeout_s, metadata=tuple(metadata) or None):
            if not response.audio:
                continue
            if first_audio is None:
                first_audio = time.perf_counter()
            audio_bytes += len(response.audio)
            if response.sample_rate_hz <= 0:
                status, error = INVALID_RESPONSE, "audio arrived without a sample rate"
                break
            # Per message, so a stream whose rate or encoding changed would still be counted right.
            message_s = audio_seconds(len(response.audio), response.sample_rate_hz, response.encoding)
            arrivals.append((time.perf_counter(), message_s))
            audio_s += message_s
    except grpc.aio.AioRpcError as rpc_error:
        status, error = rpc_error.code().name, rpc_error.details() or ""
    ended = time.perf_counter()
    stall_s, longest_stall_s = playback_stalls(arrivals)
    return RequestResult(
        index=index,
        status=status,
        ttfa_s=None if first_audio is None else first_audio - started,
        total_s=ended - started,
        audio_s=audio_s,
        audio_bytes=audio_bytes,
        text_chars=len(request.text),
        started_s=started - run_start_s,
        error=error,
        stall_s=stall_s,
        longest_stall_s=longest_stall_s,
    )


def text_for(texts: TextSource, index: int) -> str:
    """The text request `index` speaks."""
    if callable(texts):
        return texts(index)
    if not texts:
        raise ValueError("texts is empty")
    return texts[index % len(texts)]


async def run_load(config: LoadConfig, texts: TextSource, channel: grpc.aio.Channel | None = None) -> LoadRun:
    """Drive `config.concurrency` streams; request i speaks `text_for(texts, i)`.

    Opens (and closes) its own channel unless one is given.
    """
    if not callable(texts) and not texts:
        raise ValueError("texts is empty")
    own_channel = channel is None
    channel = channel or grpc.aio.insecure_channel(config.target, options=CHANNEL_OPTIONS)
    stub = tts_pb2_grpc.TextToSpeechStub(channel)
    results: list[RequestResult] = []
    next_index = 0
    run_start = time.perf_counter()
    deadline = None if config.duration_s is None else run_start + config.duration_s

    async def stream_loop() -> None:
        nonlocal next_index
        while True:
            if config.requests is not None and next_index >= config.requests:
                return
            if deadline is not None and time.perf_counter() >= deadline:
                return
            index = next_index
            next_index += 1
            request = tts_pb2.SynthesizeRequest(
                text=text_for(texts, index),
                voice=config.voice,
                speed=config.speed,
                encoding=config.encoding,
                request_id=f"bench-{index}",
            )
            results.append(
                await synthesize_once(stub, request, index=index, run_start_s=run_start, timeout_s=config.request_timeout_s)
            )

    try:
        await asyncio.gather(*(stream_loop() for _ in range(config.concurrency)))
    finally:
        if own_channel:
            await channel.close()
    results.sort(key=lambda result: result.index)
    wall_s = max((r.started_s + r.total_s for r in results), default=0.0) - min((r.started_s for r in results), default=0.0)
    return LoadRun(results, summarize(results, wall_s))


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.loadgen", description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", default="127.0.0.1:50051", help="gateway HOST:PORT, loopback only")
    parser.add_argument("--concurrency", type=int, default=1, help="streams open at once")
    parser.add_argument("--requests", type=int, default=None, help="requests to send (default 4 x concurrency without --duration-s)")
    parser.add_argument("--duration-s", type=float, default=None, help="stop starting requests after this many seconds")
    parser.add_argument("--texts", choices=[*TEXTS, "all"], default="paragraph", help="which text length to speak")
    parser.add_argument("--unique", action="store_true", help="make every sentence unique within this run, so the mel cache misses")
    parser.add_argument("--timeout-s", type=float, default=DEFAULT_REQUEST_TIMEOUT_S, help="deadline per request in seconds")
    parser.add_argument("--json", default=None, metavar="PATH", help="also write every request's result as JSON here")
    parser.add_argument("--per-stream", action="store_true", help="print each stream's first audio, stall and status")
    args = parser.parse_args(argv)
    if args.requests is None and args.duration_s is None:
        args.requests = 4 * args.concurrency
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse_args(argv)
    base = list(TEXTS.values()) if args.texts == "all" else [TEXTS[args.texts]]
    texts: TextSource = base
    if args.unique:
        # 16 tags per request covers the longest text (9 sentences); tags are unique within this run.
        texts = lambda index: unique_variants(base[index % len(base)], 1, first_number=index * 16)[0]  # noqa: E731
    try:
        config = LoadConfig(
            target=args.target,
            concurrency=args.concurrency,
            requests=args.requests,
            duration_s=args.duration_s,
            request_timeout_s=args.timeout_s,
        )
    except ValueError as error:
        print(f"python -m bench.loadgen: {error}", file=sys.stderr)
        return 2
    run = asyncio.run(run_load(config, texts))
    print(format_summary(run.summary))
    print(format_playback(run.results, args.per_stream))
    for result in run.results:
        if not result.ok:
            print(f"request {result.index}: {result.status} {result.error}", file=sys.stderr)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as file:
            json.dump({"summary": asdict(run.summary), "results": [asdict(r) for r in run.results]}, file, indent=1)
    return 0 if run.summary.errors == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
