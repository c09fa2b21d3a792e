"""What streaming costs the vocoder: CPU time per audio second, streamed in 40 ms slices vs whole sentences.

The vocoder engine runs in this process on one thread, in the workers' default precision, on the
mel of every sentence of the benchmark texts: once pushed slice by slice into a stream (as the
worker gets it), once vocoded whole. Part of `make bench`; also `python -m bench.streaming_cost`,
which also prints what each engine's streamed work costs (`measure_engine_cost`) where the stream
steps run (onnxruntime in float32 on a CPU) and, for comparison, in torch.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

import numpy as np
import torch

from bench.texts import TEXTS
from libs.audio.slicing import slice_bounds
from libs.text.frontend import TextFrontend
from libs.voice.assets import default_voice_assets
from libs.voice.engine import AcousticEngine, EngineSettings, SynthesisParams, VocoderEngine
from libs.voice.precision import DEFAULT_PRECISION

TARGET_RATIO: Final = 1.3
"""The issue's bound: streamed vocoding may cost at most this multiple of whole-sentence vocoding."""


@dataclass(frozen=True)
class StreamingCost:
    """CPU seconds per audio second of the vocoder, streamed and whole."""

    streamed: float
    """Slice by slice through `VocoderEngine.open_stream`."""
    whole: float
    """Each sentence in one `VocoderEngine.vocode` call."""
    audio_s: float
    """Audio measured (seconds)."""

    @property
    def ratio(self) -> float:
        """streamed / whole."""
        return self.streamed / self.whole


def measure_streaming_cost() -> StreamingCost:
    """Vocode the benchmark texts' sentences both ways on one thread and time the CPU each takes."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        assets = default_voice_assets()
        frontend = TextFrontend.from_voice_config(assets.config_path)
        acoustic = AcousticEngine.load(assets, settings=EngineSettings(precision=DEFAULT_PRECISION))
        vocoder = VocoderEngine.load(assets, settings=EngineSettings(precision=DEFAULT_PRECISION))
        params = SynthesisParams()
        mels = []
        for sentence in (sentence for text in TEXTS.values() for sentence in frontend.sentences(text)):
            plan = acoustic.plan(sentence.phoneme_ids, params, acoustic.synthesis_seed(sentence.phoneme_ids, params))
            mels.append(acoustic.mel_whole(plan))
        vocoder.warm_up()
        streamed = _cpu_s(lambda: [_stream(vocoder, mel) for mel in mels])
        whole = _cpu_s(lambda: [vocoder.vocode(mel) for mel in mels])
    finally:
        torch.set_num_threads(threads)
    audio_s = sum(mel.shape[1] for mel in mels) * vocoder.hop_length / vocoder.sample_rate_hz
    return StreamingCost(streamed / audio_s, whole / audio_s, audio_s)


@dataclass(frozen=True)
class EngineCost:
    """CPU seconds per audio second of each engine's part of a sentence, one stream on one thread."""

    stream_backend: str
    """Where the stream steps ran ("onnxruntime" or "torch")."""
    text_side: float
    """`AcousticEngine.plan`: text encoder, durations and the sentence's noise."""
    flow_and_head: float
    """`AcousticEngine.mel_chunks`: the flow and the mel head, streamed."""
    vocoder: float
    """A `VocoderStream` fed the mel in 40 ms slices."""

    @property
    def total(self) -> float:
        """All three."""
        return self.text_side + self.flow_and_head + self.vocoder


def measure_engine_cost(stream_backend: str = "auto", repeats: int = 3) -> EngineCost:
    """Each engine's CPU time per audio second over the benchmark texts, as the workers run them (the
    default precision) but with the stream steps where `stream_backend` says; the least of `repeats`."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        assets = default_voice_assets()
        frontend = TextFrontend.from_voice_config(assets.config_path)
        settings = EngineSettings(precision=DEFAULT_PRECISION, stream_backend=stream_backend)
        acoustic, vocoder = AcousticEngine.load(assets, settings=settings), VocoderEngine.load(assets, settings=settings)
        acoustic.warm_up()
        vocoder.warm_up()
        ids = [sentence.phoneme_ids for text in TEXTS.values() for sentence in frontend.sentences(text)]
        params = SynthesisParams()
        seeds = [acoustic.synthesis_seed(sentence, params) for sentence in ids]
        best = [float("inf")] * 3
        for _ in range(repeats):
            plans: list = []
            text_side = _cpu_s(lambda plans=plans: plans.extend(acoustic.plan(sentence, params, seed) for sentence, seed in zip(ids, seeds, strict=False)))
            mels: list[np.ndarray] = []
            flow_and_head = _cpu_s(
                lambda mels=mels, plans=plans: mels.extend(np.concatenate(list(acoustic.mel_chunks(plan)), axis=1) for plan in plans)
            )
            vocoding = _cpu_s(lambda mels=mels: [_stream(vocoder, mel) for mel in mels])
            best = [min(old, new) for old, new in zip(best, (text_side, flow_and_head, vocoding), strict=False)]
    finally:
        torch.set_num_threads(threads)
    audio_s = sum(mel.shape[1] for mel in mels) * vocoder.hop_length / vocoder.sample_rate_hz
    return EngineCost(vocoder.stream_backend, *(cost / audio_s for cost in best))


def engine_cost_line(cost: EngineCost) -> str:
    """One engine cost measurement, in words."""
    return (
        f"Stream steps in {cost.stream_backend}: text side {cost.text_side:.4f}, flow + mel head {cost.flow_and_head:.4f}, "
        f"vocoder {cost.vocoder:.4f}, all {cost.total:.4f} CPU s per audio s (one thread, in-process)."
    )


def _stream(vocoder: VocoderEngine, mel: np.ndarray) -> None:
    stream = vocoder.open_stream()
    for start, end in slice_bounds(mel.shape[1], vocoder.hop_length, vocoder.sample_rate_hz):
        stream.push(mel[:, start:end])
    stream.finish()


def _cpu_s(work: Callable[[], object]) -> float:
    started = time.process_time()
    work()
    return time.process_time() - started


def target_line(cost: StreamingCost) -> str:
    """The issue's target with the measured value."""
    verdict = "met" if cost.ratio <= TARGET_RATIO else "MISSED"
    return (
        f"Target streaming vocoder compute <= {TARGET_RATIO}x offline: {cost.ratio:.2f}x, {verdict} "
        f"({cost.streamed:.4f} vs {cost.whole:.4f} CPU s per audio s over {cost.audio_s:.1f} s of audio, one thread, in-process)."
    )


if __name__ == "__main__":
    print(target_line(measure_streaming_cost()))
    for backend in ("auto", "torch"):
        print(engine_cost_line(measure_engine_cost(backend)))
