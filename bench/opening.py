"""A long first sentence spoken whole, and with its opening spoken first: what the cut costs in quality
and what it saves before the first audio. `python -m bench.opening`.

Its listener waits for a first sentence's first audio, and that waits for the sentence's whole plan,
so the gateway speaks a long first sentence's opening on its own (`TextFrontend.chunk_sentences` with
`first_max_ids`: the opening's clauses, then the rest as a part of the whole sentence's plan, or, for
one without such clauses, pieces planned apart). On long sentences written for this benchmark
(bench/data/long_first_sentences.txt, never trained on), each is made the way the workers make it
(`bench.quality.served_audio`: chunks, 40 ms slices in float16, a vocoder stream) whole, and as its
parts played back to back, and scored with DNSMOS (`bench.quality.dnsmos_scores`); then the same for
first sentences of ordinary length (bench/data/ordinary_first_sentences.txt), which the default
opening cuts for a stream that starts alone (`eager_opening`, from 1.5 times its ids) and leaves whole
beside others. Both are cut as for a stream alone, the listener whose first audio nothing else
slows. The first audio is the CPU time of the plan, first chunk and first vocoder step of the first unit, alone on one
thread, as the cost model weighs it.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Final

import numpy as np
import torch

from bench.quality import VOICE_SAMPLE_RATE_HZ, dnsmos_scores, served_audio
from bench.report import machine_header, run_heading
from libs.text.frontend import Sentence, TextFrontend
from libs.text.phoneme_ids import load_phoneme_id_map
from libs.voice.assets import default_voice_assets
from libs.voice.engine import AcousticEngine, SynthesisParams, VocoderEngine
from libs.voice.inputs import SynthesisInputs

SENTENCES: Final = Path(__file__).resolve().parent / "data" / "long_first_sentences.txt"
ORDINARY_SENTENCES: Final = Path(__file__).resolve().parent / "data" / "ordinary_first_sentences.txt"
"""First sentences of ordinary length with a clause boundary: cut by the default opening for a stream
alone (libs.text.long_sentences.EAGER_PART_OPENING_AFTER), spoken whole beside others."""
DEFAULT_OPENINGS: Final = (64, 96)
"""Opening lengths (phoneme ids) to compare with the whole sentence."""
REFERENCE_TEXT: Final = "The train is late."
"""The short sentence first audios are held against: 41 phoneme ids, about the 40 of the target."""
MAX_SENTENCE_IDS: Final = 400


def texts(path: Path = SENTENCES) -> list[str]:
    return [line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip() and not line.startswith("#")]


def first_audio_cpu_s(acoustic: AcousticEngine, vocoder: VocoderEngine, sentence: Sentence) -> float:
    """CPU seconds, on this thread, from a sentence's ids to its first audio: plan, first chunk, first vocoder step."""
    started = time.thread_time()
    ids = sentence.phoneme_ids
    plan = acoustic.plan(list(ids), SynthesisParams(), seed=SynthesisInputs("bench", "opening", tuple(ids), SynthesisParams()).seed())
    part = acoustic.spoken_part(plan, *(sentence.spoken_ids or (0, None)))
    chunk = next(acoustic.mel_chunks(part.plan, part.skip_frames))
    stream = vocoder.open_stream()
    stream.add(chunk.astype(np.float16).astype(np.float32))
    if stream.step_ready():
        stream.step()
    return time.thread_time() - started


def spoken(acoustic: AcousticEngine, vocoder: VocoderEngine, units: Sequence[Sentence]) -> np.ndarray:
    """The units (sentences, or parts of one) made as the mesh makes them, back to back."""
    return np.concatenate(
        [
            served_audio(acoustic, vocoder, list(unit.phoneme_ids), SynthesisInputs("bench", "opening", unit.phoneme_ids).seed(), unit.spoken_ids)
            for unit in units
        ]
    )


def run(openings: Sequence[int]) -> str:
    """The tables of both sets of first sentences: long ones, and ones of ordinary length."""
    torch.set_num_threads(1)
    acoustic, vocoder = AcousticEngine.load_default(), VocoderEngine.load_default()
    acoustic.warm_up()
    vocoder.warm_up()
    frontend = TextFrontend(load_phoneme_id_map(default_voice_assets().config_path), max_phoneme_ids=MAX_SENTENCE_IDS)
    reference = frontend.sentences(REFERENCE_TEXT)[0]
    reference_s = statistics.median(first_audio_cpu_s(acoustic, vocoder, reference) for _ in range(5))
    return "\n".join(
        table(acoustic, vocoder, frontend, texts(path), openings, kind, (len(reference.phoneme_ids), reference_s))
        for path, kind in ((SENTENCES, "long"), (ORDINARY_SENTENCES, "ordinary"))
    )


def table(
    acoustic: AcousticEngine,
    vocoder: VocoderEngine,
    whole_frontend: TextFrontend,
    sentences: Sequence[str],
    openings: Sequence[int],
    kind: str,
    reference: tuple[int, float],
) -> str:
    """One set of first sentences spoken whole and cut for each opening length: DNSMOS, and first-audio
    CPU against `reference` (the short sentence's ids and first-audio CPU seconds)."""
    reference_ids, reference_s = reference
    rows: dict[str, list[tuple[float, float, float]]] = {"whole": []}
    cuts: dict[int, list[int]] = {opening: [] for opening in openings}
    first_audio: dict[str, list[float]] = {"whole": []}
    ids_of_first: list[int] = []
    cut_counts: dict[int, int] = dict.fromkeys(openings, 0)
    for text in sentences:
        whole = whole_frontend.chunk_sentences(whole_frontend.chunks(text)[0])[0]
        ids_of_first.append(len(whole.phoneme_ids))
        rows["whole"].append(dnsmos_scores(spoken(acoustic, vocoder, [whole]), VOICE_SAMPLE_RATE_HZ))
        first_audio["whole"].append(first_audio_cpu_s(acoustic, vocoder, whole))
        for opening in openings:
            units = whole_frontend.chunk_sentences(whole_frontend.chunks(text)[0], first_max_ids=opening, eager_opening=True)
            cuts[opening].append(len(units[0].phoneme_ids))
            cut_counts[opening] += len(units) > 1
            rows.setdefault(f"opening <= {opening} ids", []).append(dnsmos_scores(spoken(acoustic, vocoder, units), VOICE_SAMPLE_RATE_HZ))
            first_audio.setdefault(f"opening <= {opening} ids", []).append(first_audio_cpu_s(acoustic, vocoder, units[0]))
        _log(f"{kind}: {len(ids_of_first)} of {len(sentences)}: {len(whole.phoneme_ids)} ids")
    whole_ovrl = statistics.mean(score[0] for score in rows["whole"])
    lines = [
        f"{len(ids_of_first)} {kind} first sentences ({min(ids_of_first)} to {max(ids_of_first)} phoneme ids); DNSMOS of the"
        f" sentence spoken whole and with its opening first (mean; higher is better); first audio as CPU on one"
        f" thread (plan, first chunk, first vocoder step of the first unit), against a {reference_ids}-id"
        f" sentence's {reference_s * 1000:.1f} ms.",
        "",
        "| spoken | OVRL | SIG | BAK | OVRL against whole | sentences cut | first unit (ids, median) | first audio CPU (median) | against the short sentence |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for label, scores in rows.items():
        ovrl, sig, bak = (statistics.mean(score[index] for score in scores) for index in range(3))
        opening = None if label == "whole" else int(label.split()[2])
        first_ids = statistics.median(ids_of_first if opening is None else cuts[opening])
        cut = "-" if opening is None else f"{cut_counts[opening]} of {len(sentences)}"
        cpu = statistics.median(first_audio[label])
        lines.append(
            f"| {label} | {ovrl:.3f} | {sig:.3f} | {bak:.3f} | {ovrl - whole_ovrl:+.3f} | {cut} | {first_ids:.0f} | {cpu * 1000:.1f} ms | {cpu / reference_s:.2f} x |"
        )
    return "\n".join(lines) + "\n"


def _log(message: str) -> None:
    print(f"[bench-opening] {message}", file=sys.stderr, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.opening", description=__doc__.split("\n\n")[0])
    parser.add_argument("--openings", default=",".join(str(o) for o in DEFAULT_OPENINGS), help="opening lengths in phoneme ids")
    parser.add_argument("--out", default=None, metavar="PATH", help="also write the table here")
    args = parser.parse_args(argv)
    table = run([int(o) for o in args.openings.split(",")])
    print(table)
    if args.out:
        heading = run_heading("A long first sentence's opening", "make bench-quality")
        Path(args.out).write_text(f"{heading}\n\n{machine_header()}\n{table}", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
