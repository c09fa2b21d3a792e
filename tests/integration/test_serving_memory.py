"""Freed memory goes back to the operating system once streams end: `malloc_trim` gives back heap
pages glibc would otherwise keep, and a process trims once a moment after its streams end, not once
per stream."""

from __future__ import annotations

import asyncio

import numpy as np

from libs.serving.admission import process_rss_mb
from libs.serving.memory import MemoryReleaser, release_free_memory

BLOCK_BYTES = 64 * 1024  # below glibc's mmap threshold: these come from the heap, not from mmap
HEAP_MB = 256


def test_trimming_gives_back_a_heap_full_of_freed_blocks() -> None:
    blocks = [np.ones(BLOCK_BYTES, dtype=np.uint8) for _ in range(HEAP_MB * 1024 * 1024 // BLOCK_BYTES)]
    pin = np.ones(BLOCK_BYTES, dtype=np.uint8)  # allocated last, it keeps glibc from shrinking the heap's top itself
    del blocks
    held_mb = process_rss_mb()
    assert release_free_memory()
    freed_mb = held_mb - process_rss_mb()
    print(f"\nRSS {held_mb:.0f} MB with {HEAP_MB} MB of freed blocks; {freed_mb:.0f} MB given back by the trim")
    assert freed_mb > HEAP_MB / 2
    assert pin.sum() == BLOCK_BYTES


def test_streams_that_end_together_share_one_trim_and_trims_are_spaced() -> None:
    async def scenario() -> list[int]:
        releaser = MemoryReleaser(delay_s=0.05, interval_s=1.5)
        for _ in range(5):
            releaser.stream_ended()
        await asyncio.sleep(0.5)
        after_burst = releaser.trims
        releaser.stream_ended()  # within the interval: waits for the rest of it
        await asyncio.sleep(0.3)
        too_soon = releaser.trims
        await asyncio.sleep(2.0)
        return [after_burst, too_soon, releaser.trims]

    assert asyncio.run(scenario()) == [1, 1, 2]
