"""Model steps that stand for real work, for measuring what each stage costs on this machine at
start-up (libs.scheduling.calibration): sentences of several lengths through the acoustic engine's
plan and chunks, and a sentence's mel through the vocoder's steps. The numbers computed are thrown
away; only the time they take is kept. The same steps settle a CPU worker's "auto" precision and
how wide a CPU vocoder's slices are (`MeasuredPrecision`).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import platform
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Final, TypeVar

import numpy as np

from libs.voice.inputs import SynthesisParams
from libs.voice.precision import CPU_PRECISIONS, cheaper_precision, cpu_model, measures_precision, resolve_precision

EngineT = TypeVar("EngineT")

_log = logging.getLogger(__name__)

STAGE_PLAN: Final = "plan"
STAGE_CHUNK: Final = "chunk"

# The phoneme ids of an ordinary English sentence as the default voice reads it (BOS, a pad after
# each id, EOS): sentences of any length are cut from it, so their durations are a real sentence's.
SPEECH_IDS: Final = (
    1, 0, 41, 0, 59, 0, 3, 0, 23, 0, 35, 0, 120, 0, 74, 0, 23, 0, 3, 0, 15, 0, 88, 0, 120, 0, 14, 0, 100, 0, 26, 0, 3,
    0, 19, 0, 120, 0, 51, 0, 122, 0, 23, 0, 31, 0, 3, 0, 17, 0, 108, 0, 120, 0, 102, 0, 25, 0, 28, 0, 31, 0, 3, 0, 121,
    0, 27, 0, 100, 0, 34, 0, 60, 0, 3, 0, 41, 0, 59, 0, 3, 0, 24, 0, 120, 0, 18, 0, 74, 0, 38, 0, 21, 0, 3, 0, 17, 0,
    120, 0, 51, 0, 122, 0, 66, 0, 8, 0, 3, 0, 39, 0, 26, 0, 17, 0, 3, 0, 41, 0, 120, 0, 61, 0, 26, 0, 3, 0, 74, 0, 32,
    0, 3, 0, 88, 0, 120, 0, 102, 0, 26, 0, 38, 0, 3, 0, 19, 0, 120, 0, 51, 0, 122, 0, 88, 0, 3, 0, 50, 0, 35, 0, 120, 0,
    18, 0, 74, 0, 3, 0, 121, 0, 74, 0, 26, 0, 32, 0, 100, 0, 3, 0, 41, 0, 59, 0, 3, 0, 23, 0, 35, 0, 120, 0, 14, 0, 74,
    0, 59, 0, 32, 0, 3, 0, 66, 0, 88, 0, 120, 0, 21, 0, 122, 0, 26, 0, 3, 0, 19, 0, 120, 0, 54, 0, 122, 0, 88, 0, 74, 0,
    31, 0, 32, 0, 3, 0, 35, 0, 121, 0, 61, 0, 88, 0, 3, 0, 26, 0, 120, 0, 27, 0, 100, 0, 15, 0, 51, 0, 122, 0, 17, 0,
    21, 0, 3, 0, 23, 0, 39, 0, 26, 0, 3, 0, 19, 0, 120, 0, 14, 0, 74, 0, 26, 0, 17, 0, 3, 0, 74, 0, 92, 0, 3, 0, 50, 0,
    66, 0, 120, 0, 61, 0, 26, 0, 10, 0, 2,
)  # fmt: skip
SENTENCE_IDS: Final = (25, 61, 121, 201)
"""Lengths of the calibration sentences (phoneme ids): a short phrase to a long sentence."""
VOCODER_MEL_FRAMES: Final = 300
"""Frames of the calibration sentence the vocoder steps through (its schedule's steps and a last one)."""
PRECISION_ROUNDS: Final = 3
"""Rounds of the calibration steps per precision when a worker settles its precision, taken in turn
(fp32, bf16, fp32, ...) so that a slow spell of the machine falls on both; each keeps its cheapest."""
PRECISION_RECORD_FORMAT: Final = 1
"""Version of a recorded precision choice (part of its key: a new format measures again)."""
SLICE_MULTIPLES: Final = (1, 2, 4)
"""The slice widths a CPU vocoder measures, as multiples of the width its cache rule gives
(`libs.models.onnx_stream.slice_width`): the rule's width is the cheapest on some CPUs and not on
others (docs/ARCHITECTURE.md, "Exact streaming and resume"), and four times it still keeps a wide
step in parts a listener short of audio can wait between."""
SLICE_MARGIN: Final = 0.05
"""A width is kept over a narrower one only when the narrower costs more than the cheapest by more than
this share: between widths that cost the same within it, the narrower keeps the parts short."""


@dataclass(frozen=True)
class CalibrationStep:
    """One model step to time."""

    stage: str
    """The cost model's stage."""
    units: int
    """Its size: phoneme ids of a plan, frames of a chunk."""
    run: Callable[[], float]
    """Runs it; returns the audio seconds it made (a plan makes none itself)."""


def sentence_ids(length: int) -> list[int]:
    """A sentence of `length` phoneme ids cut from SPEECH_IDS (BOS, ids, EOS)."""
    body = list(SPEECH_IDS[1:-1])
    return [SPEECH_IDS[0], *body[: max(1, length - 2)], SPEECH_IDS[-1]]


def acoustic_steps(engine: Any) -> Iterator[CalibrationStep]:
    """The plan and chunk steps of sentences of SENTENCE_IDS lengths (`engine`: an AcousticEngine). A
    sentence's chunks are known once its plan has run: take the steps one at a time, running each
    before asking for the next."""
    frame_s = engine.hop_length / engine.sample_rate_hz
    params = SynthesisParams()
    for length in SENTENCE_IDS:
        ids = sentence_ids(length)
        planned: list[Any] = []

        def plan(ids: list[int] = ids, planned: list[Any] = planned) -> float:
            planned.append(engine.plan(ids, params, 0))
            return 0.0

        yield CalibrationStep(STAGE_PLAN, len(ids), plan)
        chunks = engine.mel_chunks(planned[0])
        for units in engine.step_frames(planned[0].frame_count):
            yield CalibrationStep(STAGE_CHUNK, units, lambda chunks=chunks: next(chunks).shape[1] * frame_s)


def vocoder_steps(engine: Any, seed: int = 0) -> Iterator[CalibrationStep]:
    """The steps of one sentence's mel through `engine` (a VocoderEngine); the mel is noise of the
    range real mel has (the vocoder's work does not depend on the values)."""
    mel = np.random.default_rng(seed).normal(-5.0, 2.0, (engine.n_mels, VOCODER_MEL_FRAMES)).astype(np.float32)
    stream = engine.open_stream()
    stream.add(mel)
    stream.end()
    while stream.step_ready():
        yield CalibrationStep(STAGE_CHUNK, stream.next_step_frames, lambda: len(stream.step()) / engine.sample_rate_hz)


def run_steps(steps: Iterable[CalibrationStep]) -> tuple[float, float]:
    """Run every step of `steps`: (process CPU seconds, audio seconds made). Process CPU, all threads:
    a model may spread a step over its own pool; measured at start-up, while the worker serves nothing."""
    started, audio_s = time.process_time(), 0.0
    for step in steps:
        audio_s += step.run()
    return time.process_time() - started, audio_s


def vocoder_cpu_s_per_audio_s(engine: Any, repeats: int = 1) -> float:
    """Process CPU seconds per audio second of a sentence's steps through `engine` (a warmed-up
    VocoderEngine) on one thread, the least of `repeats` runs. (The scheduler's calibration runs the
    same steps on every core at once, which reads about 10% dearer: a ratio of two tiers takes both
    from here.)"""
    return min(cpu_s / max(audio_s, 1e-9) for cpu_s, audio_s in (run_steps(vocoder_steps(engine)) for _ in range(repeats)))


class MeasuredPrecision:
    """A worker's engine settings with an "auto" precision settled on its first engine.

    On a CPU with native bf16 (`libs.voice.precision.measures_precision`) the first engine is loaded
    in fp32 and in bf16, each runs the calibration steps PRECISION_ROUNDS times, and the cheaper by
    `cheaper_precision` is kept; the engines of later voices take the same settings. The choice is
    recorded under `record_dir` for this machine (its CPU model and flags), torch, onnxruntime and the
    model, so the next worker of it on this machine starts without measuring and makes the same
    choice (a machine's workers restart often: a local mesh, a test suite); workers starting together
    wait for the first one's measurement (`_measuring_alone`). Elsewhere the settings are
    used as they are (a concrete precision, or "auto" as `resolve_precision` makes it).
    """

    def __init__(self, settings: Any, record_dir: Path | None = None) -> None:
        self.settings = settings
        """The engine settings (`libs.voice.runtime.EngineSettings`), concrete once settled."""
        self.cost_s: dict[str, float] = {}
        """What the calibration steps cost in each precision (CPU seconds, the cheapest round); empty
        when nothing was measured."""
        self.recorded = False
        """Whether the precision came from an earlier worker's record instead of a measurement."""
        self._record_dir = record_dir

    @property
    def served(self) -> str:
        """The arithmetic the engines run in: the settled precision, or "auto" made concrete where nothing
        is measured (`resolve_precision`)."""
        return resolve_precision(self.settings.precision, self.settings.device)

    def load(self, load: Callable[[Any], EngineT], steps: Callable[[EngineT], Iterable[CalibrationStep]], model: str) -> EngineT:
        """`load(settings)` (a warmed-up engine), in the precision these settings settle on; `steps`
        gives an engine's calibration steps, `model` names what is loaded (its kind and voice) for the record."""
        if not measures_precision(self.settings.precision, self.settings.device):
            return load(self.settings)
        record = self._record_path(model)
        with _measuring_alone(record):
            known = _read_record(record, "precision", CPU_PRECISIONS)
            if known is None:
                return self._measure_precision(load, steps, record)
        self.settings, self.recorded = replace(self.settings, precision=known), True
        _log.info("precision auto: %s, as measured before on this machine (%s)", known, record)
        return load(self.settings)

    def _measure_precision(self, load: Callable[[Any], EngineT], steps: Callable[[EngineT], Iterable[CalibrationStep]], record: Path) -> EngineT:
        """The engine in the precision whose calibration steps cost less here, that choice recorded at `record`."""
        engines = {"fp32": load(replace(self.settings, precision="fp32"))}
        cost_s = dict.fromkeys(CPU_PRECISIONS, float("inf"))
        try:
            engines["bf16"] = load(replace(self.settings, precision="bf16"))
            for _ in range(PRECISION_ROUNDS):
                for precision, engine in engines.items():
                    cost_s[precision] = min(cost_s[precision], run_steps(steps(engine))[0])
        except Exception:  # a precision that does not run here is not the cheaper one (an fp32 failure raises again below)
            _log.warning("precision auto: bf16 could not be loaded or measured here; serving fp32", exc_info=True)
            engines.pop("bf16", None)
            cost_s["fp32"] = run_steps(steps(engines["fp32"]))[0]
        chosen = cheaper_precision(cost_s)
        self.settings, self.cost_s = replace(self.settings, precision=chosen), cost_s
        _log.info(
            "precision auto: %s (calibration steps: fp32 %.1f ms, bf16 %.1f ms of CPU)",
            chosen, 1000 * cost_s["fp32"], 1000 * cost_s["bf16"],
        )  # fmt: skip
        _write_record(record, {"precision": chosen, "calibration_cpu_s": cost_s})
        return engines[chosen]

    def acoustic(self, assets: Any) -> Any:
        """The acoustic engine of `assets` (a VoiceAssets), warmed up, in these settings' precision."""
        from libs.voice.engine import AcousticEngine

        return self.load(lambda settings: _warmed(AcousticEngine.load(assets, settings=settings)), acoustic_steps, f"acoustic:{assets.name}")

    def vocoder(self, assets: Any) -> Any:
        """The vocoder engine of `assets`, warmed up, in these settings' precision, with its fast tier
        (`fast_tier`, None where the voice has none) loaded beside it in the same arithmetic; each in
        the slices measured cheaper here (`settle_slices`)."""
        from libs.voice.engine import VocoderEngine

        engine = self.load(lambda settings: _warmed(VocoderEngine.load(assets, settings=settings)), vocoder_steps, f"vocoder:{assets.name}")
        self.settle_slices(engine, f"vocoder:{assets.name}")
        fast = VocoderEngine.load_fast(assets, settings=self.settings)
        if fast is not None:
            self.settle_slices(_warmed(fast), f"vocoder-fast:{assets.name}")
        engine.fast_tier = fast
        return engine

    def settle_slices(self, engine: Any, model: str) -> None:
        """Run `engine`'s wide steps (a warmed-up VocoderEngine whose steps run in slices) in the slice
        width that its calibration steps cost least in on this machine, among SLICE_MULTIPLES of its
        cache rule's (the narrowest within SLICE_MARGIN of the cheapest; PRECISION_ROUNDS rounds taken
        in turn). An engine loaded with a pinned width (`EngineSettings.slice_frames`) keeps it. The width is part of
        the model version, so it is recorded as a precision is, and workers starting together on a
        machine wait for the first one's measurement and take its choice: a machine's vocoders all run
        one version. An engine whose steps run whole is left so."""
        rule = engine.slice_frames
        if rule is None or self.settings.slice_frames:  # whole steps, or a width the engine was pinned to
            return
        widths = [rule * multiple for multiple in SLICE_MULTIPLES]
        record = self._record_path(f"slices:{model}")
        with _measuring_alone(record):
            known = _read_record(record, "slice_frames", widths)
            if known is not None:
                _log.info("%s: slices of %d frames, as measured before on this machine (%s)", model, known, record)
            else:
                cost_s = dict.fromkeys(widths, float("inf"))
                for _ in range(PRECISION_ROUNDS):
                    for width in widths:
                        engine.use_slice_frames(width)
                        cost_s[width] = min(cost_s[width], run_steps(vocoder_steps(engine))[0])
                known = narrowest_within(cost_s, SLICE_MARGIN)
                _log.info(
                    "%s: slices of %d frames (calibration steps: %s of CPU)",
                    model, known, ", ".join(f"{width} frames {1000 * cost:.1f} ms" for width, cost in cost_s.items()),
                )  # fmt: skip
                _write_record(record, {"slice_frames": known, "calibration_cpu_s": {str(width): cost for width, cost in cost_s.items()}})
        engine.use_slice_frames(known)

    def _record_path(self, model: str) -> Path:
        from libs.models.piper_import import default_cache_dir

        folder = self._record_dir if self._record_dir is not None else default_cache_dir() / "precision"
        key = hashlib.sha256(json.dumps([PRECISION_RECORD_FORMAT, model, *machine_identity()]).encode()).hexdigest()[:24]
        return folder / f"{key}.json"


def machine_identity() -> tuple[str, ...]:
    """What a precision measurement holds for: the CPU's model and flags, and the libraries that run the models."""
    import onnxruntime
    import torch

    cpu = cpu_model()
    return (platform.machine(), cpu.name, cpu.flags, torch.__version__, onnxruntime.__version__)


def narrowest_within(cost_s: dict[int, float], margin: float) -> int:
    """The narrowest slice width whose cost is within `margin` (a share) of the cheapest's."""
    cheapest = min(cost_s.values())
    return min(width for width, cost in cost_s.items() if cost <= cheapest * (1.0 + margin))


def _read_record(path: Path, name: str, allowed: Iterable[Any]) -> Any:
    """The choice `name` recorded at `path` when it is one of `allowed`, else None (no record, or not one of ours)."""
    try:
        chosen = json.loads(path.read_text()).get(name)
    except (OSError, ValueError, AttributeError):
        return None
    return chosen if chosen in list(allowed) else None


def _write_record(path: Path, body: dict[str, Any]) -> None:
    """Record a measured choice (written whole, then moved in place, so a reader never sees half of it); a
    folder that cannot be written only means the next worker measures again."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
        partial.write_text(json.dumps(body))
        os.replace(partial, path)
    except OSError as error:
        _log.info("%s not recorded (%s): the next start measures again", path.name, error)


@contextmanager
def _measuring_alone(record: Path) -> Iterator[None]:
    """Held while one process of this machine reads, measures and writes `record` (an exclusive lock on
    a file beside it): a second waits, then reads the first's choice. Where the folder cannot be
    written, each measures for itself."""
    try:
        record.parent.mkdir(parents=True, exist_ok=True)
        lock = open(record.with_name(f"{record.name}.lock"), "a")  # noqa: SIM115 (held across the yield)
    except OSError:
        lock = None
    try:
        if lock is not None:
            fcntl.flock(lock, fcntl.LOCK_EX)
        yield
    finally:
        if lock is not None:
            lock.close()  # closing releases the lock


def _warmed(engine: EngineT) -> EngineT:
    """`engine` (an AcousticEngine or a VocoderEngine) after its warm-up."""
    engine.warm_up()  # type: ignore[attr-defined]
    return engine
