"""A stream's full first step runs on convolution kernels packed once for its exact shapes (bf16, CPU).

The packed kernels must give the numbers F.conv2d gives, bit for bit, and there must be one per
convolution however many sentences run: any other step keeps the plain calls. Real Piper flow and
decoder, randomly initialised mel head and adapter (the layout of a kernel does not depend on its values).
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from libs.models.mel_bridge import MelAdapter, MelHead, MelVocoder
from libs.models.piper_import import PiperVoiceModels
from libs.models.streaming import NO_END, StepInput, StreamNetwork, stream_step

CPU = torch.device("cpu")
pytestmark = pytest.mark.skipif(
    not torch.ops.mkldnn._is_mkldnn_bf16_supported(),
    reason="this CPU has no native bf16 (AVX-512 BF16 / AMX): oneDNN packs no bf16 kernels here, and serving runs fp32",
)
VOCODER_FIRST_FRAMES = 32
FLOW_FIRST_FRAMES = 70


def _conv_count(network: StreamNetwork) -> int:
    return sum(isinstance(module, (nn.Conv1d, nn.ConvTranspose1d)) for module in network.modules.modules())


@pytest.fixture(scope="module")
def vocoder_network(voice: PiperVoiceModels) -> StreamNetwork:
    torch.manual_seed(1234)
    return StreamNetwork.vocoder(MelVocoder(MelAdapter().eval(), voice.decoder))


@pytest.fixture(scope="module")
def flow_network(voice: PiperVoiceModels) -> StreamNetwork:
    torch.manual_seed(1234)
    return StreamNetwork.latent_to_mel(voice.acoustic.flow, MelHead().eval())


def _streamed(network: StreamNetwork, frames: torch.Tensor, first: int, packed: bool, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """Output of a first step over frames[:, :first] (a full first step when `packed`), then the rest."""
    network.first_step_width = first if packed else None
    total = frames.size(1)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == torch.bfloat16):
        head = stream_step(network, [StepInput(frames[:, :first], 0, 0, NO_END, None)], CPU, first, dtype)[0]
        tail = stream_step(network, [StepInput(frames[:, first:], first, 0, total, head.state)], CPU, first, dtype)[0]
    return torch.cat([head.values, tail.values], dim=-1)


@pytest.mark.parametrize(
    ("network_name", "channels", "first"),
    [("vocoder_network", 80, VOCODER_FIRST_FRAMES), ("flow_network", 192, FLOW_FIRST_FRAMES)],
)
def test_packed_first_step_gives_the_plain_numbers_bit_for_bit(request, network_name: str, channels: int, first: int) -> None:
    network: StreamNetwork = request.getfixturevalue(network_name)
    frames = torch.randn(channels, first + 61, generator=torch.Generator().manual_seed(5)) - (4.0 if channels == 80 else 0.0)
    plain = _streamed(network, frames, first, packed=False)
    packed = _streamed(network, frames, first, packed=True)
    assert network.packed_kernel_count == _conv_count(network), "the first step did not run on packed kernels"
    assert torch.equal(packed, plain)


def test_one_packed_kernel_per_convolution_and_only_for_full_first_steps(voice: PiperVoiceModels) -> None:
    network = StreamNetwork.vocoder(MelVocoder(MelAdapter().eval(), voice.decoder))
    mel = torch.full((80, 150), -4.0)
    network.first_step_width = VOCODER_FIRST_FRAMES
    with torch.autocast("cpu", dtype=torch.bfloat16):
        # A first step that is also the last, one of another width, a batch of two: plain calls.
        stream_step(network, [StepInput(mel[:, :20], 0, 0, 20, None)], CPU, VOCODER_FIRST_FRAMES, torch.bfloat16)
        stream_step(network, [StepInput(mel[:, :40], 0, 0, NO_END, None)], CPU, VOCODER_FIRST_FRAMES, torch.bfloat16)
        pair = [StepInput(mel[:, :VOCODER_FIRST_FRAMES], 0, 0, NO_END, None)] * 2
        stream_step(network, pair, CPU, VOCODER_FIRST_FRAMES, torch.bfloat16)
    assert network.packed_kernel_count == 0
    # float32 keeps the plain calls too (the exactness tests run there).
    _streamed(network, mel, VOCODER_FIRST_FRAMES, packed=True, dtype=torch.float32)
    assert network.packed_kernel_count == 0
    # Full first steps of sentences of any length share one packed kernel per convolution.
    for total in (60, 150):
        _streamed(network, mel[:, :total], VOCODER_FIRST_FRAMES, packed=True)
        assert network.packed_kernel_count == _conv_count(network)
