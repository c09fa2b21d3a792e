"""What phonemising in child processes adds to first audio: the gateway's text side with espeak-ng
in its own process (one text thread, as before the pool) against the pool of child processes.

For each text: the time from a Synthesize's text to its first chunk's sentences (normalise, cut,
phonemise the first chunk), in-process on a thread and through `TextSide` with a `PhonemizerPool`,
interleaved, median (and p90) of many runs. `python -m bench.text_process_hop [--runs N]`.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Final

from libs.synthesis.text_side import TextLimits, TextSide
from libs.text.frontend import TextFrontend
from libs.text.phonemizer_pool import PhonemizerPool
from libs.voice.registry import default_registry

TEXTS: Final = {
    "short": "Hello there, how are you today?",
    "sentence": "The quick brown fox jumps over the lazy dog, and then it runs off into the woods. It is late.",
    "paragraph": (
        "Streaming speech synthesis turns text into audio while the text is still arriving. The first "
        "sentence is spoken as soon as it is complete, and the rest follow without a gap. "
    )
    * 6,
}


async def _first_in_process(executor: ThreadPoolExecutor, frontend: TextFrontend, text: str) -> float:
    started = time.perf_counter()

    def first() -> object:
        chunks = frontend.chunks(text)
        return frontend.chunk_sentences(chunks[0])

    await asyncio.get_running_loop().run_in_executor(executor, first)
    return time.perf_counter() - started


async def _first_through_pool(text_side: TextSide, text: str) -> float:
    voice = default_registry().default
    started = time.perf_counter()
    sentences = await text_side.sentences(voice, text)
    elapsed = time.perf_counter() - started
    await sentences.aclose()
    return elapsed


async def measure(runs: int) -> dict[str, tuple[float, float, float, float]]:
    """Per text: (in-process median, pool median, in-process p90, pool p90), seconds."""
    voice = default_registry().default
    limits = TextLimits()
    pool = PhonemizerPool(limits.text_processes, limits.text_process_timeout_s)
    await pool.start()
    executor = ThreadPoolExecutor(1)
    try:
        text_side = TextSide(executor, 5000, limits, pool)
        await text_side.warm_up(voice)
        frontend = TextFrontend(
            voice.phoneme_id_map(), voice.espeak_voice, max_phoneme_ids=limits.max_sentence_ids
        )
        await _first_in_process(executor, frontend, "Ready.")
        results = {}
        for name, text in TEXTS.items():
            local, pooled = [], []
            for _ in range(runs):
                local.append(await _first_in_process(executor, frontend, text))
                pooled.append(await _first_through_pool(text_side, text))
            results[name] = (
                statistics.median(local),
                statistics.median(pooled),
                statistics.quantiles(local, n=10)[-1],
                statistics.quantiles(pooled, n=10)[-1],
            )
        return results
    finally:
        await pool.close()
        executor.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=300)
    runs = parser.parse_args().runs
    print(f"first chunk's sentences, {runs} runs each: in-process thread vs child process (ms)")
    for name, (local, pooled, local_p90, pooled_p90) in asyncio.run(measure(runs)).items():
        print(
            f"{name:10s} median {local * 1e3:6.2f} vs {pooled * 1e3:6.2f} (+{(pooled - local) * 1e3:.2f}); "
            f"p90 {local_p90 * 1e3:6.2f} vs {pooled_p90 * 1e3:6.2f}"
        )


if __name__ == "__main__":
    main()
