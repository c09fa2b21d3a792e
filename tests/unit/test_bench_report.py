"""What a benchmark's header says of the run, the machine and the arithmetic its workers served in."""

from __future__ import annotations

import os

import pytest

from bench.report import arithmetic_line, run_heading, vector_units


def test_the_vector_units_that_move_the_figures_are_named() -> None:
    assert vector_units("fpu sse2 avx avx2 fma avx512f avx512bw avx512_bf16", native_bf16=True) == "AVX-512, native bf16"
    assert vector_units("fpu sse2 avx avx2 fma avx512f avx512bw avx512_vnni", native_bf16=False) == "AVX-512, no native bf16"
    assert vector_units("fpu sse2 avx avx2 fma amx_bf16 amx_tile", native_bf16=True) == "AVX2, native bf16"
    assert vector_units("fpu sse2 avx avx2 fma", native_bf16=False) == "AVX2, no native bf16"
    assert vector_units("fp asimd bf16", native_bf16=False) == "no AVX2, no native bf16"
    assert vector_units("", native_bf16=False) == "flags unknown, no native bf16"


def test_the_arithmetic_line_names_each_worker_and_how_it_was_chosen() -> None:
    line = arithmetic_line({"vocoder": "bf16", "acoustic": "fp32"}, "auto")
    assert line.startswith("Workers' arithmetic: acoustic fp32, vocoder bf16 (--precision auto: as measured")
    assert arithmetic_line({"acoustic": "fp32", "vocoder": "fp32"}, "fp32").endswith("(--precision fp32: as asked).")
    assert "not reported" in arithmetic_line({}, "auto")


def test_the_heading_names_the_settings_the_services_inherit_before_the_command(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in [key for key in os.environ if key.startswith("TTS_")]:
        monkeypatch.delenv(key)
    assert run_heading("Real time", "python -m bench.realtime").startswith("## Real time (`python -m bench.realtime`, ")
    monkeypatch.setenv("TTS_BACKGROUND_PRIORITY", "idle")
    monkeypatch.setenv("TTS_VOICES_DIR", "/tmp/my voices")
    monkeypatch.setenv("OTHER_SETTING", "not ours")
    heading = run_heading("Real time", "python -m bench.realtime --quotas 1")
    assert heading.startswith("## Real time (`TTS_BACKGROUND_PRIORITY=idle TTS_VOICES_DIR='/tmp/my voices' python -m bench.realtime --quotas 1`, ")
