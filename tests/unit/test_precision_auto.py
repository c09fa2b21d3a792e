""""auto" precision: fp32 on a CPU unless a worker measures bf16 cheaper there; bf16 never packs kernels
where the CPU lacks it."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from libs.models.mel_bridge import MelHead
from libs.models.piper_import import PiperVoiceModels
from libs.models.streaming import NO_END, StepInput, StreamNetwork, stream_step
from libs.voice.precision import (
    BF16_MIN_SPEEDUP,
    CpuModel,
    cheaper_precision,
    cpu_has_native_bf16,
    cpu_model,
    measures_precision,
    resolve_precision,
)


def test_auto_precision_on_a_cpu_is_fp32_until_measured() -> None:
    assert resolve_precision("auto", "cpu") == "fp32"
    assert (resolve_precision("fp32", "cpu"), resolve_precision("bf16", "cpu")) == ("fp32", "bf16")


def test_only_auto_on_a_cpu_with_native_bf16_is_measured() -> None:
    assert measures_precision("auto", "cpu") == cpu_has_native_bf16()
    assert not measures_precision("fp32", "cpu") and not measures_precision("bf16", "cpu")
    assert not measures_precision("auto", "cuda")


def test_bf16_is_chosen_only_when_it_is_clearly_cheaper() -> None:
    assert cheaper_precision({"fp32": 0.100, "bf16": 0.050}) == "bf16"
    assert cheaper_precision({"fp32": 0.100, "bf16": 0.100 / BF16_MIN_SPEEDUP}) == "bf16"
    assert cheaper_precision({"fp32": 0.100, "bf16": 0.095}) == "fp32"  # within noise of fp32: the exact one
    assert cheaper_precision({"fp32": 0.100, "bf16": 0.160}) == "fp32"


def test_an_unknown_precision_is_refused() -> None:
    with pytest.raises(ValueError, match="must be one of"):
        resolve_precision("fp8", "cpu")


@pytest.mark.skipif(cpu_has_native_bf16(), reason="this CPU has native bf16: packing is tested in test_streaming_packed_first_step")
def test_a_bf16_first_step_without_native_bf16_runs_on_plain_kernels(voice: PiperVoiceModels) -> None:
    torch.manual_seed(1234)
    network = StreamNetwork.latent_to_mel(voice.acoustic.flow, MelHead().eval())
    network.first_step_width = 70
    item = StepInput(torch.randn(192, 70, generator=torch.Generator().manual_seed(5)), 0, 0, NO_END, None)
    assert network.packed_first_step([item], torch.device("cpu"), torch.bfloat16) is None
    with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
        (result,) = stream_step(network, [item], torch.device("cpu"), 70, torch.bfloat16)
    assert torch.isfinite(result.values.float()).all()
    assert network.packed_kernel_count == 0


def test_the_cpu_model_is_read_from_its_first_processor_and_stands_in_where_unknown(tmp_path: Path) -> None:
    info = tmp_path / "cpuinfo"
    info.write_text(
        "processor\t: 0\nmodel name\t: Example CPU @ 2.0GHz\nflags\t\t: fpu avx2 avx512_bf16\n\n"
        "processor\t: 1\nmodel name\t: Other\nflags\t\t: fpu\n"
    )
    assert cpu_model(info) == CpuModel("Example CPU @ 2.0GHz", "fpu avx2 avx512_bf16")
    missing = cpu_model(tmp_path / "absent")
    assert missing.name and missing.flags == ""
