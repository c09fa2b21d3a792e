"""A worker gives back what one large request took: after a sentence of 3,000 phoneme ids the
onnxruntime front end's arena hands its unused memory back, instead of holding the largest call's
memory for the rest of the process's life (it kept ~375 MiB more before).

The RSS is read after the C heap's free pages go back, as a worker gives them back a moment after
each stream: what glibc keeps for reuse depends on what this process freed before (its mmap
threshold rises with each large free), which the arena does not decide."""

from __future__ import annotations

import torch

from libs.models.onnx_encoder import OnnxFrontEnd
from libs.models.piper_import import PiperVoiceModels
from libs.serving.memory import release_free_memory

LARGE_IDS = 3_000
KEPT_LIMIT_MIB = 150


def _rss_mib() -> float:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def _run(front_end: OnnxFrontEnd, tokens: int) -> None:
    generator = torch.Generator().manual_seed(tokens)
    ids = torch.randint(3, 100, (1, tokens), generator=generator)
    front_end.run(ids, torch.randn(1, 2, tokens, generator=generator))


def test_the_front_end_hands_back_a_large_sentences_memory(voice: PiperVoiceModels) -> None:
    front_end = OnnxFrontEnd.load(voice.acoustic)
    for _ in range(3):
        _run(front_end, 100)  # the arena's steady state for ordinary sentences
    release_free_memory()
    before_mib = _rss_mib()
    _run(front_end, LARGE_IDS)
    release_free_memory()  # as the worker does once the stream ends
    kept_mib = _rss_mib() - before_mib
    assert kept_mib < KEPT_LIMIT_MIB, f"{kept_mib:.0f} MiB kept after one sentence of {LARGE_IDS} ids"
    _run(front_end, 100)  # and ordinary sentences still run
