"""The synthesis engines the workers serve: phoneme ids -> mel chunks, and mel -> PCM, both exact
under any chunking (DESIGN §4, §5).

`AcousticEngine` runs the text encoder and durations once per sentence, draws all of the
sentence's noise up front from its seed, then produces the mel in growing chunks: the flow and the
mel head over each chunk plus their receptive field of latent context, trimmed back.
`VocoderStream` keeps a sentence's mel, vocodes whatever has become exact (right context present,
or the sentence ended) and returns only the new samples.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Iterator, Sequence

import numpy as np
import torch
from torch import nn

from libs.models.hifigan import Generator, receptive_field_frames
from libs.models.mel_bridge import MelAdapter, MelHead, load_mel_adapter, load_mel_head
from libs.models.vits import VitsAcoustic, flow_receptive_field_frames, synthesis_generator, synthesis_seed
from libs.voice.assets import VoiceAssets, default_voice_assets
from libs.voice.chunking import ChunkSchedule, context_window

DEFAULT_NOISE_SCALE: Final = 0.667
DEFAULT_NOISE_W: Final = 0.8


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


class AcousticEngine:
    """Phoneme ids -> mel frames of DESIGN §3, in chunks that are exact slices of the whole."""

    def __init__(
        self,
        acoustic: VitsAcoustic,
        mel_head: MelHead,
        *,
        voice_name: str,
        model_version: str,
        sample_rate_hz: int,
        hop_length: int,
        schedule: ChunkSchedule = ChunkSchedule(),
        device: str = "cpu",
    ) -> None:
        self.acoustic = acoustic.to(device).eval()
        self.mel_head = mel_head.to(device).eval()
        self.voice_name = voice_name
        self.model_version = model_version
        self.sample_rate_hz = sample_rate_hz
        self.hop_length = hop_length
        self.n_mels = int(mel_head.config.out_channels)
        self.num_speakers = int(acoustic.config.n_speakers)
        self.schedule = schedule
        self.device = torch.device(device)
        flow_context = flow_receptive_field_frames(acoustic.config)
        # Transformer flows see the whole sentence: the latent is then computed once, unchunked.
        self.flow_context_frames = flow_context
        self.head_context_frames = mel_head.receptive_field_frames

    @classmethod
    def load(cls, assets: VoiceAssets, device: str = "cpu", schedule: ChunkSchedule = ChunkSchedule()) -> "AcousticEngine":
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
        )

    @classmethod
    def load_default(cls, device: str = "cpu") -> "AcousticEngine":
        """The default voice."""
        return cls.load(default_voice_assets(), device=device)

    def synthesis_seed(self, phoneme_ids: Sequence[int], params: SynthesisParams) -> int:
        """The seed of every random draw of this sentence (DESIGN §4)."""
        return synthesis_seed(
            self.model_version, self.voice_name, params.speaker_id, params.speed, params.noise_scale, params.noise_w, phoneme_ids
        )

    @torch.inference_mode()
    def plan(self, phoneme_ids: Sequence[int], params: SynthesisParams, seed: int) -> SentencePlan:
        """Encoder and durations for one sentence, with all of its noise drawn from `seed`."""
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

    @torch.inference_mode()
    def mel_whole(self, plan: SentencePlan) -> np.ndarray:
        """The sentence's mel in one pass [n_mels, frames]: the reference chunked output must equal."""
        return self._mel_window(plan, 0, plan.frame_count, plan.frame_count)

    @torch.inference_mode()
    def mel_chunks(self, plan: SentencePlan, start_frame: int = 0) -> Iterator[np.ndarray]:
        """The sentence's mel from `start_frame` on, as float32 [n_mels, n] chunks in order."""
        total = plan.frame_count
        if not 0 <= start_frame <= total:
            raise ValueError(f"start_frame {start_frame} is outside the sentence's {total} frames")
        whole = self.mel_whole(plan) if self.flow_context_frames is None else None
        for start, end in self.schedule.bounds(total, start_frame):
            # A resumed stream recomputes the whole chunk it starts in (same window, same numbers).
            mel = whole[:, start:end] if whole is not None else self._mel_window(plan, start, end, total)
            yield mel[:, max(0, start_frame - start) :]

    def _mel_window(self, plan: SentencePlan, start: int, end: int, total: int) -> np.ndarray:
        context = (self.flow_context_frames or total) + self.head_context_frames
        window = context_window(start, end, total, context)
        z_p = plan.z_p[:, :, window.input_start : window.input_end]
        mask = torch.ones(1, 1, z_p.size(-1), device=z_p.device, dtype=z_p.dtype)
        z = self.acoustic.flow_inverse(z_p, mask, plan.g)
        mel = self.mel_head(z)[0, :, window.trim_left : window.trim_left + window.kept]
        return mel.float().cpu().numpy()

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
        """mel [b, n_mels, frames] -> audio [b, frames * hop]."""
        features = mel if self.adapter is None else self.adapter(mel)
        return self.decoder(features, lengths).squeeze(1)


class VocoderEngine:
    """Mel -> PCM for whole sentences or, through `open_stream`, slice by slice as mel arrives."""

    def __init__(
        self,
        vocoder: MelVocoder,
        *,
        model_version: str,
        sample_rate_hz: int,
        hop_length: int,
        n_mels: int,
        schedule: ChunkSchedule = ChunkSchedule(),
        device: str = "cpu",
    ) -> None:
        self.vocoder = vocoder.to(device).eval()
        self.model_version = model_version
        self.sample_rate_hz = sample_rate_hz
        self.hop_length = hop_length
        self.n_mels = n_mels
        self.context_frames = vocoder.context_frames
        self.schedule = schedule
        self.device = torch.device(device)

    @classmethod
    def load(cls, assets: VoiceAssets, device: str = "cpu", schedule: ChunkSchedule = ChunkSchedule()) -> "VocoderEngine":
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
        )

    @classmethod
    def load_hifigan(cls, generator: Generator, sample_rate_hz: int, device: str = "cpu") -> "VocoderEngine":
        """A public HiFi-GAN generator (mel in) as the vocoder."""
        return cls(
            MelVocoder(None, generator),
            model_version=f"hifigan-{hashlib.sha256(repr(generator.config).encode()).hexdigest()[:12]}",
            sample_rate_hz=sample_rate_hz,
            hop_length=generator.config.hop_length,
            n_mels=generator.config.in_channels,
            device=device,
        )

    @classmethod
    def load_default(cls, device: str = "cpu") -> "VocoderEngine":
        """The default voice."""
        return cls.load(default_voice_assets(), device=device)

    @torch.inference_mode()
    def vocode(self, mel: np.ndarray) -> np.ndarray:
        """Samples of a whole sentence's mel [n_mels, frames] in one pass."""
        tensor = torch.as_tensor(np.ascontiguousarray(mel), dtype=torch.float32, device=self.device).unsqueeze(0)
        return self.vocoder(tensor)[0].float().cpu().numpy()

    def open_stream(self, origin_frame: int = 0, emit_from_frame: int | None = None) -> "VocoderStream":
        """A stream for one sentence. `origin_frame` is the sentence frame index of the first mel
        frame that will be pushed; samples are returned from `emit_from_frame` on (default: the
        origin). A stream that starts mid-sentence must be primed with at least `context_frames`
        of real mel before the first frame it emits."""
        return VocoderStream(self, origin_frame, origin_frame if emit_from_frame is None else emit_from_frame)

    def warm_up(self) -> None:
        """Vocode a short stretch of silence-like mel so the first real request pays no first-call costs."""
        self.vocode(np.full((self.n_mels, 32), -5.0, dtype=np.float32))


@dataclass
class VocoderStream:
    """One sentence's incremental vocoding: push mel frames, get back the samples that are exact.

    Chunks follow the engine's schedule by frame index from the sentence start, and each chunk is
    vocoded over the same window whenever and however its frames arrive, so the samples do not
    depend on timing, and a stream resumed on another worker continues bit-identically.
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
        needed_from = max(0, self._chunk_start - self.engine.context_frames)
        if self.origin_frame > needed_from:
            raise ValueError(
                f"a stream resumed at frame {self.emit_from_frame} needs mel context from frame {needed_from} on "
                f"({self.engine.context_frames} frames before its chunk), but starts at frame {self.origin_frame}"
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
        # The window is clipped only at the sentence's true edges: frame 0 and, once known, the end.
        input_start = max(0, start - context)
        input_end = end + context if total is None else min(total, end + context)
        samples = self.engine.vocode(self._mel[:, input_start - self.origin_frame : input_end - self.origin_frame])
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
