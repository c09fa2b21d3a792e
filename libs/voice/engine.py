"""The synthesis engines the workers serve: phoneme ids -> mel chunks, and mel -> PCM, both exact
under any chunking (DESIGN §4, §5).

`AcousticEngine` runs the text encoder and durations once per sentence, draws all of the
sentence's noise up front from its seed, then produces the mel in growing chunks: the flow and the
mel head over each chunk plus their receptive field of latent context, trimmed back.
`VocoderStream` keeps a sentence's mel, vocodes whatever has become exact (right context present,
or the sentence ended) and returns only the new samples.
"""

from __future__ import annotations

import contextlib
import hashlib
from dataclasses import dataclass, field, replace
from typing import Callable, Final, Iterator, Sequence

import numpy as np
import torch
from torch import nn

from libs.models.commons import sequence_mask
from libs.models.hifigan import Generator, receptive_field_frames
from libs.models.mel_bridge import MelAdapter, MelHead, load_mel_adapter, load_mel_head
from libs.models.vits import VitsAcoustic, flow_receptive_field_frames, synthesis_generator, synthesis_seed
from libs.voice.assets import VoiceAssets, default_voice_assets
from libs.voice.batching import BatchingConfig, BatchStats, MicroBatcher, padding_groups
from libs.voice.chunking import ACOUSTIC_SCHEDULE, VOCODER_SCHEDULE, ChunkSchedule, context_window

DEFAULT_NOISE_SCALE: Final = 0.667
DEFAULT_NOISE_W: Final = 0.8
PRECISIONS: Final = ("fp32", "bf16")
DEFAULT_PRECISION: Final = "fp32"
# What a vocoder worker should serve with (the engines default to fp32, which the exactness tests
# need). Measured on this project's CPU (AVX-512 BF16): bf16 autocast vocodes 1.5-3x faster than
# fp32, and DNSMOS OVRL on 20 held-out texts moved from 3.217 to 3.209 (-0.008, bar: 0.02). The
# acoustic side stays fp32: its mel is cached and a resumed sentence must continue the same mel,
# and in bf16 the flow's latent moves by up to ~0.8 with the batch's shape.
SERVING_VOCODER_PRECISION: Final = "bf16"
SERVING_ACOUSTIC_PRECISION: Final = "fp32"


@dataclass(frozen=True)
class EngineSettings:
    """How an engine runs its model: where, in what precision, on how many threads, batched or not.

    Exactness (chunked == whole, resumed == uninterrupted, bit for bit) holds with max_batch 1.
    Batching keeps every stream within round-off of running alone (padding is masked; fp32: about
    1e-7), but a batched kernel may sum in a different order, so it is not bit-exact; in bf16 that
    round-off is about 5e-4, and bf16 differs from fp32 by about 2e-3 (up to 5e-2 on loud peaks).
    Bit-exact resume therefore needs max_batch 1 (either precision, same CPU type).

    Batching pays where one big call is cheaper than many small ones (GPUs). On a 2-core CPU it
    measured slower: 8 vocoder streams ran at 7.1 audio s/s unbatched vs 4.5 batched (fp32), 20.8 vs
    11.4 (bf16). A batching engine needs callers on as many threads as max_batch, or no two
    streams ever meet in a batch.
    """

    device: str = "cpu"
    """Torch device: "cpu", or "cuda" / "cuda:N" when a GPU is present."""
    precision: str = DEFAULT_PRECISION
    """"fp32", or "bf16" (autocast: faster on CPUs with AVX-512 BF16 and on GPUs)."""
    num_threads: int | None = None
    """Torch intra-op threads for this process; None leaves torch's setting alone."""
    batching: BatchingConfig = BatchingConfig(max_batch=1)
    """Dynamic batching across streams; max_batch 1 calls the model directly on the caller's thread."""
    on_batch: Callable[[BatchStats], None] | None = None
    """Called after every batched call (batch size, queue and compute time) for metrics."""

    def __post_init__(self) -> None:
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {PRECISIONS}, got {self.precision!r}")
        if self.num_threads is not None and self.num_threads < 1:
            raise ValueError(f"num_threads must be at least 1, got {self.num_threads}")


def _resolve_device(name: str) -> torch.device:
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {name!r} was asked for but torch sees no CUDA GPU here; use 'cpu'")
    return device


class _Runtime:
    """The parts of `EngineSettings` that act at run time: device, autocast and the batcher."""

    def __init__(self, settings: EngineSettings, run_batch: Callable[[Sequence], list], name: str) -> None:
        self.settings = settings
        self.device = _resolve_device(settings.device)
        if settings.num_threads is not None:
            torch.set_num_threads(settings.num_threads)
        self.batcher = (
            MicroBatcher(run_batch, settings.batching, settings.on_batch, name=name)
            if settings.batching.max_batch > 1
            else None
        )
        self._run_batch = run_batch

    def autocast(self) -> contextlib.AbstractContextManager:
        """bf16 autocast when asked for; a no-op context in fp32."""
        if self.settings.precision == "bf16":
            return torch.autocast(device_type=self.device.type, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def run(self, job: object) -> object:
        """One job through the batcher, or straight through the model when batching is off."""
        if self.batcher is None:
            return self._run_batch([job])[0]
        return self.batcher(job)

    @property
    def queue_depth(self) -> int:
        return 0 if self.batcher is None else self.batcher.queue_depth

    def close(self) -> None:
        if self.batcher is not None:
            self.batcher.close()


@dataclass(frozen=True)
class SynthesisParams:
    """The knobs of one sentence's synthesis; with the phoneme ids they fix the audio exactly."""

    speaker_id: int = 0
    """Speaker index, 0-based."""
    speed: float = 1.0
    """Speaking-rate multiple; length_scale = 1 / speed."""
    noise_scale: float = DEFAULT_NOISE_SCALE
    """Scale of the prior noise (0 is flat and deterministic even without a seed)."""
    noise_w: float = DEFAULT_NOISE_W
    """Scale of the stochastic duration noise."""


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


def _model_version(voice_name: str, parts: Sequence[str]) -> str:
    digest = hashlib.sha256("\n".join(parts).encode("utf-8")).hexdigest()
    return f"{voice_name}-{digest[:12]}"


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


class AcousticEngine:
    """Phoneme ids -> mel frames of DESIGN §3, in chunks that are exact slices of the whole.

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
    ) -> None:
        if device is not None:
            settings = replace(settings, device=device)
        self._runtime = _Runtime(settings, self._mel_window_batch, name="acoustic-batcher")
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

    @classmethod
    def load(
        cls,
        assets: VoiceAssets,
        device: str | None = None,
        schedule: ChunkSchedule = ACOUSTIC_SCHEDULE,
        settings: EngineSettings = EngineSettings(),
    ) -> "AcousticEngine":
        """The acoustic model of `assets` (a Piper voice + the trained mel head)."""
        voice = assets.piper_models()
        head = load_mel_head(assets.mel_head_path)
        version = _model_version(assets.name, [voice.onnx_sha256, assets.file_digest(assets.mel_head_path)])
        return cls(
            voice.acoustic,
            head,
            voice_name=assets.name,
            model_version=version,
            sample_rate_hz=voice.config.sample_rate_hz,
            hop_length=voice.config.hop_length,
            schedule=schedule,
            device=device,
            settings=settings,
        )

    @classmethod
    def load_default(cls, device: str | None = None, settings: EngineSettings = EngineSettings()) -> "AcousticEngine":
        """The default voice."""
        return cls.load(default_voice_assets(), device=device, settings=settings)

    @property
    def batcher(self) -> MicroBatcher | None:
        """The dynamic batcher of chunk jobs, None when batching is off (max_batch 1)."""
        return self._runtime.batcher

    @property
    def queue_depth(self) -> int:
        """Chunk jobs waiting for a batch (0 without batching)."""
        return self._runtime.queue_depth

    def close(self) -> None:
        """Stop the batcher thread, if any (waiting jobs are cancelled)."""
        self._runtime.close()

    def synthesis_seed(self, phoneme_ids: Sequence[int], params: SynthesisParams) -> int:
        """The seed of every random draw of this sentence (DESIGN §4)."""
        return synthesis_seed(
            self.model_version, self.voice_name, params.speaker_id, params.speed, params.noise_scale, params.noise_w, phoneme_ids
        )

    @torch.inference_mode()
    def plan(self, phoneme_ids: Sequence[int], params: SynthesisParams, seed: int) -> SentencePlan:
        """Encoder and durations for one sentence, with all of its noise drawn from `seed`.

        Always float32: durations are rounded up to whole frames, so a lower precision here could
        change a sentence's length, not just its sound.
        """
        if not phoneme_ids:
            raise ValueError("phoneme_ids is empty: a sentence needs at least one phoneme id")
        if not 0 <= params.speaker_id < max(1, self.num_speakers):
            raise ValueError(f"speaker_id {params.speaker_id} is out of range: this voice has {self.num_speakers} speaker(s)")
        generator = synthesis_generator(seed)
        ids = torch.as_tensor(list(phoneme_ids), dtype=torch.long, device=self.device).unsqueeze(0)
        speaker = params.speaker_id if self.num_speakers > 1 else None
        encoded = self.acoustic.encode(ids, speaker_id=speaker)
        durations = self.acoustic.durations(encoded, generator, noise_w=params.noise_w, length_scale=1.0 / params.speed)
        prior = self.acoustic.expand(encoded, durations, generator, noise_scale=params.noise_scale)
        return SentencePlan(prior.z_p, encoded.g, [int(d) for d in durations[0].tolist()])

    def mel_whole(self, plan: SentencePlan) -> np.ndarray:
        """The sentence's mel in one pass [n_mels, frames]: the reference chunked output must equal."""
        return self._mel_window_batch([self._window_job(plan, 0, plan.frame_count, plan.frame_count)])[0]

    def mel_chunks(self, plan: SentencePlan, start_frame: int = 0) -> Iterator[np.ndarray]:
        """The sentence's mel from `start_frame` on, as float32 [n_mels, n] chunks in order.

        Each chunk is one job for the batcher (when batching is on): call `next` from the
        stream's own thread, and concurrent sentences share batched calls.
        """
        total = plan.frame_count
        if not 0 <= start_frame <= total:
            raise ValueError(f"start_frame {start_frame} is outside the sentence's {total} frames")
        whole = self.mel_whole(plan) if self.flow_context_frames is None else None
        for start, end in self.schedule.bounds(total, start_frame):
            # A resumed stream recomputes the whole chunk it starts in (same window, same numbers).
            mel = whole[:, start:end] if whole is not None else self._runtime.run(self._window_job(plan, start, end, total))
            yield mel[:, max(0, start_frame - start) :]

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
        """Run one short sentence so the first real request pays no first-call costs."""
        ids = [1, 0, 20, 0, 59, 0, 24, 0, 27, 0, 2]
        plan = self.plan(ids, SynthesisParams(), seed=0)
        for _ in self.mel_chunks(plan):
            pass


class MelVocoder(nn.Module):
    """A HiFi-GAN generator that takes the mel of DESIGN §3: the mel adapter, then the decoder body."""

    def __init__(self, adapter: MelAdapter | None, decoder: Generator) -> None:
        super().__init__()
        self.adapter = adapter
        self.decoder = decoder

    @property
    def context_frames(self) -> int:
        """Mel frames of context each side that one frame's samples depend on."""
        adapter_context = self.adapter.receptive_field_frames if self.adapter is not None else 0
        return adapter_context + receptive_field_frames(self.decoder.config)

    def forward(self, mel: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
        """mel [b, n_mels, frames] -> audio [b, frames * hop]; `lengths` [b] masks a padded batch."""
        features = mel if self.adapter is None else self.adapter(mel, lengths)
        return self.decoder(features, lengths).squeeze(1)


class VocoderEngine:
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
        self._runtime = _Runtime(settings, self._vocode_batch, name="vocoder-batcher")
        self.settings = settings
        self.device = self._runtime.device
        self.vocoder = vocoder.to(self.device).eval()
        self.model_version = model_version
        self.sample_rate_hz = sample_rate_hz
        self.hop_length = hop_length
        self.n_mels = n_mels
        self.context_frames = vocoder.context_frames
        self.schedule = schedule

    @classmethod
    def load(
        cls,
        assets: VoiceAssets,
        device: str | None = None,
        schedule: ChunkSchedule = VOCODER_SCHEDULE,
        settings: EngineSettings = EngineSettings(),
    ) -> "VocoderEngine":
        """The default voice's vocoder: trained mel adapter + the Piper decoder body (or its fine-tuned copy)."""
        voice = assets.piper_models()
        decoder = voice.decoder
        digests = [voice.onnx_sha256, assets.file_digest(assets.mel_adapter_path)]
        if assets.decoder_path is not None:
            decoder.load_state_dict(torch.load(assets.decoder_path, map_location="cpu", weights_only=True))
            digests.append(assets.file_digest(assets.decoder_path))
        vocoder = MelVocoder(load_mel_adapter(assets.mel_adapter_path), decoder)
        return cls(
            vocoder,
            model_version=_model_version(assets.name, digests),
            sample_rate_hz=voice.config.sample_rate_hz,
            hop_length=voice.config.hop_length,
            n_mels=int(vocoder.adapter.config.in_channels) if vocoder.adapter is not None else 80,
            schedule=schedule,
            device=device,
            settings=settings,
        )

    @classmethod
    def load_hifigan(
        cls, generator: Generator, sample_rate_hz: int, device: str | None = None, settings: EngineSettings = EngineSettings()
    ) -> "VocoderEngine":
        """A public HiFi-GAN generator (mel in) as the vocoder."""
        return cls(
            MelVocoder(None, generator),
            model_version=f"hifigan-{hashlib.sha256(repr(generator.config).encode()).hexdigest()[:12]}",
            sample_rate_hz=sample_rate_hz,
            hop_length=generator.config.hop_length,
            n_mels=generator.config.in_channels,
            device=device,
            settings=settings,
        )

    @classmethod
    def load_default(cls, device: str | None = None, settings: EngineSettings = EngineSettings()) -> "VocoderEngine":
        """The default voice."""
        return cls.load(default_voice_assets(), device=device, settings=settings)

    @property
    def batcher(self) -> MicroBatcher | None:
        """The dynamic batcher of chunk jobs, None when batching is off (max_batch 1)."""
        return self._runtime.batcher

    @property
    def queue_depth(self) -> int:
        """Chunk jobs waiting for a batch (0 without batching)."""
        return self._runtime.queue_depth

    def close(self) -> None:
        """Stop the batcher thread, if any (waiting jobs are cancelled)."""
        self._runtime.close()

    def vocode(self, mel: np.ndarray) -> np.ndarray:
        """Samples of a whole sentence's mel [n_mels, frames] in one pass (never batched)."""
        return self._vocode_batch([mel])[0]

    def vocode_window(self, mel: np.ndarray) -> np.ndarray:
        """Samples of one chunk window [n_mels, frames], batched with other streams' windows when on."""
        return self._runtime.run(mel)

    @torch.inference_mode()
    def _vocode_batch(self, mels: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Vocode several mel windows, padded and masked so each equals its solo run."""
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
                audio = self.vocoder(batch.to(self.device), None if lengths is None else lengths.to(self.device))
            audio = audio.float().cpu()
            for row, index in enumerate(group):
                outputs[index] = audio[row, : widths[index] * hop].numpy()
        return outputs

    def resume_origin_frame(self, emit_from_frame: int) -> int:
        """First frame to prime a resumed stream with so that it is bit-identical to the stream it
        replaces: `context_frames` before the start of the chunk `emit_from_frame` falls in."""
        chunk_start = 0
        for index in range(emit_from_frame + 1):
            chunk_end = chunk_start + self.schedule.chunk_frames(index)
            if chunk_end > emit_from_frame:
                break
            chunk_start = chunk_end
        return max(0, chunk_start - self.context_frames)

    def open_stream(self, origin_frame: int = 0, emit_from_frame: int | None = None) -> "VocoderStream":
        """A stream for one sentence. `origin_frame` is the sentence frame index of the first mel
        frame that will be pushed; samples are returned from `emit_from_frame` on (default: the
        origin). A stream that starts mid-sentence must be primed with at least `context_frames`
        of real mel before the first frame it emits."""
        return VocoderStream(self, origin_frame, origin_frame if emit_from_frame is None else emit_from_frame)

    def warm_up(self) -> None:
        """Vocode a short stretch of silence-like mel so the first real request pays no first-call costs."""
        silence = np.full((self.n_mels, 32), -5.0, dtype=np.float32)
        self.vocode(silence)
        if self._runtime.batcher is not None:
            # The padded, masked path too, through the batcher thread.
            self._vocode_batch([silence, silence[:, :20]])
            self.vocode_window(silence)


@dataclass
class VocoderStream:
    """One sentence's incremental vocoding: push mel frames, get back the samples that are exact.

    Chunks follow the engine's schedule by frame index from the sentence start, and each chunk is
    vocoded over the same window whenever and however its frames arrive, so the samples do not
    depend on timing. A stream resumed on another worker and primed from
    `VocoderEngine.resume_origin_frame` continues bit-identically (in fp32, without batching); one
    primed with just `context_frames` before its first frame gives the rest of the chunk it resumes
    in from a shorter window, exact to float round-off, and is bit-identical from the next chunk on.
    """

    engine: VocoderEngine
    origin_frame: int
    """Sentence frame index of the first frame pushed."""
    emit_from_frame: int
    """First sentence frame whose samples are returned."""
    _mel: np.ndarray | None = None
    _pending: list[np.ndarray] = field(default_factory=list)
    _frames_received: int = 0
    _chunk_index: int = 0
    _chunk_start: int = 0

    def __post_init__(self) -> None:
        if not 0 <= self.origin_frame <= self.emit_from_frame:
            raise ValueError(f"need 0 <= origin_frame <= emit_from_frame, got {self.origin_frame}, {self.emit_from_frame}")
        self._frames_received = self.origin_frame
        while self._chunk_end() <= self.emit_from_frame:
            self._advance()
        needed_from = max(0, self.emit_from_frame - self.engine.context_frames)
        if self.origin_frame > needed_from:
            raise ValueError(
                f"a stream resumed at frame {self.emit_from_frame} needs mel context from frame {needed_from} on "
                f"({self.engine.context_frames} frames before it), but starts at frame {self.origin_frame}"
            )

    @property
    def frames_received(self) -> int:
        """Sentence frame index one past the last frame pushed."""
        return self._frames_received

    def _chunk_end(self) -> int:
        return self._chunk_start + self.engine.schedule.chunk_frames(self._chunk_index)

    def _advance(self) -> None:
        self._chunk_start = self._chunk_end()
        self._chunk_index += 1

    def push(self, mel: np.ndarray) -> np.ndarray:
        """Add frames [n_mels, n]; return float32 samples that became exact (maybe none)."""
        if mel.ndim != 2 or mel.shape[0] != self.engine.n_mels:
            raise ValueError(f"mel must be [{self.engine.n_mels}, frames], got {list(mel.shape)}")
        if mel.shape[1]:
            self._pending.append(np.asarray(mel, dtype=np.float32))
            self._frames_received += mel.shape[1]
        ready: list[np.ndarray] = []
        while self._chunk_end() + self.engine.context_frames <= self._frames_received:
            ready.append(self._emit_chunk(self._chunk_end(), total=None))
        return np.concatenate(ready) if ready else np.zeros(0, dtype=np.float32)

    def finish(self) -> np.ndarray:
        """The sentence ended: return every remaining sample."""
        total = self._frames_received
        ready: list[np.ndarray] = []
        while self._chunk_start < total:
            ready.append(self._emit_chunk(min(self._chunk_end(), total), total=total))
        return np.concatenate(ready) if ready else np.zeros(0, dtype=np.float32)

    def _emit_chunk(self, end: int, total: int | None) -> np.ndarray:
        """Vocode the current chunk [chunk_start, end) over its context window, then advance."""
        if self._pending:
            parts = ([self._mel] if self._mel is not None else []) + self._pending
            self._mel = np.concatenate(parts, axis=1)
            self._pending = []
        assert self._mel is not None
        context = self.engine.context_frames
        start = self._chunk_start
        # The window is clipped only at the sentence's true edges: frame 0 and, once known, the end;
        # and, in a resumed stream's first chunk, at the first frame pushed, which lies at least
        # `context` frames before any sample kept.
        input_start = max(0, start - context, self.origin_frame)
        input_end = end + context if total is None else min(total, end + context)
        samples = self.engine.vocode_window(self._mel[:, input_start - self.origin_frame : input_end - self.origin_frame])
        hop = self.engine.hop_length
        first = max(start, self.emit_from_frame)
        kept = samples[(first - input_start) * hop : (end - input_start) * hop]
        self._advance()
        self._forget_before(self._chunk_start - context)
        return kept

    def _forget_before(self, frame: int) -> None:
        """Drop frames no later chunk can need as left context."""
        drop = frame - self.origin_frame
        if drop > 0 and self._mel is not None:
            self._mel = self._mel[:, drop:]
            self.origin_frame = frame
