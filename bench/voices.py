"""What a worker's voices cost in memory, and whether its budget holds (`make bench-voices`).

Four voices are made from the default voice under other names (each a full model of its own: the
worker shares nothing between voices), and each worker kind loads them in a child process of its
own, as a worker's shelf does, measuring resident memory:

- one voice, then four: does four cost at most 1.2 x four times one?
- a budget of 3.5 voices and twelve streams' worth of voices asked for in a least-recently-used-
  hostile order: how many loads and evictions, the most the shelf accounts for, and the most the
  process really grew by (after each load, and at its peak) against the budget.
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from libs.voice.assets import default_voice_assets
from libs.voice.catalogue import TRAINED_FILES

MIB = 1 << 20
NAMES = [f"en_US-copy{index}-medium" for index in range(1, 6)]
ORDER = [0, 1, 2, 3, 0, 4, 1, 2, 3, 4, 0, 1]
"""Voices asked for, by index: the fifth evicts the least recently used each time the budget is full."""


def make_voices(folder: Path) -> None:
    """Five voice folders, each the default voice's files under another name (links, not copies)."""
    assets = default_voice_assets()
    for name in NAMES:
        voice_dir = folder / name
        voice_dir.mkdir()
        (voice_dir / f"{name}.onnx").symlink_to(assets.onnx_path)
        config = json.loads(assets.config_path.read_text(encoding="utf-8"))
        (voice_dir / f"{name}.onnx.json").write_text(json.dumps(config), encoding="utf-8")
        for file_name in TRAINED_FILES:
            (voice_dir / file_name).symlink_to(assets.trained_dir / file_name)


def child(kind: str, folder: Path) -> dict:
    """Runs in its own process: the measurements of one worker kind."""
    import torch

    from libs.serving.admission import process_rss_mb
    from libs.serving.voice_shelf import FIRST_GUESS_BYTES_PER_MODEL_BYTE, VoiceShelf, hand_back_free_memory
    from libs.voice.catalogue import VoiceCatalogue
    from libs.voice.engine import AcousticEngine, VocoderEngine

    torch.set_num_threads(1)
    engine_type = AcousticEngine if kind == "acoustic" else VocoderEngine

    def load(entry):  # type: ignore[no-untyped-def]
        engine = engine_type.load(entry.assets)
        engine.warm_up()
        return engine

    catalogue = VoiceCatalogue.scan(folder)
    # A first load warms the caches every later one shares (the converted model on disk, the graphs).
    warm = VoiceShelf(catalogue, load, first_guess_per_model_byte=FIRST_GUESS_BYTES_PER_MODEL_BYTE[kind])
    warm.load(NAMES[4])
    warm.close()
    del warm
    free = VoiceShelf(catalogue, load)
    hand_back_free_memory()  # the warm-up voice's memory goes back before the baseline is read
    base = process_rss_mb()
    free.load(NAMES[0])
    one = process_rss_mb() - base
    for name in NAMES[1:4]:
        free.load(name)
    four = process_rss_mb() - base
    free.close()
    del free

    shelf = VoiceShelf(catalogue, load, budget_bytes=int(3.5 * one * MIB), first_guess_per_model_byte=FIRST_GUESS_BYTES_PER_MODEL_BYTE[kind])
    hand_back_free_memory()
    base = process_rss_mb()
    with open("/proc/self/clear_refs", "w", encoding="ascii") as clear:
        clear.write("5")  # the peak below is this part's alone
    grown_after, accounted = [], []
    for index in ORDER:
        shelf.load(NAMES[index])
        grown_after.append(process_rss_mb() - base)
        accounted.append(shelf.used_bytes() / MIB)
    with open("/proc/self/status", encoding="ascii") as status:
        peak = next(int(line.split()[1]) / 1024 for line in status if line.startswith("VmHWM"))
    return {
        "one_mib": one,
        "four_mib": four,
        "budget_mib": 3.5 * one,
        "loads": shelf.loads,
        "evictions": shelf.evictions,
        "held_at_end": len(shelf.loaded()),
        "max_accounted_mib": max(accounted),
        "max_grown_after_load_mib": max(grown_after),
        "peak_rss_mib": peak,
        "base_rss_mib": base,
    }


def report(results: dict[str, dict]) -> str:
    lines = [
        "# Voice memory of a worker (`make bench-voices`)",
        "",
        "Each voice is the default voice's model under another name; resident memory of a child process per worker kind.",
        "",
        "| worker | one voice | four voices | four / (4 x one) | budget (3.5 voices) | loads / evictions (12 asks, 5 voices) | most accounted | most grown after a load | peak over start |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for kind, row in results.items():
        lines.append(
            f"| {kind} | {row['one_mib']:.0f} MiB | {row['four_mib']:.0f} MiB | {row['four_mib'] / (4 * row['one_mib']):.2f}x "
            f"| {row['budget_mib']:.0f} MiB | {row['loads']} / {row['evictions']} | {row['max_accounted_mib']:.0f} MiB "
            f"| {row['max_grown_after_load_mib']:.0f} MiB | {row['peak_rss_mib'] - row['base_rss_mib']:.0f} MiB |"
        )
    lines += [
        "",
        "Most grown after a load: the process's resident memory over what it was before the first voice, after each",
        "load (evictions included); the peak also counts what a load holds for a moment (its model converted and its",
        "graphs checked before the least recently used voice's memory is handed back).",
        "",
        f"CPU: {platform.processor() or platform.machine()}, Python {platform.python_version()}.",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None, help="write the table here as well")
    parser.add_argument("--child", nargs=2, metavar=("KIND", "FOLDER"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child[0], Path(args.child[1]))))
        return 0
    folder = Path(tempfile.mkdtemp(prefix="voices-bench-"))
    try:
        make_voices(folder)
        results = {}
        for kind in ("acoustic", "vocoder"):
            done = subprocess.run(
                [sys.executable, "-m", "bench.voices", "--child", kind, str(folder)], capture_output=True, text=True, check=True
            )
            results[kind] = json.loads(done.stdout.strip().splitlines()[-1])
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    text = report(results)
    print(text)
    if args.out:
        args.out.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
