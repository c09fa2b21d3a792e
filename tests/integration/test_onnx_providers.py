"""onnxruntime's execution providers follow the engine's device: the CPU provider alone on a CPU, the
CUDA provider on its GPU first, and on a CUDA device without the GPU build a start-up error that says
to install it, never a quiet CPU session."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime
import pytest
import torch
from onnx import TensorProto, helper

from libs.models.onnx_encoder import FRONT_END_INPUT_NAMES, FRONT_END_OUTPUT_NAMES, OnnxFrontEnd
from libs.models.onnx_providers import CPU_PROVIDER, CUDA_PROVIDER, ExecutionProviderError, execution_providers, inference_session
from libs.models.piper_import import PiperVoiceModels
from tests.integration.test_onnx_encoder import ID_RUNS

WITH_CUDA = ["TensorrtExecutionProvider", CUDA_PROVIDER, CPU_PROVIDER]
CPU_BUILD = ["AzureExecutionProvider", CPU_PROVIDER]


def _offer(monkeypatch: pytest.MonkeyPatch, providers: list[str]) -> None:
    """Make the installed onnxruntime report `providers` as the ones it was built with."""
    monkeypatch.setattr(onnxruntime, "get_available_providers", lambda: list(providers))


@pytest.mark.parametrize("device", ["cpu", torch.device("cpu")])
def test_a_cpu_device_gets_only_the_cpu_provider(monkeypatch: pytest.MonkeyPatch, device: str | torch.device) -> None:
    _offer(monkeypatch, WITH_CUDA)  # even where the GPU build is installed
    assert execution_providers(device) == [CPU_PROVIDER]


@pytest.mark.parametrize(("device", "device_id"), [("cuda", 0), ("cuda:0", 0), ("cuda:1", 1), (torch.device("cuda", 3), 3)])
def test_a_cuda_device_gets_the_cuda_provider_on_its_gpu_then_the_cpu(
    monkeypatch: pytest.MonkeyPatch, device: str | torch.device, device_id: int
) -> None:
    _offer(monkeypatch, WITH_CUDA)
    assert execution_providers(device) == [(CUDA_PROVIDER, {"device_id": device_id, "use_tf32": 0}), CPU_PROVIDER]


def test_a_cuda_device_without_the_gpu_build_fails_saying_to_install_onnxruntime_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    _offer(monkeypatch, CPU_BUILD)
    with pytest.raises(ExecutionProviderError) as failure:
        execution_providers("cuda:0")
    message = str(failure.value)
    assert "'cuda:0'" in message and CUDA_PROVIDER in message and "pip install onnxruntime-gpu" in message


def test_a_device_onnxruntime_has_no_provider_for_is_refused() -> None:
    with pytest.raises(ValueError, match="'cpu' or 'cuda"):
        execution_providers("meta")


def _identity_model() -> bytes:
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])],
        "identity",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


@pytest.mark.filterwarnings("ignore:Specified provider 'CUDAExecutionProvider' is not in available provider names")
def test_a_cuda_session_that_could_not_start_its_provider_is_an_error_not_a_cpu_session(monkeypatch: pytest.MonkeyPatch) -> None:
    # The GPU build reports its CUDA provider even where the provider cannot start (no GPU, a missing
    # CUDA library); onnxruntime then builds the session on the CPU alone, with a warning. Here the
    # CPU build's session drops the provider it lacks, the same way.
    _offer(monkeypatch, WITH_CUDA)
    with pytest.raises(ExecutionProviderError, match=f"could not start its {CUDA_PROVIDER}"):
        inference_session(_identity_model(), onnxruntime.SessionOptions(), "cuda")


def test_a_cpu_session_built_through_the_providers_gives_the_same_front_end_as_before(
    voice: PiperVoiceModels, graph_cache: Path
) -> None:
    """The default voice's text side on the new path (as the engine passes its device) against a
    session built as it was before, on the same file and options: the same numbers, bit for bit."""
    front_end = OnnxFrontEnd.load(voice.acoustic, cache_dir=graph_cache, device=torch.device("cpu"))
    assert front_end.session.get_providers() == front_end.wide_session.get_providers() == [CPU_PROVIDER]
    before = onnxruntime.InferenceSession(
        str(front_end.cache_path), front_end.session.get_session_options(), providers=["CPUExecutionProvider"]
    )
    for name in ("short", "161"):
        ids = torch.tensor([ID_RUNS[name]])
        noise = torch.randn(1, 2, ids.size(1), generator=torch.Generator().manual_seed(5)) * 0.8
        outputs = front_end.run(ids, noise)
        expected = before.run(
            list(FRONT_END_OUTPUT_NAMES), {FRONT_END_INPUT_NAMES[0]: ids.numpy(), FRONT_END_INPUT_NAMES[1]: noise.numpy()}
        )
        for output, reference in zip(outputs, expected, strict=True):
            assert output.dtype == torch.float32 and output.shape == reference.shape
            assert np.array_equal(output.numpy(), reference), f"{name}: the new session's numbers differ from before"


def test_a_cuda_front_end_without_the_gpu_build_fails_before_exporting_or_caching_anything(
    monkeypatch: pytest.MonkeyPatch, voice: PiperVoiceModels, tmp_path: Path
) -> None:
    _offer(monkeypatch, CPU_BUILD)
    with pytest.raises(ExecutionProviderError, match="pip install onnxruntime-gpu"):
        OnnxFrontEnd.load(voice.acoustic, cache_dir=tmp_path, device="cuda")
    assert list(tmp_path.iterdir()) == []


def test_a_cached_graph_is_not_exported_again_when_the_device_is_at_fault(
    monkeypatch: pytest.MonkeyPatch, voice: PiperVoiceModels, graph_cache: Path
) -> None:
    """A good cached file and a CUDA provider that does not start: the error, not a re-export."""
    OnnxFrontEnd.load(voice.acoustic, cache_dir=graph_cache)  # the file is cached
    _offer(monkeypatch, WITH_CUDA)
    monkeypatch.setattr("libs.models.onnx_encoder.export_front_end", lambda acoustic: pytest.fail("exported again"))
    with pytest.raises(ExecutionProviderError, match="could not start"):
        with pytest.warns(UserWarning, match="Specified provider"):
            OnnxFrontEnd.load(voice.acoustic, cache_dir=graph_cache, device="cuda")
