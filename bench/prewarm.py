"""The mel cache's hit rate on a Zipf-distributed sentence workload, without and with promotion, and
the cache's memory per hour of audio.

    python -m bench.prewarm --sentences 300 --zipf 1.1 --duration-s 180 --cache-ttl-s 20 --out bench/prewarm.md

Each mode runs on a fresh mesh (empty Redis): `--clients` clients send single-sentence Synthesize
requests for `--duration-s`, each sentence drawn from a fixed vocabulary with probability
proportional to 1 / rank^zipf. The hit rate is the live requests' (the warmer's own lookups, one per
sentence it synthesises, are taken out). A short TTL stands for a cache under memory pressure: what
is not asked for again soon is gone.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import redis

from bench.mesh import BenchMesh
from bench.report import run_heading
from bench.texts import LONG, split_sentences, unique_variants
from libs.audio.mel import DEFAULT_HOP_LENGTH as HOP_LENGTH
from libs.cache.codec import decode_mel
from libs.pb.tts.v1 import tts_pb2, tts_pb2_grpc

VOICE_RATE_HZ = 22050


def vocabulary(count: int) -> list[str]:
    sentences: list[str] = []
    number = 700_000
    while len(sentences) < count:
        sentences += split_sentences(unique_variants(LONG, 1, number)[0])
        number += 9
    return sentences[:count]


def zipf_probabilities(count: int, exponent: float) -> np.ndarray:
    weights = 1.0 / np.arange(1, count + 1) ** exponent
    return weights / weights.sum()


def run_mode(args: argparse.Namespace, promote_after: int, sentences: list[str]) -> dict[str, Any]:
    env = {
        "TTS_JOB_RUNNERS": "0", "TTS_CACHE_TTL_S": str(args.cache_ttl_s), "TTS_PROMOTE_AFTER": str(promote_after),
        "TTS_PROMOTE_WINDOW_S": str(args.window_s), "TTS_REALTIME_HEADROOM": "0",
    }  # fmt: skip
    probabilities = zipf_probabilities(len(sentences), args.zipf)
    with tempfile.TemporaryDirectory() as logs:
        mesh = BenchMesh(log_dir=Path(logs), env=env, secure=False).start()
        try:
            stop = threading.Event()
            sent = [0] * args.clients
            errors: list[str] = []

            def client(index: int) -> None:
                rng = np.random.default_rng(1000 + index)
                with grpc.insecure_channel(mesh.gateway_address) as channel:
                    stub = tts_pb2_grpc.TextToSpeechStub(channel)
                    while not stop.is_set():
                        text = sentences[int(rng.choice(len(sentences), p=probabilities))]
                        try:
                            for _ in stub.Synthesize(tts_pb2.SynthesizeRequest(text=text), timeout=60):
                                pass
                            sent[index] += 1
                        except grpc.RpcError as error:
                            errors.append(error.code().name)

            threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(args.clients)]
            for thread in threads:
                thread.start()
            time.sleep(args.duration_s)
            stop.set()
            for thread in threads:
                thread.join()
            metrics = mesh.metrics("gateway")
            hits = metrics.get('tts_gateway_cache_operations_total{outcome="hit"}', 0.0)
            misses = metrics.get('tts_gateway_cache_operations_total{outcome="miss"}', 0.0)
            warmed = metrics.get('tts_prewarm_sentences_total{action="synthesised"}', 0.0)
            live_misses = max(0.0, misses - warmed)
            memory = cache_memory(mesh)
        finally:
            mesh.stop()
    return {
        "promote_after": promote_after, "requests": sum(sent), "errors": len(errors), "hits": hits,
        "live_misses": live_misses, "warmer_syntheses": warmed, "hit_rate": hits / (hits + live_misses) if hits + live_misses else 0.0,
        **memory,
    }  # fmt: skip


def cache_memory(mesh: BenchMesh) -> dict[str, float]:
    """Redis memory of the cached mels and heads, and the audio they hold."""
    assert mesh.redis is not None
    client = redis.Redis(port=mesh.redis.config.port)
    memory_bytes = 0
    audio_s = 0.0
    entries = 0
    for key in client.scan_iter(match="tts:mel:*", count=500):
        value = client.get(key)
        if value is None:
            continue
        entries += 1
        audio_s += decode_mel(value).frame_count * HOP_LENGTH / VOICE_RATE_HZ
        memory_bytes += client.memory_usage(key) or 0
        memory_bytes += client.memory_usage(key.replace(b"tts:mel:", b"tts:head:")) or 0
    return {
        "cached_sentences": entries, "cached_audio_s": audio_s,
        "cache_mib_per_audio_hour": memory_bytes / 2**20 / (audio_s / 3600) if audio_s else float("nan"),
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sentences", type=int, default=300)
    parser.add_argument("--zipf", type=float, default=1.1)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--duration-s", type=float, default=180.0)
    parser.add_argument("--cache-ttl-s", type=int, default=20)
    parser.add_argument("--promote-after", type=int, default=3)
    parser.add_argument("--window-s", type=float, default=60.0)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    sentences = vocabulary(args.sentences)
    results = [run_mode(args, 0, sentences), run_mode(args, args.promote_after, sentences)]
    for result in results:
        print(json.dumps(result), flush=True)
    if args.out is not None:
        args.out.write_text(f"{run_heading('Prewarming', 'make bench-jobs')}\n\n{markdown(args, results)}", encoding="utf-8")
    return 0


def markdown(args: argparse.Namespace, results: list[dict[str, Any]]) -> str:
    lines = [
        f"Zipf {args.zipf} over {args.sentences} sentences, {args.clients} clients for {args.duration_s:.0f} s, cache TTL {args.cache_ttl_s} s:",
        "",
        "| promotion | requests | live hit rate | warmer syntheses | cache MiB per hour of audio |",
        "|---|---|---|---|---|",
    ]
    for result in results:
        mode = f"after {result['promote_after']} in {args.window_s:.0f} s" if result["promote_after"] else "off"
        lines.append(
            f"| {mode} | {result['requests']} | {100 * result['hit_rate']:.1f} % | {result['warmer_syntheses']:.0f} | "
            f"{result['cache_mib_per_audio_hour']:.0f} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
