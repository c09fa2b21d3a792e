"""A CPU vocoder runs its wide steps in the slice width its own calibration steps cost least in here.

Real engines of the default voice (float32, steps in onnxruntime): the width is measured among
multiples of the cache rule's, named in the model version, recorded for the machine, and taken from
the record by the next worker; workers starting together wait for one measurement and agree. Where a
test needs a given width to be the cheaper, the timing is replaced (`run_steps`), never the engine.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np
import pytest

from libs.voice import calibration
from libs.voice.assets import default_voice_assets
from libs.voice.calibration import SLICE_MARGIN, SLICE_MULTIPLES, MeasuredPrecision, narrowest_within
from libs.voice.engine import EngineSettings, VocoderEngine

MODEL = "vocoder:default"
FP32 = EngineSettings(precision="fp32")


@pytest.fixture(scope="module")
def rule_width() -> int:
    width = VocoderEngine.load_default(settings=FP32).slice_frames
    assert width is not None, "a float32 CPU vocoder runs its wide steps in slices"
    return width


def engine() -> VocoderEngine:
    loaded = VocoderEngine.load_default(settings=FP32)
    loaded.warm_up()
    return loaded


def priced(
    cost_by_multiple: dict[int, float], rule: int, measured: Callable[[], VocoderEngine], calls: list[int] | None = None, pause_s: float = 0.0
) -> Callable[[Iterable[calibration.CalibrationStep]], tuple[float, float]]:
    """A `run_steps` that runs nothing and prices the calibration steps of the engine being measured
    (`measured()`) by the slice width it runs in now."""

    def run_steps(steps: Iterable[calibration.CalibrationStep]) -> tuple[float, float]:
        width = measured().slice_frames
        assert width is not None
        if calls is not None:
            calls.append(width)
        time.sleep(pause_s)
        return cost_by_multiple[width // rule], 1.0

    return run_steps


def test_the_narrowest_width_within_the_margin_of_the_cheapest_is_taken() -> None:
    assert narrowest_within({16: 1.0, 32: 0.9, 64: 0.8}, SLICE_MARGIN) == 64
    assert narrowest_within({16: 1.0, 32: 0.8, 64: 0.79}, SLICE_MARGIN) == 32  # 64 saves less than the margin
    assert narrowest_within({16: 0.8, 32: 0.9, 64: 0.81}, SLICE_MARGIN) == 16
    assert narrowest_within({16: 0.9}, SLICE_MARGIN) == 16


def test_the_measured_width_is_served_named_in_the_version_and_recorded(tmp_path: Path, rule_width: int) -> None:
    vocoder = engine()
    unsliced = vocoder.model_version.removesuffix(f"-s{rule_width}")
    MeasuredPrecision(FP32, record_dir=tmp_path).settle_slices(vocoder, MODEL)
    chosen = vocoder.slice_frames
    assert chosen in [rule_width * multiple for multiple in SLICE_MULTIPLES]
    assert vocoder.model_version == f"{unsliced}-s{chosen}"
    (record,) = tmp_path.glob("*.json")
    body = json.loads(record.read_text())
    assert body["slice_frames"] == chosen and sorted(int(width) for width in body["calibration_cpu_s"]) == [
        rule_width * multiple for multiple in SLICE_MULTIPLES
    ]
    assert all(cost > 0 for cost in body["calibration_cpu_s"].values())
    # The engine streams at that width: its steps still give the whole sentence's samples.
    mel = np.random.default_rng(3).normal(-5.0, 2.0, (vocoder.n_mels, 300)).astype(np.float32)
    stream = vocoder.open_stream()
    streamed = np.concatenate([stream.push(mel[:, start : start + 20]) for start in range(0, 300, 20)] + [stream.finish()])
    np.testing.assert_allclose(streamed, vocoder.vocode(mel), atol=1e-4)


def test_the_cheapest_width_is_chosen_and_the_next_worker_takes_it_from_the_record(
    tmp_path: Path, rule_width: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[int] = []
    now: list[VocoderEngine] = []
    monkeypatch.setattr(calibration, "run_steps", priced({1: 1.0, 2: 0.8, 4: 0.9}, rule_width, lambda: now[-1], calls))
    now.append(first := engine())
    MeasuredPrecision(FP32, record_dir=tmp_path).settle_slices(first, MODEL)
    assert first.slice_frames == 2 * rule_width
    assert sorted(set(calls)) == [rule_width * multiple for multiple in SLICE_MULTIPLES]
    calls.clear()
    now.append(later := engine())
    MeasuredPrecision(FP32, record_dir=tmp_path).settle_slices(later, MODEL)
    assert calls == [] and later.slice_frames == 2 * rule_width and later.model_version == first.model_version
    now.append(other := engine())  # another model is measured for itself
    MeasuredPrecision(FP32, record_dir=tmp_path).settle_slices(other, "vocoder-fast:default")
    assert calls


def test_a_record_of_a_width_not_measured_here_is_measured_again(tmp_path: Path, rule_width: int, monkeypatch: pytest.MonkeyPatch) -> None:
    now: list[VocoderEngine] = [engine()]
    monkeypatch.setattr(calibration, "run_steps", priced({1: 0.7, 2: 0.8, 4: 0.9}, rule_width, lambda: now[-1]))
    MeasuredPrecision(FP32, record_dir=tmp_path).settle_slices(now[-1], MODEL)
    (record,) = tmp_path.glob("*.json")
    record.write_text(json.dumps({"slice_frames": 3 * rule_width}))
    now.append(again := engine())
    MeasuredPrecision(FP32, record_dir=tmp_path).settle_slices(again, MODEL)
    assert again.slice_frames == rule_width and json.loads(record.read_text())["slice_frames"] == rule_width


def test_workers_starting_together_measure_once_and_agree(tmp_path: Path, rule_width: int, monkeypatch: pytest.MonkeyPatch) -> None:
    # Each worker's own measurement would choose differently (the machine is noisy); together they
    # must serve one version, so the second waits for the first's record.
    preferences = {"a": {1: 1.0, 2: 0.5, 4: 0.9}, "b": {1: 1.0, 2: 0.9, 4: 0.5}}
    calls: list[int] = []
    engines = {name: engine() for name in preferences}
    pricing = {
        name: priced(costs, rule_width, lambda name=name: engines[name], calls, pause_s=0.05) for name, costs in preferences.items()
    }
    monkeypatch.setattr(calibration, "run_steps", lambda steps: pricing[threading.current_thread().name](steps))
    workers = [
        threading.Thread(target=MeasuredPrecision(FP32, record_dir=tmp_path).settle_slices, args=(engines[name], MODEL), name=name)
        for name in preferences
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert engines["a"].slice_frames == engines["b"].slice_frames in (2 * rule_width, 4 * rule_width)
    assert engines["a"].model_version == engines["b"].model_version
    assert len(calls) == len(SLICE_MULTIPLES) * calibration.PRECISION_ROUNDS  # one worker measured


def test_an_engine_whose_steps_run_whole_is_left_as_it_is(tmp_path: Path) -> None:
    whole = VocoderEngine.load_default(settings=EngineSettings(precision="fp32", stream_backend="torch"))
    version = whole.model_version
    MeasuredPrecision(FP32, record_dir=tmp_path).settle_slices(whole, MODEL)
    assert whole.slice_frames is None and whole.model_version == version and list(tmp_path.iterdir()) == []
    with pytest.raises(ValueError, match="runs every step whole"):
        whole.use_slice_frames(32)


def test_a_worker_vocoder_and_its_fast_tier_each_settle_a_width(tmp_path: Path, rule_width: int) -> None:
    vocoder = MeasuredPrecision(FP32, record_dir=tmp_path).vocoder(default_voice_assets())
    assert vocoder.fast_tier is not None
    records = {json.loads(record.read_text())["slice_frames"] for record in tmp_path.glob("*.json")}
    assert len(list(tmp_path.glob("*.json"))) == 2  # one per tier
    for tier in (vocoder, vocoder.fast_tier):
        assert tier.slice_frames in records and tier.model_version.endswith(f"-s{tier.slice_frames}")


def test_a_pinned_width_is_served_without_measuring(tmp_path: Path, rule_width: int, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_measuring(steps: Iterable[calibration.CalibrationStep]) -> tuple[float, float]:
        raise AssertionError("a pinned width is not measured")

    monkeypatch.setattr(calibration, "run_steps", no_measuring)
    pinned = EngineSettings(precision="fp32", slice_frames=3 * rule_width)
    vocoder = MeasuredPrecision(pinned, record_dir=tmp_path).vocoder(default_voice_assets())
    assert vocoder.fast_tier is not None
    for tier in (vocoder, vocoder.fast_tier):
        assert tier.slice_frames == 3 * rule_width and tier.model_version.endswith(f"-s{3 * rule_width}")
    assert list(tmp_path.iterdir()) == []
    assert VocoderEngine.load_default(settings=pinned).model_version == vocoder.model_version  # the engine itself takes the pin
    with pytest.raises(ValueError, match="slice_frames must be 0"):
        EngineSettings(slice_frames=-1)
