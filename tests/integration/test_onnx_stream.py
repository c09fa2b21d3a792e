"""Stream steps in onnxruntime (libs.models.onnx_stream) against the same steps in torch, on the real
Piper decoder body and flow behind seeded random mel bridges: equal to float32 round-off with the
same state in the same shapes, deterministic, and taken only where no padding or mask is needed."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

import libs.models.onnx_stream as onnx_stream
from libs.models.mel_bridge import MelAdapter, MelHead, MelVocoder
from libs.models.onnx_stream import STEP_KINDS, OnnxStreamNetwork, StepKind, step_kind
from libs.models.piper_import import PiperVoiceModels
from libs.models.streaming import (
    NO_END,
    StepInput,
    StepOutput,
    StreamNetwork,
    StreamState,
    activation_values_per_frame,
    output_lag,
    stream_step,
)
from libs.voice.assets import default_voice_assets
from libs.voice.chunking import ACOUSTIC_SCHEDULE, ChunkSchedule
from libs.voice.engine import AcousticEngine, EngineSettings, SynthesisParams, VocoderEngine
from libs.voice.runtime import resolve_stream_backend

TOLERANCE = 1e-4
CPU = torch.device("cpu")


class _Network:
    """A stream network, its input channels and first-step width, and its graphs."""

    def __init__(self, network: StreamNetwork, channels: int, scale: int, cache: Path, name: str) -> None:
        self.network = network
        self.channels = channels
        self.first_width = -(-output_lag(network, channels, CPU) // scale) + 1
        self.onnx = OnnxStreamNetwork.load(network, name, channels, self.first_width, cache_dir=cache)

    def frames(self, count: int, seed: int) -> torch.Tensor:
        offset = -4.0 if self.channels == 80 else 0.0  # log-mel sits around -4
        return torch.randn(self.channels, count, generator=torch.Generator().manual_seed(seed)) + offset

    def first_state(self) -> StreamState:
        """The tails a torch first step leaves."""
        item = StepInput(self.frames(self.first_width, 9), 0, 0, NO_END, None)
        return stream_step(self.network, [item], CPU, self.first_width)[0].state


@pytest.fixture(scope="module")
def vocoder(voice: PiperVoiceModels, graph_cache: Path) -> _Network:
    torch.manual_seed(21)
    network = StreamNetwork.vocoder(MelVocoder(MelAdapter().eval(), voice.decoder))
    return _Network(network, 80, voice.config.hop_length, graph_cache, "test-vocoder")


@pytest.fixture(scope="module")
def flow(voice: PiperVoiceModels, graph_cache: Path) -> _Network:
    torch.manual_seed(22)
    network = StreamNetwork.latent_to_mel(voice.acoustic.flow, MelHead().eval())
    return _Network(network, voice.acoustic.config.inter_channels, 1, graph_cache, "test-flow")


def _steps(net: _Network, widths: list[int], seed: int = 3) -> list[StepInput]:
    """One stream's steps of the given widths (the last one ends the sentence), without their state."""
    frames = net.frames(sum(widths), seed)
    total, start, steps = frames.size(1), 0, []
    for width in widths:
        end = start + width
        steps.append(StepInput(frames[:, start:end], start, 0, total if end == total else NO_END, None))
        start = end
    return steps


def _run(net: _Network, steps: list[StepInput], backends: str, onnx: OnnxStreamNetwork | None = None) -> list[StepOutput]:
    """The stream's steps, step i in onnxruntime when backends[i] is "o", in torch when it is "t"."""
    graphs = onnx or net.onnx
    outputs, state = [], None
    for step, backend in zip(steps, backends, strict=True):
        item = StepInput(step.frames, step.start, step.low, step.high, state)
        if backend == "o":
            assert graphs.accepts(item), f"the {step_kind(item).name} step at frame {item.start} should run in onnxruntime"
            output = graphs.step(item)
        else:
            output = stream_step(net.network, [item], CPU, net.first_width)[0]
        outputs.append(output)
        state = output.state
    return outputs


def _assert_close(outputs: list[StepOutput], references: list[StepOutput]) -> None:
    for output, reference in zip(outputs, references, strict=True):
        assert output.first_position == reference.first_position
        assert output.values.shape == reference.values.shape
        assert torch.abs(output.values - reference.values).max() <= TOLERANCE
        assert [tail.shape for tail in output.state] == [tail.shape for tail in reference.state]
        for tail, reference_tail in zip(output.state, reference.state, strict=False):
            assert torch.abs(tail - reference_tail).max() <= TOLERANCE


@pytest.mark.parametrize("name", ["vocoder", "flow"])
def test_every_kind_of_step_in_onnxruntime_equals_the_torch_step_to_round_off(request, name: str) -> None:
    net: _Network = request.getfixturevalue(name)
    # First, later, later, last: widths that neither the traced nor the probed graphs used.
    steps = _steps(net, [net.first_width + 10, 40, 7, 29])
    _assert_close(_run(net, steps, "oooo"), _run(net, steps, "tttt"))
    sentence_of_one_step = _steps(net, [11])
    _assert_close(_run(net, sentence_of_one_step, "o"), _run(net, sentence_of_one_step, "t"))


@pytest.mark.parametrize("name", ["vocoder", "flow"])
def test_a_stream_may_switch_between_onnxruntime_and_torch_from_step_to_step(request, name: str) -> None:
    net: _Network = request.getfixturevalue(name)
    steps = _steps(net, [net.first_width + 2, 33, 21, 17])
    _assert_close(_run(net, steps, "otot"), _run(net, steps, "tttt"))


def test_the_same_steps_give_the_same_numbers_bit_for_bit_on_one_thread_or_two(vocoder: _Network, graph_cache: Path) -> None:
    steps = _steps(vocoder, [vocoder.first_width + 4, 64, 19])
    two_threads = OnnxStreamNetwork.load(vocoder.network, "test-vocoder", 80, vocoder.first_width, threads=2, cache_dir=graph_cache)
    runs = [_run(vocoder, steps, "ooo"), _run(vocoder, steps, "ooo"), _run(vocoder, steps, "ooo", two_threads)]
    for first, *others in zip(*runs, strict=False):
        for other in others:
            assert torch.equal(first.values, other.values)
            assert all(torch.equal(tail, other_tail) for tail, other_tail in zip(first.state, other.state, strict=True))


def test_steps_that_would_need_padding_or_a_mask_are_left_to_torch(vocoder: _Network) -> None:
    onnx, first_width = vocoder.onnx, vocoder.first_width
    frames, tails = vocoder.frames(first_width + 40, 5), vocoder.first_state()
    lag_frames = first_width - 1
    accepted = [
        StepInput(frames[:, :first_width], 0, 0, NO_END, None),  # a full first step
        StepInput(frames[:, :5], 0, 0, 5, None),  # a sentence of one step, however short
        StepInput(frames[:, :9], first_width, 0, NO_END, tails),  # a later step
        StepInput(frames[:, :9], first_width, 0, first_width + 9, tails),  # a last step that ends at its last frame
        StepInput(frames[:, :first_width], 50, 50, NO_END, None),  # the first step of a stream that starts mid-sentence
    ]
    refused = [
        StepInput(frames[:, : first_width - 1], 0, 0, NO_END, None),  # a first step torch pads to first_width
        StepInput(frames[:, :first_width], 60, 50, NO_END, None),  # a first step after the stream's first real frame
        StepInput(frames[:, :16], first_width, 0, first_width + 9, tails),  # a last step padded past the end
        StepInput(frames[:, :0], first_width, 0, first_width, tails),  # an empty last step
        StepInput(frames[:, :9], lag_frames - 1, 0, NO_END, tails),  # a later step that reaches back before frame 0
        StepInput(frames[:, :first_width].to(torch.bfloat16), 0, 0, NO_END, None),  # bf16
        StepInput(frames[:, :first_width], 0, 0, NO_END, None, g=torch.zeros(4, 1)),  # speaker-conditioned
    ]
    assert [onnx.accepts(item) for item in accepted] == [True] * len(accepted)
    assert [onnx.accepts(item) for item in refused] == [False] * len(refused)


def test_kinds_of_step_without_a_graph_stay_in_torch(vocoder: _Network, graph_cache: Path) -> None:
    ends_only = tuple(kind for kind in STEP_KINDS if kind.first or kind.last)
    onnx = OnnxStreamNetwork.load(vocoder.network, "test-vocoder", 80, vocoder.first_width, kinds=ends_only, cache_dir=graph_cache)
    later = StepInput(vocoder.frames(12, 4), vocoder.first_width, 0, NO_END, vocoder.first_state())
    assert step_kind(later) == StepKind(first=False, last=False)
    assert vocoder.onnx.accepts(later) and not onnx.accepts(later)


def test_wide_steps_in_slices_equal_the_torch_steps_to_round_off_and_repeat_bit_for_bit(vocoder: _Network) -> None:
    whole = vocoder.onnx
    sliced = OnnxStreamNetwork(whole._sessions, whole.lag, whole.scale, whole.first_width, slice_frames=9)
    # A first step (always whole), later steps of several slices and of one, a last step of several.
    steps = _steps(vocoder, [vocoder.first_width + 10, 40, 7, 29])
    runs = [_run(vocoder, steps, "oooo", sliced) for _ in range(2)]
    _assert_close(runs[0], _run(vocoder, steps, "tttt"))
    for output, again in zip(*runs, strict=True):
        assert torch.equal(output.values, again.values)
        assert all(torch.equal(tail, other) for tail, other in zip(output.state, again.state, strict=True))


def test_the_widest_layer_of_the_vocoder_is_its_last_stage(vocoder: _Network, flow: _Network) -> None:
    # The decoder's last stage: 32 channels x 256 samples per frame.
    assert activation_values_per_frame(vocoder.network, 80, CPU, vocoder.first_width) == 32 * 256
    # The flow and mel head's layers are a few hundred values per frame (192 channels, gated).
    assert activation_values_per_frame(flow.network, flow.channels, CPU, flow.first_width) < 512


def test_a_slice_keeps_four_copies_of_the_widest_layer_within_the_l2_cache(tmp_path: Path) -> None:
    assert onnx_stream.slice_width(8192, 2 << 20) == 16
    assert onnx_stream.slice_width(4096, 2 << 20) == 32
    assert onnx_stream.slice_width(8192, 512 << 10) == onnx_stream.MIN_SLICE_FRAMES  # a small cache: no sliver
    for index, (level, kind, size) in enumerate([("1", "Data", "48K"), ("1", "Instruction", "32K"), ("2", "Unified", "2048K"), ("3", "Unified", "260M")]):
        folder = tmp_path / f"index{index}"
        folder.mkdir()
        for name, text in (("level", level), ("type", kind), ("size", size)):
            (folder / name).write_text(text + "\n")
    assert onnx_stream.l2_cache_bytes(tmp_path) == 2048 << 10
    assert onnx_stream.l2_cache_bytes(tmp_path / "absent") == onnx_stream.DEFAULT_L2_CACHE_BYTES


def test_cached_graphs_are_reused_and_graphs_of_other_code_removed(vocoder: _Network, tmp_path: Path, monkeypatch) -> None:
    kinds = (StepKind(first=True, last=True),)
    OnnxStreamNetwork.load(vocoder.network, "v", 80, vocoder.first_width, kinds=kinds, cache_dir=tmp_path)
    (graph,) = tmp_path.glob("stream-v-only-*.onnx")
    older_code = graph.with_name(graph.name.rsplit("-", 1)[0] + "-0123456789abcdef.v1.onnx")
    older_code.write_bytes(b"a graph that older code exported")
    other_network = tmp_path / "stream-v-only-fedcba9876543210-0123456789abcdef.v1.onnx"
    other_network.write_bytes(b"another network's graph")

    def no_export(*args: object) -> bytes:
        raise AssertionError("the cached graph should have been used")

    with monkeypatch.context() as patch:
        patch.setattr(onnx_stream, "_export", no_export)
        OnnxStreamNetwork.load(vocoder.network, "v", 80, vocoder.first_width, kinds=kinds, cache_dir=tmp_path)
    assert older_code.exists(), "nothing was exported, so nothing is cleaned up"

    graph.write_bytes(b"not a graph")  # unreadable: exported again, and the older code's copy goes
    reloaded = OnnxStreamNetwork.load(vocoder.network, "v", 80, vocoder.first_width, kinds=kinds, cache_dir=tmp_path)
    assert sorted(path.name for path in tmp_path.iterdir()) == sorted([graph.name, other_network.name])
    sentence = _steps(vocoder, [13])
    _assert_close(_run(vocoder, sentence, "o", reloaded), _run(vocoder, sentence, "t"))


def test_float32_engines_on_a_cpu_stream_in_onnxruntime_and_name_it_in_their_version() -> None:
    engines = {backend: VocoderEngine.load_default(settings=EngineSettings(precision="fp32", stream_backend=backend)) for backend in ("auto", "torch")}
    assert engines["auto"].stream_backend == "onnxruntime" and engines["torch"].stream_backend == "torch"
    assert engines["auto"].model_version != engines["torch"].model_version
    # The vocoder's wide steps run in slices, which the version names; the torch path has none.
    slice_frames = engines["auto"]._onnx.slice_frames
    assert slice_frames is not None and engines["auto"].model_version.endswith(f"-s{slice_frames}")
    assert resolve_stream_backend(EngineSettings(precision="bf16")) == "torch"
    assert resolve_stream_backend(EngineSettings(precision="fp32", device="cuda")) == "torch"
    with pytest.raises(ValueError, match="float32 on a CPU"):
        resolve_stream_backend(EngineSettings(precision="bf16", stream_backend="onnxruntime"))


def test_an_acoustic_engine_names_where_its_steps_end_in_its_version() -> None:
    # Where the steps end moves the mel by round-off, so engines with other ends never share a cache entry.
    default = AcousticEngine.load_default(settings=EngineSettings(precision="fp32"))
    assert default._onnx is not None and default._onnx.slice_frames is None  # its steps always run whole
    larger = AcousticEngine.load(default_voice_assets(), settings=EngineSettings(precision="fp32"), schedule=ChunkSchedule(33, 2.0, 1024))
    assert default.model_version != larger.model_version
    plan = default.plan([1, 0] + [20 + (index * 7) % 40 for index in range(300)] + [2], SynthesisParams(), seed=7)
    steps = default.step_frames(plan.frame_count)
    # A last step takes what is left when it is under half the next chunk (`ChunkSchedule.step_ends`).
    assert len(steps) > 3 and max(steps[1:]) <= ACOUSTIC_SCHEDULE.max_chunk_frames + default.lag_frames
    mel, other = (np.concatenate(list(engine.mel_chunks(plan)), axis=1) for engine in (default, larger))
    assert mel.shape == other.shape and np.abs(mel - other).max() < 1e-4


def test_a_vocoder_names_where_its_steps_end_in_its_version() -> None:
    # The vocoder's steps move its samples by round-off too: its audio heads and resumes are shared
    # only between vocoders that step alike.
    settings = EngineSettings(precision="fp32")
    default = VocoderEngine.load(default_voice_assets(), settings=settings)
    doubling = VocoderEngine.load(default_voice_assets(), settings=settings, schedule=ChunkSchedule(32, 2.0, 128))
    assert [default.schedule.chunk_frames(index) for index in range(4)] == [32, 32, 64, 128]
    assert default.model_version != doubling.model_version
