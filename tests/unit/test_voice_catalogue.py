"""The voice catalogue's checks of a Piper config, and the build's estimate of the time left."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from libs.voice.catalogue import VoiceCatalogue, VoiceRejectedError, check_piper_config, read_voice_folder
from libs.voice.registry import DEFAULT_VOICE_NAME, default_registry
from scripts.voice.progress import BuildProgress, Stage, format_duration


def _config(**changes: object) -> dict:
    config = {
        "audio": {"sample_rate": 22050, "quality": "medium"},
        "espeak": {"voice": "cmn"},
        "phoneme_type": "espeak",
        "phoneme_id_map": default_registry().default.phoneme_id_map(),
        "num_symbols": 256,
        "num_speakers": 1,
        "speaker_id_map": {},
    }
    config.update(changes)
    return config


def _write(folder: Path, config: dict | str) -> Path:
    path = folder / "voice.onnx.json"
    path.write_text(config if isinstance(config, str) else json.dumps(config), encoding="utf-8")
    return path


def test_a_piper_espeak_config_passes(tmp_path: Path) -> None:
    assert check_piper_config(_write(tmp_path, _config()))["espeak"]["voice"] == "cmn"


@pytest.mark.parametrize(
    ("config", "problem"),
    [
        ("{not json", "not a JSON voice config"),
        (_config(phoneme_type="text"), "phoneme_type 'text' is not served: only espeak voices"),
        (_config(audio={"quality": "medium"}), "missing field audio.sample_rate"),
        (_config(audio={"sample_rate": 44100}), "audio.sample_rate 44100 is not served: the mesh serves 16,000 Hz or 22,050 Hz"),
        (_config(audio={"sample_rate": 22050, "hop_length": 512}), "audio.hop_length 512 is not served"),
        (_config(espeak={}), "missing field espeak.voice"),
        (_config(espeak={"voice": "klingon"}), "espeak.voice 'klingon' is not a voice of espeak-ng"),
        (_config(phoneme_id_map={"a": [5]}), "phoneme_id_map lacks '_'"),
        (_config(phoneme_id_map=None), "missing field phoneme_id_map"),
        (_config(num_symbols=100), "past num_symbols 100"),
        (_config(num_speakers=2, speaker_id_map={"a": 0, "b": 5}), "speaker_id_map must map names to ids 0 to 1"),
    ],
)
def test_a_config_the_mesh_cannot_serve_is_refused_naming_the_file_and_the_problem(tmp_path: Path, config, problem: str) -> None:
    path = _write(tmp_path, config)
    with pytest.raises(VoiceRejectedError) as refused:
        check_piper_config(path)
    assert refused.value.path == path
    assert str(refused.value).startswith(f"{path}: ")
    assert problem in str(refused.value)


def test_an_onnx_file_without_pipers_inputs_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "zh_CN-x-medium"
    folder.mkdir()
    (folder / "zh_CN-x-medium.onnx.json").write_text(json.dumps(_config()))
    (folder / "zh_CN-x-medium.onnx").write_bytes(b"")
    with pytest.raises(VoiceRejectedError, match="not a Piper voice: the graph lacks the inputs input, input_lengths, scales"):
        read_voice_folder(folder)


def test_the_installed_catalogue_serves_the_default_voice_from_its_package() -> None:
    catalogue = VoiceCatalogue.scan()
    assert catalogue.names() == [DEFAULT_VOICE_NAME] and catalogue.refused == []
    entry = catalogue.get(DEFAULT_VOICE_NAME)
    assert entry.voice.sample_rate_hz == 22050 and entry.assets.onnx_path.name == "en_US-joe-medium.onnx"
    assert len(entry.model_version) == 64


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_time_left_follows_the_priors_scaled_by_this_machines_pace() -> None:
    clock = _Clock()
    progress = BuildProgress([Stage("a", 10, 1.0), Stage("b", 100, 0.1)], io.StringIO(), clock)
    progress.start("a")
    assert progress.seconds_left() == pytest.approx(20.0)  # nothing measured yet: the priors
    for _ in range(5):
        clock.now += 2.0  # this machine takes twice the prior
        progress.advance()
    # 5 units of a left at the measured 2 s each, and b at its prior scaled by 2.
    assert progress.seconds_left() == pytest.approx(5 * 2.0 + 100 * 0.1 * 2.0)
    assert progress.fraction == pytest.approx(5 / 20)


def test_the_bar_writes_a_line_every_tenth_when_not_on_a_terminal() -> None:
    stream = io.StringIO()
    clock = _Clock()
    progress = BuildProgress([Stage("steps", 100, 0.01)], stream, clock)
    progress.start("steps")
    for _ in range(100):
        clock.now += 0.01
        progress.advance()
    progress.finish()
    lines = stream.getvalue().splitlines()
    assert 10 <= len(lines) <= 13
    assert lines[-1].startswith("[" + "#" * 30 + "] 100%") and lines[-1].endswith("done")
    assert format_duration(725) == "12 min 05 s"
