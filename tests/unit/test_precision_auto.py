""""auto" precision is bf16 only where the CPU runs bf16 natively, and bf16 never packs kernels elsewhere."""

from __future__ import annotations

import pytest
import torch

from libs.models.mel_bridge import MelHead
from libs.models.piper_import import PiperVoiceModels
from libs.models.streaming import NO_END, StepInput, StreamNetwork, stream_step
from libs.voice.precision import cpu_has_native_bf16, resolve_precision


def test_auto_precision_follows_the_cpus_native_bf16() -> None:
    assert resolve_precision("auto", "cpu") == ("bf16" if cpu_has_native_bf16() else "fp32")
    assert (resolve_precision("fp32", "cpu"), resolve_precision("bf16", "cpu")) == ("fp32", "bf16")


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
