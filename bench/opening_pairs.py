"""What a first sentence of ordinary length loses when its opening is spoken on its own:
`python -m bench.opening_pairs [--count 100]`.

`bench.opening` scores a few dozen written sentences, and DNSMOS moves by up to 0.3 between one
sentence and the next, so a mean over them cannot tell a loss of 0.02 from none. Here each sentence
is its own control: an opening clause and a main clause, paired from two fixed lists (a seeded
shuffle, so every run speaks the same sentences), are spoken whole and as the gateway speaks a first
sentence that starts alone with the default opening of 96 ids, from 1.5 times that on
(`TextFrontend.chunk_sentences` with `first_max_ids` and `eager_opening`; beside other streams the
cut starts at twice: the opening planned with a few ids of the next words, the rest as a part of
the whole sentence), and the paired
differences give a mean with its standard error. A sentence the front end leaves whole is counted
apart. Made as the workers make them (`bench.quality.served_audio`), on one thread.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
from collections.abc import Sequence
from typing import Final

import torch

from bench.opening import MAX_SENTENCE_IDS, spoken
from bench.quality import VOICE_SAMPLE_RATE_HZ, dnsmos_scores
from libs.synthesis.options import DEFAULT_OPENING_MAX_IDS
from libs.text.frontend import TextFrontend
from libs.text.phoneme_ids import load_phoneme_id_map
from libs.voice.assets import default_voice_assets
from libs.voice.engine import AcousticEngine, VocoderEngine

OPENERS: Final = (
    "After the long winter", "Early on Tuesday morning", "When the bell finally rang", "As the ferry left the harbour",
    "Before anyone could answer", "In the middle of the night", "Once the guests had gone home", "Although the road was icy",
    "By the end of the summer", "If the weather holds tomorrow", "While the kettle was boiling", "Just before the lights went out",
    "At the top of the hill", "Since the bakery closed", "Without saying a word", "During the second half of the game",
)  # fmt: skip
MAINS: Final = (
    "the old man walked slowly to the corner shop for a loaf of bread.", "she wrote a short letter to her cousin in the north.",
    "we found a small wooden box buried under the apple tree.", "the children ran down to the beach to look for crabs.",
    "the manager asked everyone to meet in the kitchen at noon.", "a thin grey cat climbed onto the roof of the shed.",
    "the farmer counted his sheep twice before closing the gate.", "my brother decided to repaint the front door a bright green.",
    "the train to the city was delayed by almost an hour.", "our neighbours invited us over for tea and cake.",
)  # fmt: skip
SEED: Final = 7
DEFAULT_COUNT: Final = 100


def sentences(count: int) -> list[str]:
    """`count` sentences of an opening clause and a main clause (at most len(OPENERS) x len(MAINS))."""
    pairs = [(opener, main) for opener in OPENERS for main in MAINS]
    random.Random(SEED).shuffle(pairs)
    return [f"{opener}, {main}" for opener, main in pairs[:count]]


def run(count: int) -> str:
    torch.set_num_threads(1)
    acoustic, vocoder = AcousticEngine.load_default(), VocoderEngine.load_default()
    # The sentences (149 to 215 ids) are cut as for a stream that starts alone (eager_opening).
    frontend = TextFrontend(load_phoneme_id_map(default_voice_assets().config_path), max_phoneme_ids=MAX_SENTENCE_IDS)
    differences, lengths, whole_count = [], [], 0
    for text in sentences(count):
        chunk = frontend.chunks(text)[0]
        (whole,) = frontend.chunk_sentences(chunk)
        units = frontend.chunk_sentences(chunk, first_max_ids=DEFAULT_OPENING_MAX_IDS, eager_opening=True)
        if len(units) == 1:
            whole_count += 1
            continue
        scores = [dnsmos_scores(spoken(acoustic, vocoder, spoken_as), VOICE_SAMPLE_RATE_HZ)[0] for spoken_as in ([whole], units)]
        differences.append(scores[1] - scores[0])
        lengths.append(len(whole.phoneme_ids))
        print(f"[bench-opening-pairs] {len(differences)} of {count}: {differences[-1]:+.3f} ({len(whole.phoneme_ids)} ids)", file=sys.stderr, flush=True)
    if not differences:
        return f"none of {count} first sentences was cut with an opening of {DEFAULT_OPENING_MAX_IDS} ids\n"
    mean = statistics.mean(differences)
    error = statistics.stdev(differences) / len(differences) ** 0.5 if len(differences) > 1 else float("nan")
    return (
        f"{len(differences)} first sentences of an opening clause and a main clause ({min(lengths)} to {max(lengths)} phoneme ids),"
        f" spoken whole and with their opening of at most {DEFAULT_OPENING_MAX_IDS} ids spoken on its own: DNSMOS OVRL of"
        f" the cut less the whole's, mean {mean:+.4f}, standard error {error:.4f} (95% interval {mean - 1.96 * error:+.4f}"
        f" to {mean + 1.96 * error:+.4f}); worse in {sum(difference < 0 for difference in differences)} of"
        f" {len(differences)}; {whole_count} more left whole.\n"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.opening_pairs", description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=DEFAULT_COUNT, help=f"sentences (at most {len(OPENERS) * len(MAINS)})")
    args = parser.parse_args(argv)
    if not 2 <= args.count <= len(OPENERS) * len(MAINS):
        parser.error(f"--count must be within 2..{len(OPENERS) * len(MAINS)}")
    print(run(args.count))
    return 0


if __name__ == "__main__":
    sys.exit(main())
