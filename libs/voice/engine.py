"""The synthesis engines the workers serve, in one import: phoneme ids -> mel chunks
(`AcousticEngine`), and mel -> PCM as slices arrive (`VocoderEngine`, `VocoderStream`); both exact
under any chunking (docs/ARCHITECTURE.md, "Determinism" and "Exact streaming and resume"). How they run (device, precision, batching) is `EngineSettings`.
"""

from libs.models.mel_bridge import MelVocoder
from libs.voice.acoustic_engine import AcousticEngine, SentencePlan, model_version_of
from libs.voice.inputs import DEFAULT_NOISE_SCALE, DEFAULT_NOISE_W, SynthesisParams
from libs.voice.precision import DEFAULT_PRECISION, PRECISIONS
from libs.voice.runtime import EngineSettings
from libs.voice.vocoder_engine import VocoderEngine, VocoderStream

__all__ = [
    "DEFAULT_NOISE_SCALE",
    "DEFAULT_NOISE_W",
    "DEFAULT_PRECISION",
    "PRECISIONS",
    "AcousticEngine",
    "EngineSettings",
    "MelVocoder",
    "SentencePlan",
    "SynthesisParams",
    "VocoderEngine",
    "VocoderStream",
    "model_version_of",
]
