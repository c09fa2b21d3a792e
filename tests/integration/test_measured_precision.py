"""A worker's "auto" precision on a CPU is settled by measuring its own model, recorded, and then kept.

Real engines of the default voice and their real calibration steps: on a CPU with native bf16 the
first engine is loaded in both precisions and the cheaper kept, and the next worker on the machine
reads the choice instead of measuring again; elsewhere the engine is loaded once, in fp32.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from libs.voice.assets import default_voice_assets
from libs.voice.calibration import MeasuredPrecision, vocoder_steps
from libs.voice.engine import EngineSettings, VocoderEngine
from libs.voice.precision import cheaper_precision, cpu_has_native_bf16

MODEL = "vocoder:default"
native_bf16_only = pytest.mark.skipif(not cpu_has_native_bf16(), reason="this CPU has no native bf16: auto is fp32 without measuring")


def counting_loader(loaded: list[str]) -> Callable[[EngineSettings], VocoderEngine]:
    def load(settings: EngineSettings) -> VocoderEngine:
        loaded.append(settings.precision)
        engine = VocoderEngine.load_default(settings=settings)
        engine.warm_up()
        return engine

    return load


def version_in(precision: str) -> str:
    return VocoderEngine.load_default(settings=EngineSettings(precision=precision)).model_version


def test_a_concrete_precision_is_loaded_once_as_asked(tmp_path: Path) -> None:
    loaded: list[str] = []
    precision = MeasuredPrecision(EngineSettings(precision="fp32"), record_dir=tmp_path)
    engine = precision.load(counting_loader(loaded), vocoder_steps, MODEL)
    assert loaded == ["fp32"] and precision.cost_s == {} and engine.settings.precision == "fp32"
    assert precision.served == "fp32"
    assert list(tmp_path.iterdir()) == []


def test_auto_is_settled_on_the_first_engine_and_kept_for_the_next(tmp_path: Path) -> None:
    loaded: list[str] = []
    precision = MeasuredPrecision(EngineSettings(precision="auto"), record_dir=tmp_path)
    first = precision.load(counting_loader(loaded), vocoder_steps, MODEL)
    if cpu_has_native_bf16():
        assert sorted(loaded) == ["bf16", "fp32"]
        assert set(precision.cost_s) == {"fp32", "bf16"} and all(cost > 0 for cost in precision.cost_s.values())
        chosen = cheaper_precision(precision.cost_s)
    else:
        assert loaded == ["auto"] and precision.cost_s == {}  # resolved as fp32 without measuring
        assert list(tmp_path.iterdir()) == []
        chosen = "fp32"
    assert first.model_version == version_in(chosen)
    assert precision.served == chosen  # what the worker's precision gauge shows
    loaded.clear()
    later = precision.load(counting_loader(loaded), vocoder_steps, "vocoder:another voice")  # the same worker's next voice
    assert len(loaded) == 1 and later.model_version == first.model_version


@native_bf16_only
def test_the_next_worker_on_this_machine_takes_the_recorded_choice_without_measuring(tmp_path: Path) -> None:
    first = MeasuredPrecision(EngineSettings(precision="auto"), record_dir=tmp_path)
    engine = first.load(counting_loader([]), vocoder_steps, MODEL)
    loaded: list[str] = []
    second = MeasuredPrecision(EngineSettings(precision="auto"), record_dir=tmp_path)
    again = second.load(counting_loader(loaded), vocoder_steps, MODEL)
    assert second.recorded and second.cost_s == {} and len(loaded) == 1
    assert loaded[0] == second.settings.precision == first.settings.precision
    assert again.model_version == engine.model_version
    other = MeasuredPrecision(EngineSettings(precision="auto"), record_dir=tmp_path)
    other.load(counting_loader(loaded := []), vocoder_steps, "acoustic:default")  # another model is measured for itself
    assert not other.recorded and sorted(loaded) == ["bf16", "fp32"]


@native_bf16_only
def test_a_damaged_record_is_measured_again(tmp_path: Path) -> None:
    MeasuredPrecision(EngineSettings(precision="auto"), record_dir=tmp_path).load(counting_loader([]), vocoder_steps, MODEL)
    (record,) = tmp_path.glob("*.json")  # beside it, the lock workers starting together take
    record.write_text('{"precision": "fp16"')
    loaded: list[str] = []
    precision = MeasuredPrecision(EngineSettings(precision="auto"), record_dir=tmp_path)
    precision.load(counting_loader(loaded), vocoder_steps, MODEL)
    assert not precision.recorded and sorted(loaded) == ["bf16", "fp32"]
    assert record.read_text().startswith('{"precision": "' + precision.settings.precision + '"')


@native_bf16_only
def test_a_precision_that_fails_to_load_here_is_not_chosen(tmp_path: Path) -> None:
    loaded: list[str] = []
    load = counting_loader(loaded)

    def load_without_bf16(settings: EngineSettings) -> VocoderEngine:
        if settings.precision == "bf16":
            raise RuntimeError("no bf16 kernels for this layer here")
        return load(settings)

    precision = MeasuredPrecision(EngineSettings(precision="auto"), record_dir=tmp_path)
    engine = precision.load(load_without_bf16, vocoder_steps, MODEL)
    assert loaded == ["fp32"] and precision.settings.precision == "fp32"
    assert engine.model_version == version_in("fp32")


def test_a_voices_vocoder_comes_with_its_fast_tier_in_the_same_arithmetic(tmp_path: Path) -> None:
    precision = MeasuredPrecision(EngineSettings(precision="auto"), record_dir=tmp_path)
    engine = precision.vocoder(default_voice_assets())
    fast = VocoderEngine.load_fast(default_voice_assets(), settings=precision.settings)
    quality = VocoderEngine.load_default(settings=EngineSettings(precision=precision.served))
    # Each tier in the slices it measured cheaper (libs.voice.calibration.settle_slices; none in bf16).
    for served, expected in ((engine, quality), (engine.fast_tier, fast)):
        if expected is not None and served is not None and served.slice_frames is not None:
            expected.use_slice_frames(served.slice_frames)
    assert (engine.fast_tier is None) == (fast is None)
    if fast is not None:
        assert engine.fast_tier.model_version == fast.model_version
    assert engine.model_version == quality.model_version
