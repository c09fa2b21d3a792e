"""Mel -> PCM: whole sentences, or slice by slice as mel arrives, with exact trimming (docs/ARCHITECTURE.md, "Exact streaming and resume").

`VocoderStream` vocodes each step of the schedule as soon as its frames are there, on top of the
layer tails the previous steps left (no context is ever recomputed), and returns the samples that
became exact: all but the network's lag, which the sentence's end flushes out. In float32 on a CPU
a stream's steps run in onnxruntime (`libs.models.onnx_stream`), the same steps on the same tails.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import torch

from libs.models.hifigan import Generator
from libs.models.mel_bridge import MelVocoder, load_fast_vocoder, load_mel_vocoder
from libs.models.piper_import import read_voice_config
from libs.models.streaming import NO_END, StepInput, StepOutput, StreamNetwork, StreamState, output_lag
from libs.voice.acoustic_engine import model_version_of
from libs.voice.assets import VoiceAssets, default_voice_assets
from libs.voice.batching import padding_groups
from libs.voice.chunking import LAST_STEP_BUCKET_FRAMES, VOCODER_SCHEDULE, ChunkSchedule
from libs.voice.precision import resolve_precision
from libs.voice.runtime import BatchedEngine, EngineSettings, ModelRuntime, run_stream_steps, stream_version_parts
from libs.voice.tiers import FAST, QUALITY
from libs.wire.errors import InvalidRequestError, echo


class VocoderEngine(BatchedEngine):
    """Mel -> PCM for whole sentences or, through `open_stream`, slice by slice as mel arrives.

    With batching on, the chunk windows of concurrent streams (of any lengths) run as one padded
    batch with per-item lengths; each stream's samples are the same as when it runs alone (to
    float32 round-off).
    """

    def __init__(
        self,
        vocoder: MelVocoder,
        *,
        model_version: str,
        sample_rate_hz: int,
        hop_length: int,
        n_mels: int,
        schedule: ChunkSchedule = VOCODER_SCHEDULE,
        device: str | None = None,
        settings: EngineSettings = EngineSettings(),
    ) -> None:
        if device is not None:
            settings = replace(settings, device=device)
        self._runtime = ModelRuntime(settings, self._step_batch, name="vocoder-batcher")
        self.settings = settings
        self.device = self._runtime.device
        self.vocoder = vocoder.to(self.device).eval()
        self.sample_rate_hz = sample_rate_hz
        self.hop_length = hop_length
        self.n_mels = n_mels
        self.context_frames = vocoder.receptive_field_frames
        self.num_speakers = int(vocoder.speakers.num_embeddings) if vocoder.speakers is not None else 1
        self.schedule = schedule
        self._network = StreamNetwork.vocoder(self.vocoder)
        probe_g = self.vocoder.speaker_conditioning(0)
        self.lag_frames = -(-output_lag(self._network, n_mels, self.device, probe_g) // hop_length)
        """Frames the streamed output lags behind the mel pushed (the last step lets them out)."""
        self._network.first_step_width = schedule.chunk_frames(0)
        # A speaker-conditioned decoder's steps take the speaker too: they have no graphs, and run in torch.
        self._onnx = self._runtime.onnx_network(self._network, "vocoder", n_mels, self.lag_frames + 1, sliced=True) if self.num_speakers <= 1 else None
        self._unsliced_version = model_version
        self.model_version = self._version_with_slices()
        if settings.slice_frames and self.slice_frames is not None:  # pinned: never measured (MeasuredPrecision.settle_slices)
            self.use_slice_frames(settings.slice_frames)
        self.stream_backend = "torch" if self._onnx is None else "onnxruntime"
        """Where a stream's steps run when it runs alone (`EngineSettings.stream_backend`)."""
        # torch pads a stream's last step to a width it has seen before (see LAST_STEP_BUCKET_FRAMES);
        # onnxruntime sets nothing up per width, so there the last step is exactly what is left.
        self.last_step_bucket_frames = LAST_STEP_BUCKET_FRAMES if self._onnx is None else 1
        """A stream's last step is padded to a multiple of this many frames."""
        self.fast_tier: VocoderEngine | None = None
        """The voice's fast tier (libs.voice.tiers), when the worker loaded one beside this engine."""
        self.fast_tier_cost = 0.0
        """What the fast tier's steps cost against this engine's, once measured (0: not measured)."""

    @property
    def slice_frames(self) -> int | None:
        """The fewest frames of a slice a wide step runs in (`OnnxStreamNetwork.slice_frames`); None
        where every step runs whole."""
        return None if self._onnx is None else self._onnx.slice_frames

    def use_slice_frames(self, frames: int) -> None:
        """Run wide steps in slices of at least `frames` frames from now on (the settings' pinned width, or
        one measured cheaper on this machine: `libs.voice.calibration.MeasuredPrecision.settle_slices`).
        Before any stream opens: the model version changes with it."""
        if self._onnx is None or self._onnx.slice_frames is None:
            raise ValueError("this engine runs every step whole: it has no slices to widen")
        if frames < 1:
            raise ValueError(f"a slice needs at least one frame, got {frames}")
        self._onnx.slice_frames = frames
        self.model_version = self._version_with_slices()

    def _version_with_slices(self) -> str:
        # Wide steps in slices move samples by float32 round-off: the version says how wide.
        slices = self.slice_frames
        return self._unsliced_version if slices is None else f"{self._unsliced_version}-s{slices}"

    @classmethod
    def load(
        cls,
        assets: VoiceAssets,
        device: str | None = None,
        schedule: ChunkSchedule = VOCODER_SCHEDULE,
        settings: EngineSettings = EngineSettings(),
    ) -> VocoderEngine:
        """The default voice's vocoder: trained mel adapter + the Piper decoder body (or its fine-tuned copy)."""
        voice = assets.piper_models()
        speakers = voice.acoustic.emb_g if voice.acoustic.config.n_speakers > 1 else None
        vocoder = load_mel_vocoder(assets.trained_dir, voice.decoder, speakers)
        # Like the acoustic side's, the version names the arithmetic: audio heads and resumes are
        # shared only between vocoders whose samples agree bit for bit.
        digests = [voice.onnx_sha256, assets.file_digest(assets.mel_adapter_path), _precision_part(settings, device), schedule.version_part()]
        digests += stream_version_parts(settings, device) if speakers is None else []
        if assets.decoder_path is not None:
            digests.append(assets.file_digest(assets.decoder_path))
        return cls(
            vocoder,
            model_version=model_version_of(assets.name, digests),
            sample_rate_hz=voice.config.sample_rate_hz,
            hop_length=voice.config.hop_length,
            n_mels=int(vocoder.adapter.config.in_channels) if vocoder.adapter is not None else 80,
            schedule=schedule,
            device=device,
            settings=settings,
        )

    @classmethod
    def load_fast(
        cls,
        assets: VoiceAssets,
        device: str | None = None,
        schedule: ChunkSchedule = VOCODER_SCHEDULE,
        settings: EngineSettings = EngineSettings(),
    ) -> VocoderEngine | None:
        """The voice's fast tier (libs.voice.tiers): its small mel-in generator, streamed, batched and
        resumed exactly as the quality tier is; None for a voice without one."""
        path = assets.fast_vocoder_path
        if path is None:
            return None
        voice_config = read_voice_config(assets.config_path)
        vocoder = load_fast_vocoder(path)
        digests = ["fast", assets.file_digest(path), assets.file_digest(path.with_suffix(".json")), _precision_part(settings, device), schedule.version_part()]
        return cls(
            vocoder,
            model_version=model_version_of(assets.name, [*digests, *stream_version_parts(settings, device)]),
            sample_rate_hz=voice_config.sample_rate_hz,
            hop_length=voice_config.hop_length,
            n_mels=vocoder.decoder.config.in_channels,
            schedule=schedule,
            device=device,
            settings=settings,
        )

    @classmethod
    def load_hifigan(
        cls,
        generator: Generator,
        sample_rate_hz: int,
        device: str | None = None,
        schedule: ChunkSchedule = VOCODER_SCHEDULE,
        settings: EngineSettings = EngineSettings(),
    ) -> VocoderEngine:
        """A public HiFi-GAN generator (mel in) as the vocoder."""
        weights = hashlib.sha256(repr(generator.config).encode())
        for name, tensor in sorted(generator.state_dict().items()):
            weights.update(name.encode() + tensor.detach().cpu().contiguous().numpy().tobytes())
        return cls(
            MelVocoder(None, generator),
            model_version=model_version_of(
                "hifigan", [weights.hexdigest(), _precision_part(settings, device), schedule.version_part(), *stream_version_parts(settings, device)]
            ),
            sample_rate_hz=sample_rate_hz,
            hop_length=generator.config.hop_length,
            n_mels=generator.config.in_channels,
            schedule=schedule,
            device=device,
            settings=settings,
        )

    @classmethod
    def load_default(cls, device: str | None = None, settings: EngineSettings = EngineSettings()) -> VocoderEngine:
        """The default voice."""
        return cls.load(default_voice_assets(), device=device, settings=settings)

    def for_tier(self, tier: str) -> VocoderEngine:
        """The engine that speaks `tier` ("" or quality: this one); InvalidRequestError for a tier
        this voice does not have here."""
        if tier in ("", QUALITY):
            return self
        if tier == FAST and self.fast_tier is not None:
            return self.fast_tier
        raise InvalidRequestError(f"this vocoder has no {echo(tier)} tier of this voice; use {QUALITY}" +
                                  (f" or {FAST}" if self.fast_tier is not None else ""), field="tier")  # fmt: skip

    def vocode(self, mel: np.ndarray, speaker_id: int = 0) -> np.ndarray:
        """Samples of a whole sentence's mel [n_mels, frames] in one pass (never batched)."""
        return self._vocode_batch([mel], speaker_id)[0]

    def speaker_conditioning(self, speaker_id: int) -> torch.Tensor | None:
        """The decoder's conditioning [gin, 1] of `speaker_id` (None for a one-speaker voice);
        ValueError for a speaker the voice does not have."""
        if not 0 <= speaker_id < self.num_speakers:
            raise ValueError(f"speaker {speaker_id} does not exist; this voice has speakers 0 to {self.num_speakers - 1}")
        return self.vocoder.speaker_conditioning(speaker_id)

    def vocode_step(self, job: StepInput) -> StepOutput:
        """One stream step, batched with other streams' steps when batching is on."""
        return self._runtime.run(job)

    def start_waits(self) -> list[tuple[int, float]]:
        """The steps a listener that holds only its first step's audio waits on in turn, each with the
        audio the steps between give it meanwhile: (frames, seconds). A listener alone runs its steps
        whole (`Scheduler.steps_in_parts`), so its next audio is the whole second step (32 frames, not
        the longest step's 128), and each later step has the audio of the ones before it to cover it.
        The list ends where the steps stop growing: those after it are no wider and come with more
        audio given."""
        frame_s = self.hop_length / self.sample_rate_hz
        waits: list[tuple[int, float]] = []
        given_s, index = 0.0, 1
        while True:
            width = self.schedule.chunk_frames(index)
            waits.append((width, given_s))
            if self.schedule.chunk_frames(index + 1) <= width:
                return waits
            given_s += width * frame_s
            index += 1

    def step_parts(self, job: StepInput) -> list[tuple[int, int]]:
        """The frames [begin, end) of `job` that each part of its step covers when it runs a part at a
        time: the slices onnxruntime runs it in (`OnnxStreamNetwork.slice_bounds`), so that the parts,
        each a step of its own, make exactly the calls and the samples of the whole step. One part
        where the step runs whole (a stream's first, in torch, or too narrow to slice)."""
        width = int(job.frames.shape[1])
        if job.state is None or self._onnx is None or not self._onnx.accepts(job):
            return [(0, width)]
        return self._parts_of(width)

    def _parts_of(self, width: int) -> list[tuple[int, int]]:
        return [(0, width)] if self._onnx is None else self._onnx.slice_bounds(width)

    @torch.inference_mode()
    def _vocode_batch(self, mels: Sequence[np.ndarray], speaker_id: int = 0) -> list[np.ndarray]:
        """Vocode whole mel sequences of one speaker in one pass each (several at once: padded and masked)."""
        g = self.speaker_conditioning(speaker_id)
        outputs: list[np.ndarray] = [np.empty(0, dtype=np.float32)] * len(mels)
        widths = [int(mel.shape[1]) for mel in mels]
        hop = self.hop_length
        for group in padding_groups(widths):
            width = widths[group[0]]
            batch = torch.zeros(len(group), self.n_mels, width)
            for row, index in enumerate(group):
                batch[row, :, : widths[index]] = torch.from_numpy(np.asarray(mels[index], dtype=np.float32))
            # A lone item needs no mask: its solo run is then bit-identical to max_batch 1.
            lengths = torch.tensor([widths[index] for index in group]) if len(group) > 1 else None
            with self._runtime.autocast():
                conditioning = None if g is None else g.unsqueeze(0).expand(len(group), -1, -1).to(self.device)
                audio = self.vocoder(batch.to(self.device), None if lengths is None else lengths.to(self.device), conditioning)
            audio = audio.float().cpu()
            for row, index in enumerate(group):
                outputs[index] = audio[row, : widths[index] * hop].numpy()
        return outputs

    def _step_batch(self, jobs: Sequence[StepInput]) -> list[StepOutput]:
        """Several streams' steps; streams of similar step sizes run as one padded call."""
        return run_stream_steps(self._network, jobs, self._runtime, self.lag_frames + 1, self._onnx)

    def resume_origin_frame(self, emit_from_frame: int) -> int:
        """First frame to prime a resumed stream with so that it is bit-identical to the stream it
        replaces: the sentence's first, since each step builds on the layer tails of all before it."""
        return 0

    def open_stream(self, origin_frame: int = 0, emit_from_frame: int | None = None, speaker_id: int = 0) -> VocoderStream:
        """A stream for one sentence of `speaker_id`. `origin_frame` is the sentence frame index of
        the first mel frame that will be pushed; samples are returned from `emit_from_frame` on
        (default: the origin). A stream that starts mid-sentence must be primed with at least
        `context_frames` of real mel before the first frame it emits."""
        emit_from = origin_frame if emit_from_frame is None else emit_from_frame
        return VocoderStream(self, origin_frame, emit_from, self.speaker_conditioning(speaker_id))

    def warm_up(self) -> None:
        """Vocode a short stretch of silence-like mel, whole and streamed through every kind of
        step, so the first real request pays no first-call costs (the packing of the first step's
        kernels, and each onnxruntime graph's first run, included)."""
        silence = np.full((self.n_mels, 3 * 32 + 8), -5.0, dtype=np.float32)
        self.vocode(silence[:, :32])
        for frames in (silence.shape[1], 8):  # a first, a later and a last step; a one-step sentence
            stream = self.open_stream()
            stream.push(silence[:, :frames])
            stream.finish()


@dataclass
class VocoderStream:
    """One sentence's incremental vocoding: push mel frames, get back the samples that are exact.

    `push` and `finish` run every step that is ready. A server that must answer after each step
    (first audio should not wait for the rest of a long message) uses `add`, `end`, `step_ready` and
    `step` instead, and keeps `add` on its event loop and `step` off it. The stream keeps each layer's input tail between steps (libs.models.streaming), so every frame
    is vocoded once. Steps follow the engine's schedule by frame index from the first frame pushed,
    whenever and however the frames arrive, so the samples do not depend on timing. A stream
    resumed on another worker and fed the sentence from frame 0 (`VocoderEngine.resume_origin_frame`)
    continues bit-identically (fp32 or bf16, without batching); one primed with just `context_frames`
    before its first emitted frame is exact to float round-off.
    """

    engine: VocoderEngine
    origin_frame: int
    """Sentence frame index of the first frame pushed."""
    emit_from_frame: int
    """First sentence frame whose samples are returned."""
    g: torch.Tensor | None = None
    """The speaker's conditioning [gin, 1] (None for a one-speaker voice)."""
    in_parts: bool = False
    """Whether a step taken from here on runs a part at a time (`VocoderEngine.step_parts`), each
    `step` one part: its samples then come as each part is done, the very samples of the whole step,
    so the caller may choose step by step (a listener about to need the audio gets its first part
    sooner; one that holds plenty saves the calls)."""
    _pending: list[np.ndarray] = field(default_factory=list)
    _pending_frames: int = 0
    _next_step_frame: int = 0
    _step_index: int = 0
    _state: StreamState | None = None
    _current: _TakenStep | None = None
    _ended: bool = False
    _done: bool = False

    def __post_init__(self) -> None:
        if not 0 <= self.origin_frame <= self.emit_from_frame:
            raise ValueError(f"need 0 <= origin_frame <= emit_from_frame, got {self.origin_frame}, {self.emit_from_frame}")
        needed_from = max(0, self.emit_from_frame - self.engine.context_frames)
        if self.origin_frame > needed_from:
            raise ValueError(
                f"a stream resumed at frame {self.emit_from_frame} needs mel context from frame {needed_from} on "
                f"({self.engine.context_frames} frames before it), but starts at frame {self.origin_frame}"
            )
        self._next_step_frame = self.origin_frame

    @property
    def frames_received(self) -> int:
        """Sentence frame index one past the last frame pushed."""
        return self._next_step_frame + self._pending_frames

    @property
    def done(self) -> bool:
        """Whether the sentence's last step has run."""
        return self._done

    @property
    def step_continues(self) -> bool:
        """Whether the step that `step` last ran a part of has parts still to run."""
        return self._current is not None

    def add(self, mel: np.ndarray) -> None:
        """Add frames [n_mels, n] without vocoding anything (cheap: call it anywhere)."""
        if self._ended:
            raise ValueError("the stream has ended: no more frames can be added")
        if mel.ndim != 2 or mel.shape[0] != self.engine.n_mels:
            raise ValueError(f"mel must be [{self.engine.n_mels}, frames], got {list(mel.shape)}")
        if mel.shape[1]:
            self._pending.append(np.asarray(mel, dtype=np.float32))
            self._pending_frames += mel.shape[1]

    def end(self) -> None:
        """The sentence has no more frames: its last step may run."""
        self._ended = True

    @property
    def next_step_frames(self) -> int:
        """Mel frames the next `step` takes (a part of a step, or a last step: what is left): what it costs by."""
        if self.step_ready() and (current := self._taken()) is not None:
            begin, end = current.parts[0]
            return end - begin
        size = self.engine.schedule.chunk_frames(self._step_index)
        return size if self._pending_frames >= size or not self._ended else self._pending_frames

    def step_ready(self) -> bool:
        """Whether `step` has work: a part of a step, a whole step of frames, or the last step of an ended sentence."""
        if self._current is not None:
            return True
        if self._done:
            return False
        return self._ended or self._pending_frames >= self.engine.schedule.chunk_frames(self._step_index)

    def step(self) -> np.ndarray:
        """Run the next step, or the next part of one (model work); return the float32 samples that
        became exact (maybe none)."""
        if not self.step_ready():
            raise RuntimeError("no step is ready: add frames, or end the stream")
        current = self._taken()
        if current is None:  # an ended sentence with no frames to vocode
            self._done = True
            return np.zeros(0, dtype=np.float32)
        return self._run_part(current)

    def push(self, mel: np.ndarray) -> np.ndarray:
        """Add frames [n_mels, n]; return float32 samples that became exact (maybe none)."""
        self.add(mel)
        ready: list[np.ndarray] = []
        while self._current is not None or self._pending_frames >= self.engine.schedule.chunk_frames(self._step_index):
            ready.append(self.step())
        return np.concatenate(ready) if ready else np.zeros(0, dtype=np.float32)

    def finish(self) -> np.ndarray:
        """The sentence ended: return every remaining sample."""
        self.end()
        ready: list[np.ndarray] = []
        while self.step_ready():
            ready.append(self.step())
        return np.concatenate(ready) if ready else np.zeros(0, dtype=np.float32)

    def _take(self, frames: int) -> np.ndarray:
        if not self._pending:
            return np.zeros((self.engine.n_mels, 0), dtype=np.float32)
        joined = np.concatenate(self._pending, axis=1) if len(self._pending) != 1 else self._pending[0]
        self._pending = [joined[:, frames:]] if joined.shape[1] > frames else []
        self._pending_frames -= frames
        return joined[:, :frames]

    def _taken(self) -> _TakenStep | None:
        """The step in progress, or the next one taken from the pending frames (call only when
        `step_ready`); None for an ended sentence that has no frames at all."""
        if self._current is not None:
            return self._current
        size = self.engine.schedule.chunk_frames(self._step_index)
        total: int | None = None
        if self._pending_frames < size:  # the sentence has ended: its last step takes what is left
            total = self.frames_received
            if total == self.origin_frame:
                return None
        frames = self._take(size if total is None else self._pending_frames)
        start = self._next_step_frame
        self._next_step_frame += frames.shape[1]
        if total is not None:
            # Past the end every frame is edge padding (masked to zeros), so a last step may be
            # wider: a width seen before reuses the CPU's compiled convolutions (a new one costs a
            # set-up longer than the step itself in torch), and last steps vary in length.
            bucket = self.engine.last_step_bucket_frames
            frames = np.pad(frames, ((0, 0), (0, -frames.shape[1] % bucket)))
        job = StepInput(torch.from_numpy(np.ascontiguousarray(frames)), start, self.origin_frame, NO_END if total is None else total, self._state, self.g)
        parts = self.engine.step_parts(job) if self.in_parts else [(0, int(job.frames.shape[1]))]
        self._current = _TakenStep(job, parts)
        return self._current

    def _run_part(self, current: _TakenStep) -> np.ndarray:
        """Vocode the next part of `current` on top of the kept layer tails; return the samples to emit."""
        begin, end = current.parts.pop(0)
        job = current.job
        width = int(job.frames.shape[1])
        if (begin, end) != (0, width):
            high = job.high if end == width else NO_END
            job = StepInput(job.frames[:, begin:end], job.start + begin, job.low, high, self._state, job.g)
        output = self.engine.vocode_step(job)
        self._state = output.state
        last_part = not current.parts
        ends_sentence = last_part and current.job.high != NO_END
        if last_part:
            self._current = None
            self._step_index += 1
            self._done = ends_sentence
        hop = self.engine.hop_length
        samples = output.values[0]
        stop = current.job.high * hop - output.first_position if ends_sentence else len(samples)
        begin_sample = max(0, self.emit_from_frame * hop - output.first_position)
        return samples[begin_sample:stop].numpy() if stop > begin_sample else np.zeros(0, dtype=np.float32)


@dataclass
class _TakenStep:
    """A step of the schedule taken from a stream's pending frames, run a part at a time."""

    job: StepInput
    """The whole step (a sentence's last names its frames in `high`)."""
    parts: list[tuple[int, int]]
    """The parts still to run: [begin, end) of the step's frames."""


def _precision_part(settings: EngineSettings, device: str | None) -> str:
    """The model-version part that names the arithmetic the vocoder runs in."""
    return f"precision={resolve_precision(settings.precision, device or settings.device)}"
