"""Phoneme ids -> mel frames (docs/ARCHITECTURE.md, "Mel recipe"), exact under any chunking.

The text encoder and durations run once per sentence and draw all of the sentence's noise up
front from its seed; the mel then comes in growing chunks: the flow and the mel head over each
chunk plus their receptive field of latent context, trimmed back. On a CPU the text encoder (and,
for a single-speaker voice, the stochastic duration predictor, in the same graph) runs in
onnxruntime (`libs.models.onnx_encoder`), in float32 whatever the precision setting; in float32 the
flow and mel head's steps do too (`libs.models.onnx_stream`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Final

import numpy as np
import torch

from libs.models.commons import sequence_mask
from libs.models.mel_bridge import MelHead, load_mel_head
from libs.models.onnx_encoder import OnnxFrontEnd, OnnxTextEncoder, onnx_durations_supported, onnx_encoder_supported
from libs.models.onnx_stream import OnnxStreamNetwork
from libs.models.streaming import NO_END, StepInput, StepOutput, StreamNetwork, output_lag
from libs.models.vits import (
    EncoderOutput,
    VitsAcoustic,
    VitsConfig,
    duration_noise,
    flow_receptive_field_frames,
    frames_from_log_durations,
    synthesis_generator,
)
from libs.voice.assets import VoiceAssets, default_voice_assets
from libs.voice.batching import padding_groups
from libs.voice.chunking import ACOUSTIC_SCHEDULE, ChunkSchedule, context_window
from libs.voice.inputs import SynthesisInputs, SynthesisParams
from libs.voice.precision import resolve_precision
from libs.voice.runtime import BatchedEngine, EngineSettings, ModelRuntime, run_stream_steps, stream_version_parts

ENCODER_BACKENDS: Final = ("onnxruntime", "torch")


@dataclass
class SentencePlan:
    """A sentence after the text encoder and the duration predictor: everything but the frames."""

    z_p: torch.Tensor
    """Prior sample for the whole sentence [1, latent, frames]; all of the sentence's noise."""
    g: torch.Tensor | None
    """Speaker conditioning, or None for a single-speaker voice."""
    phoneme_frames: list[int]
    """Frames given to each phoneme id, in order (the alignment)."""

    @property
    def frame_count(self) -> int:
        """Frames in the sentence."""
        return int(self.z_p.size(-1))


@dataclass(frozen=True)
class SpokenPart:
    """The frames of a span of a planned sentence's phoneme ids, and the prior that makes them."""

    plan: SentencePlan
    """The plan to stream (`AcousticEngine.mel_chunks`): the whole sentence's, or its prior over the
    span with the latent context around it."""
    skip_frames: int
    """Frames `plan` makes before the span's first (left context, not spoken)."""
    frame_count: int
    """Frames the span speaks."""
    phoneme_frames: list[int]
    """Frames given to each spoken id, in order."""


def model_version_of(voice_name: str, parts: Sequence[str]) -> str:
    """`voice_name` plus a short digest of everything else the output is a function of."""
    digest = hashlib.sha256("\n".join(parts).encode("utf-8")).hexdigest()
    return f"{voice_name}-{digest[:12]}"


def default_encoder_backend(config: VitsConfig, device: str | torch.device) -> str:
    """"onnxruntime" for a CPU engine whose text encoder has no speaker input, else "torch".

    On a CPU onnxruntime runs the float32 encoder faster than torch (on its two threads, faster than
    torch in bf16 on one). On a GPU torch keeps the work on the device, and a speaker-conditioned
    encoder has no exported graph.
    """
    if torch.device(device).type == "cpu" and onnx_encoder_supported(config):
        return "onnxruntime"
    return "torch"


def encoder_version_part(config: VitsConfig, encoder_backend: str) -> str:
    """The model-version part naming where the encoder and the duration predictor run.

    With the onnxruntime encoder, a stochastic duration predictor without speaker input runs in the
    same graph ("+sdp"); either backend moves durations by round-off.
    """
    if encoder_backend == "onnxruntime" and onnx_durations_supported(config):
        return "encoder=onnxruntime+sdp"
    return f"encoder={encoder_backend}"


@dataclass(frozen=True)
class _MelWindowJob:
    """One chunk's flow + mel head work: a latent window and which of its frames to keep."""

    z_p: torch.Tensor
    """Prior samples over the chunk's context window [1, latent, frames]."""
    g: torch.Tensor | None
    """Speaker conditioning [1, gin, 1], or None."""
    trim_left: int
    """Frames of left context to drop from the output."""
    kept: int
    """Frames of the chunk itself."""


class AcousticEngine(BatchedEngine):
    """Phoneme ids -> mel frames, in chunks that are exact slices of the whole.

    With batching on, the flow + mel head windows of concurrent sentences run as one padded,
    masked batch; each sentence's mel is the same as when it runs alone (to float32 round-off).
    """

    def __init__(
        self,
        acoustic: VitsAcoustic,
        mel_head: MelHead,
        *,
        voice_name: str,
        model_version: str,
        sample_rate_hz: int,
        hop_length: int,
        schedule: ChunkSchedule = ACOUSTIC_SCHEDULE,
        device: str | None = None,
        settings: EngineSettings = EngineSettings(),
        encoder_backend: str | None = None,
    ) -> None:
        """`encoder_backend` is "onnxruntime" or "torch"; None takes `default_encoder_backend`.

        With "onnxruntime", a single-speaker voice's stochastic duration predictor runs there too.
        The backend moves durations by round-off, so it belongs in `model_version` (`load` puts
        `encoder_version_part` there).
        """
        if device is not None:
            settings = replace(settings, device=device)
        self._runtime = ModelRuntime(settings, self._step_batch, name="acoustic-batcher")
        self.settings = settings
        self.device = self._runtime.device
        self.acoustic = acoustic.to(self.device).eval()
        self.mel_head = mel_head.to(self.device).eval()
        self.voice_name = voice_name
        self.model_version = model_version
        self.sample_rate_hz = sample_rate_hz
        self.hop_length = hop_length
        self.n_mels = int(mel_head.config.out_channels)
        self.num_speakers = int(acoustic.config.n_speakers)
        self.schedule = schedule
        # Transformer flows see the whole sentence (None): the latent is then computed once, unchunked.
        self.flow_context_frames = flow_receptive_field_frames(acoustic.config)
        self.head_context_frames = mel_head.receptive_field_frames
        self.encoder_backend = encoder_backend or default_encoder_backend(acoustic.config, self.device)
        self._front_end, self._onnx_encoder = self._load_onnx_graphs()
        # A convolutional flow and the mel head stream: each step computes only new frames.
        self._network: StreamNetwork | None = None
        self._onnx: OnnxStreamNetwork | None = None
        self.lag_frames = 0
        """Frames the streamed mel lags behind the prior samples fed (the first step's extra input)."""
        if self.flow_context_frames is not None:
            self._network = StreamNetwork.latent_to_mel(self.acoustic.flow, self.mel_head)
            probe_g = torch.zeros(acoustic.config.gin_channels, 1) if self.num_speakers > 1 else None
            self.lag_frames = output_lag(self._network, acoustic.config.inter_channels, self.device, probe_g)
            self._network.first_step_width = schedule.chunk_frames(0) + self.lag_frames
            if self.num_speakers <= 1:  # the step graphs take no speaker input
                channels = acoustic.config.inter_channels
                self._onnx = self._runtime.onnx_network(self._network, "flow-head", channels, self.lag_frames + 1)
        self.stream_backend = "torch" if self._onnx is None else "onnxruntime"
        """Where a sentence's flow + mel head steps run (`EngineSettings.stream_backend`; a
        multi-speaker voice's stay in torch)."""

    def _load_onnx_graphs(self) -> tuple[OnnxFrontEnd | None, OnnxTextEncoder | None]:
        """(front end, encoder): the onnxruntime graph the text side runs in, or neither for "torch"."""
        if self.encoder_backend not in ENCODER_BACKENDS:
            raise ValueError(f"encoder_backend must be one of {ENCODER_BACKENDS}, got {self.encoder_backend!r}")
        if self.encoder_backend == "torch":
            return None, None
        if self.device.type != "cpu":
            raise ValueError(f"the onnxruntime text encoder runs on the CPU; this engine is on {self.device}: use 'torch'")
        if not onnx_encoder_supported(self.acoustic.config):
            raise ValueError("this voice's text encoder is speaker-conditioned and has no onnxruntime graph: use 'torch'")
        if onnx_durations_supported(self.acoustic.config):
            return OnnxFrontEnd.load(self.acoustic, device=self.device), None
        return None, OnnxTextEncoder.load(self.acoustic, device=self.device)

    @classmethod
    def load(
        cls,
        assets: VoiceAssets,
        device: str | None = None,
        schedule: ChunkSchedule = ACOUSTIC_SCHEDULE,
        settings: EngineSettings = EngineSettings(),
    ) -> AcousticEngine:
        """The acoustic model of `assets` (a Piper voice + the trained mel head)."""
        voice = assets.piper_models()
        head = load_mel_head(assets.mel_head_path)
        if device is not None:
            settings = replace(settings, device=device)
        backend = default_encoder_backend(voice.acoustic.config, settings.device)
        # The arithmetic is part of what the mel is a function of: workers that compute it differently
        # (bf16 or fp32, encoder in onnxruntime or torch) never share cache entries.
        parts = [
            voice.onnx_sha256,
            assets.file_digest(assets.mel_head_path),
            f"precision={resolve_precision(settings.precision, settings.device)}",
            encoder_version_part(voice.acoustic.config, backend),
            # Only a single-speaker voice's steps have graphs (they take no speaker input).
            *(stream_version_parts(settings) if voice.acoustic.config.n_speakers <= 1 else []),
            schedule.version_part(),
        ]
        version = model_version_of(assets.name, parts)
        return cls(
            voice.acoustic,
            head,
            voice_name=assets.name,
            model_version=version,
            sample_rate_hz=voice.config.sample_rate_hz,
            hop_length=voice.config.hop_length,
            schedule=schedule,
            settings=settings,
            encoder_backend=backend,
        )

    @classmethod
    def load_default(cls, device: str | None = None, settings: EngineSettings = EngineSettings()) -> AcousticEngine:
        """The default voice."""
        return cls.load(default_voice_assets(), device=device, settings=settings)

    def synthesis_seed(self, phoneme_ids: Sequence[int], params: SynthesisParams) -> int:
        """The seed of every random draw of this sentence (docs/ARCHITECTURE.md, "Determinism")."""
        return SynthesisInputs(self.model_version, self.voice_name, tuple(phoneme_ids), params).seed()

    @torch.inference_mode()
    def plan(self, phoneme_ids: Sequence[int], params: SynthesisParams, seed: int, wide: bool = False) -> SentencePlan:
        """Encoder and durations for one sentence, with all of its noise drawn from `seed`; `wide`
        spreads an onnxruntime text side over all its threads (for a sentence whose first audio is
        awaited while the machine is otherwise idle). Threads do not change the numbers.

        The text encoder and the duration predictor always run in float32, whatever the precision
        (which applies to the flow and mel head): durations are rounded up to whole frames, and less
        precision here moves frames and costs more DNSMOS than the bound allows (bf16 and int8 were
        tried: docs/performance.md, "History"). The backend (onnxruntime or torch) still moves durations by
        round-off, so it is part of the model version (and so of every cache key); each combination
        is deterministic.
        """
        if not phoneme_ids:
            raise ValueError("phoneme_ids is empty: a sentence needs at least one phoneme id")
        if not 0 <= params.speaker_id < max(1, self.num_speakers):
            raise ValueError(f"speaker_id {params.speaker_id} is out of range: this voice has {self.num_speakers} speaker(s)")
        generator = synthesis_generator(seed)
        ids = torch.as_tensor(list(phoneme_ids), dtype=torch.long, device=self.device).unsqueeze(0)
        speaker = params.speaker_id if self.num_speakers > 1 else None
        if self._front_end is not None:
            encoded, durations = self._front_end_durations(ids, generator, params, wide)
        else:
            encoded = self._encode(ids, speaker, wide)
            durations = self.acoustic.durations(encoded, generator, noise_w=params.noise_w, length_scale=1.0 / params.speed)
        prior = self.acoustic.expand(encoded, durations, generator, noise_scale=params.noise_scale)
        return SentencePlan(prior.z_p, encoded.g, [int(d) for d in durations[0].tolist()])

    def spoken_part(self, plan: SentencePlan, first_id: int = 0, end_id: int | None = None) -> SpokenPart:
        """The frames of ids [first_id, end_id) of `plan`'s sentence (end None: to its end).

        The whole sentence is the plan itself. A span streams the sentence's prior over its frames
        with the flow and mel head's receptive field on both sides (`context_window`), so its mel is
        the whole sentence's mel there, to float32 round-off: the rest of a sentence whose opening
        was spoken on its own keeps the prosody of the sentence it belongs to.
        """
        ids = len(plan.phoneme_frames)
        end_id = ids if end_id is None else end_id
        if not 0 <= first_id < end_id <= ids:
            raise ValueError(f"ids {first_id}..{end_id} are not a span of the sentence's {ids} ids")
        if first_id == 0 and end_id == ids:
            return SpokenPart(plan, 0, plan.frame_count, list(plan.phoneme_frames))
        start = sum(plan.phoneme_frames[:first_id])
        end = start + sum(plan.phoneme_frames[first_id:end_id])
        if end <= start:
            raise ValueError(f"ids {first_id}..{end_id} of the sentence were given no frames")
        context = (self.flow_context_frames or plan.frame_count) + self.head_context_frames
        window = context_window(start, end, plan.frame_count, context)
        prior = SentencePlan(plan.z_p[:, :, window.input_start : window.input_end], plan.g, [])
        return SpokenPart(prior, window.trim_left, window.kept, list(plan.phoneme_frames[first_id:end_id]))

    def _encode(self, ids: torch.Tensor, speaker: int | None, wide: bool) -> EncoderOutput:
        """The text encoder's float32 output for ids [1, tokens]."""
        if self._onnx_encoder is None:
            return self.acoustic.encode(ids, speaker_id=speaker)
        encoded = self._onnx_encoder.encode(ids, wide)
        # This encoder takes no speaker input, but the speaker still conditions the durations and the flow.
        encoded.g = self.acoustic.speaker_embedding(speaker, 1, self.device)
        return encoded

    def _front_end_durations(
        self, ids: torch.Tensor, generator: torch.Generator, params: SynthesisParams, wide: bool
    ) -> tuple[EncoderOutput, torch.Tensor]:
        """The front-end graph's prior and frames per token [1, tokens] for a single-speaker voice;
        its noise is drawn from `generator` as torch's path draws it (before the prior's)."""
        assert self._front_end is not None
        tokens = ids.size(1)
        lengths = torch.full((1,), tokens, dtype=torch.long)
        m_p, logs_p, logw = self._front_end.run(ids, duration_noise(lengths, tokens, generator, params.noise_w), wide)
        x_mask = torch.ones(1, 1, tokens)
        return EncoderOutput(None, m_p, logs_p, x_mask, lengths, None), frames_from_log_durations(logw, x_mask, 1.0 / params.speed)

    def mel_whole(self, plan: SentencePlan) -> np.ndarray:
        """The sentence's mel in one pass [n_mels, frames]: the reference chunked output must equal."""
        return self._mel_window_batch([self._window_job(plan, 0, plan.frame_count, plan.frame_count)])[0]

    def mel_chunks(self, plan: SentencePlan, start_frame: int = 0) -> Iterator[np.ndarray]:
        """The sentence's mel from `start_frame` on, as float32 [n_mels, n] chunks in order.

        The flow and the mel head stream (libs.models.streaming): the first step takes the
        schedule's first chunk plus the network's lag of prior samples and gives that first chunk
        of mel; each later step gives as many frames as it takes, the last one everything left (a
        step that would leave only a few frames takes them: ChunkSchedule.step_ends).
        Each step is one job for the batcher (when batching is on): call `next` from the stream's
        own thread, and concurrent sentences share batched calls. A stream resumed at
        `start_frame` runs the same steps from the start and drops what comes before, so its mel is
        bit-identical to the uninterrupted stream's.
        """
        total = plan.frame_count
        if not 0 <= start_frame <= total:
            raise ValueError(f"start_frame {start_frame} is outside the sentence's {total} frames")
        if self._network is None:
            whole = self.mel_whole(plan)
            for start, end in self.schedule.bounds(total, start_frame):
                yield whole[:, max(start, start_frame) : end]
            return
        position, state = 0, None
        for end in self.schedule.step_ends(total, self.lag_frames):
            job = StepInput(
                plan.z_p[0, :, position:end],
                start=position,
                low=0,
                high=total if end == total else NO_END,
                state=state,
                g=None if plan.g is None else plan.g[0],
            )
            output = self._runtime.run(job)
            state, position = output.state, end
            first = output.first_position
            begin, stop = max(start_frame, first), min(total, first + output.values.shape[1])
            if stop > begin:
                yield output.values[:, begin - first : stop - first].numpy()

    def step_frames(self, total_frames: int) -> list[int]:
        """Prior frames each of `mel_chunks`'s steps takes for a sentence of `total_frames` (its first
        step takes the network's lag on top of the schedule's first chunk): what each step costs by."""
        if self._network is None:
            return [end - start for start, end in self.schedule.bounds(total_frames)]
        ends = self.schedule.step_ends(total_frames, self.lag_frames)
        return [end - start for start, end in zip([0, *ends], ends, strict=False)]

    def _step_batch(self, jobs: Sequence[StepInput]) -> list[StepOutput]:
        """Several sentences' steps; steps of similar sizes run as one padded call."""
        assert self._network is not None
        return run_stream_steps(self._network, jobs, self._runtime, self.lag_frames + 1, self._onnx)

    def _window_job(self, plan: SentencePlan, start: int, end: int, total: int) -> _MelWindowJob:
        context = (self.flow_context_frames or total) + self.head_context_frames
        window = context_window(start, end, total, context)
        return _MelWindowJob(plan.z_p[:, :, window.input_start : window.input_end], plan.g, window.trim_left, window.kept)

    @torch.inference_mode()
    def _mel_window_batch(self, jobs: Sequence[_MelWindowJob]) -> list[np.ndarray]:
        """Flow + mel head over several windows, padded and masked so each equals its solo run."""
        mels: list[np.ndarray] = [np.empty(0)] * len(jobs)
        widths = [int(job.z_p.size(-1)) for job in jobs]
        for group in padding_groups(widths):
            width = widths[group[0]]
            z_p = torch.zeros(len(group), jobs[group[0]].z_p.size(1), width, device=self.device)
            for row, index in enumerate(group):
                z_p[row, :, : widths[index]] = jobs[index].z_p
            lengths = torch.tensor([widths[index] for index in group], device=self.device)
            mask = sequence_mask(lengths, width).unsqueeze(1).to(z_p.dtype)
            g = None if jobs[group[0]].g is None else torch.cat([jobs[index].g for index in group])
            with self._runtime.autocast():
                z = self.acoustic.flow_inverse(z_p, mask, g)
                # A lone item needs no mask: its solo run is then bit-identical to max_batch 1.
                mel = self.mel_head(z, lengths if len(group) > 1 else None)
            mel = mel.float().cpu()
            for row, index in enumerate(group):
                job = jobs[index]
                mels[index] = mel[row, :, job.trim_left : job.trim_left + job.kept].numpy()
        return mels

    def warm_up(self) -> None:
        """Run one short sentence, and a long sentence's first and last steps, so the first real
        request pays no first-call costs (onnxruntime's, and the packing of the first step's kernels,
        included)."""
        ids = [1, 0, 20, 0, 59, 0, 24, 0, 27, 0, 2]
        plan = self.plan(ids, SynthesisParams(), seed=0)
        for _ in self.mel_chunks(plan):
            pass
        if self._network is not None and self._network.first_step_width is not None:
            first, last = self._network.first_step_width, 8
            prior = torch.zeros(self.acoustic.config.inter_channels, first + last, device=self.device)
            g = None if plan.g is None else plan.g[0]
            head = self._runtime.run(StepInput(prior[:, :first], start=0, low=0, high=NO_END, state=None, g=g))
            self._runtime.run(StepInput(prior[:, first:], start=first, low=0, high=first + last, state=head.state, g=g))
