"""Mel -> PCM: whole sentences, or slice by slice as mel arrives, with exact trimming (DESIGN §5).

`VocoderStream` keeps a sentence's mel, vocodes each chunk of the schedule once its right context
is there (or the sentence ended) and returns only the new samples.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace
from typing import Sequence

import numpy as np
import torch

from libs.models.hifigan import Generator
from libs.models.mel_bridge import MelVocoder, load_mel_vocoder
from libs.voice.acoustic_engine import model_version_of
from libs.voice.assets import VoiceAssets, default_voice_assets
from libs.voice.batching import padding_groups
from libs.voice.chunking import VOCODER_SCHEDULE, ChunkSchedule
from libs.voice.runtime import BatchedEngine, EngineSettings, ModelRuntime


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
        self._runtime = ModelRuntime(settings, self._vocode_batch, name="vocoder-batcher")
        self.settings = settings
        self.device = self._runtime.device
        self.vocoder = vocoder.to(self.device).eval()
        self.model_version = model_version
        self.sample_rate_hz = sample_rate_hz
        self.hop_length = hop_length
        self.n_mels = n_mels
        self.context_frames = vocoder.receptive_field_frames
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
        vocoder = load_mel_vocoder(assets.trained_dir, voice.decoder)
        digests = [voice.onnx_sha256, assets.file_digest(assets.mel_adapter_path)]
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
