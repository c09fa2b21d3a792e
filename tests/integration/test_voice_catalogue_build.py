"""Any Piper voice, imported and built: Piper-format voices made here (one speaker at 22,050 Hz,
three speakers at 16,000 Hz, a Mandarin one) go through `add_voice` (check, copy, a short seeded
build of mel head and adapter) and the catalogue serves them beside the default voice; a voice it
cannot serve is refused with the file and the problem, and the others are still served."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import pytest
import torch

from libs.models.mel_bridge import load_mel_adapter, load_mel_head
from libs.models.piper_import import load_piper_voice
from libs.models.voice_files import MEL_ADAPTER_FILE, MEL_HEAD_FILE
from libs.voice.catalogue import VoiceCatalogue, VoiceRejectedError
from libs.voice.registry import DEFAULT_VOICE_NAME, UnknownVoiceError
from libs.wire.errors import InvalidRequestError
from scripts.voice.build import add_voice
from tests.support.piper_voices import SHORT_BUILD, TinyVoice, export_piper_voice

VOICES = (
    TinyVoice("en_US-tiny-medium"),
    TinyVoice("en_GB-trio-low", sample_rate_hz=16_000, speakers=("alice", "bob", "carol"), language_code="en_GB", espeak_voice="en-gb-x-rp", seed=1),
    TinyVoice("zh_CN-tiny-medium", espeak_voice="cmn", language_code="zh_CN", seed=2),
)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Path]]:
    downloads = tmp_path_factory.mktemp("downloads")
    voices_dir = tmp_path_factory.mktemp("voices")
    work_dir = tmp_path_factory.mktemp("work")
    torch.set_num_threads(1)
    folders = {}
    for voice in VOICES:
        onnx_path = export_piper_voice(voice, downloads)
        progress = io.StringIO()
        folders[voice.name] = add_voice(onnx_path, voices_dir=voices_dir, config=SHORT_BUILD, threads=1, work_dir=work_dir, progress_stream=progress)
        assert "100% held-out check" in progress.getvalue() and "left" in progress.getvalue()
    return voices_dir, folders


def test_an_imported_voice_has_its_piper_files_and_our_built_pieces(built) -> None:
    _, folders = built
    for name, folder in folders.items():
        assert {f"{name}.onnx", f"{name}.onnx.json", MEL_HEAD_FILE, MEL_ADAPTER_FILE, "MANIFEST.md"} <= {p.name for p in folder.iterdir()}
        manifest = (folder / "MANIFEST.md").read_text()
        assert f"# {name}: mel head and mel adapter" in manifest and "nan" not in manifest
        head, adapter = load_mel_head(folder / MEL_HEAD_FILE), load_mel_adapter(folder / MEL_ADAPTER_FILE)
        assert all(torch.isfinite(p).all() for module in (head, adapter) for p in module.state_dict().values())


def test_the_catalogue_serves_the_built_voices_beside_the_default_voice(built) -> None:
    voices_dir, _ = built
    catalogue = VoiceCatalogue.scan(voices_dir)
    assert catalogue.refused == []
    assert catalogue.names() == [DEFAULT_VOICE_NAME, "en_GB-trio-low", "en_US-tiny-medium", "zh_CN-tiny-medium"]
    trio = catalogue.get("en_GB-trio-low").voice
    assert (trio.sample_rate_hz, trio.num_speakers, trio.quality, trio.language_code) == (16_000, 3, "low", "en-GB")
    registry = catalogue.registry()
    assert registry.default.name == DEFAULT_VOICE_NAME and registry.get("zh_CN-tiny-medium").espeak_voice == "cmn"


def test_speakers_are_found_by_id_and_by_name(built) -> None:
    voices_dir, _ = built
    trio = VoiceCatalogue.scan(voices_dir).get("en_GB-trio-low")
    assert [trio.speaker_id("alice"), trio.speaker_id("carol"), trio.speaker_id(1), trio.speaker_id("2")] == [0, 2, 1, 2]
    with pytest.raises(InvalidRequestError, match=r"alice \(0\), bob \(1\), carol \(2\)"):
        trio.speaker_id("dave")


def test_each_voice_has_its_own_model_version_that_follows_its_files(built, tmp_path: Path) -> None:
    voices_dir, folders = built
    versions = {entry.voice.name: entry.model_version for entry in VoiceCatalogue.scan(voices_dir).voices}
    assert len(set(versions.values())) == len(versions)
    copy_dir = tmp_path / "voices"
    shutil.copytree(folders["en_US-tiny-medium"], copy_dir / "en_US-tiny-medium")
    head = copy_dir / "en_US-tiny-medium" / MEL_HEAD_FILE
    head.write_bytes(head.read_bytes() + b"\0")
    changed = VoiceCatalogue.scan(copy_dir).get("en_US-tiny-medium").model_version
    assert changed != versions["en_US-tiny-medium"]


def test_the_build_is_seeded(built, tmp_path: Path) -> None:
    _, folders = built
    again = add_voice(
        folders["en_US-tiny-medium"] / "en_US-tiny-medium.onnx", voices_dir=tmp_path, config=SHORT_BUILD, threads=1,
        work_dir=tmp_path / "work", progress_stream=io.StringIO(),
    )  # fmt: skip
    for name in (MEL_HEAD_FILE, MEL_ADAPTER_FILE):
        assert (again / name).read_bytes() == (folders["en_US-tiny-medium"] / name).read_bytes()


def test_the_imported_model_is_the_exported_one(built, tmp_path: Path) -> None:
    _, folders = built
    voice = load_piper_voice(folders["en_GB-trio-low"] / "en_GB-trio-low.onnx", cache_dir=tmp_path)
    assert (voice.config.num_speakers, voice.config.sample_rate_hz, voice.config.speaker_id_map) == (3, 16_000, {"alice": 0, "bob": 1, "carol": 2})
    assert voice.acoustic.config.n_speakers == 3 and voice.decoder.config.gin_channels == 16


def test_a_bad_voice_is_refused_naming_the_file_and_the_others_are_still_served(built, tmp_path: Path) -> None:
    voices_dir, _ = built
    mixed = tmp_path / "voices"
    shutil.copytree(voices_dir, mixed)
    broken = mixed / "en_US-tiny-medium" / "en_US-tiny-medium.onnx.json"
    config = json.loads(broken.read_text())
    config["audio"]["sample_rate"] = 44_100
    broken.write_text(json.dumps(config))
    (mixed / "loose.onnx").write_bytes(b"")
    (mixed / "zh_CN-tiny-medium" / MEL_HEAD_FILE).unlink()
    catalogue = VoiceCatalogue.scan(mixed)
    assert catalogue.names() == [DEFAULT_VOICE_NAME, "en_GB-trio-low"]
    problems = {str(refusal) for refusal in catalogue.refused}
    assert f"{broken}: audio.sample_rate 44100 is not served: the mesh serves 16,000 Hz or 22,050 Hz" in problems
    assert any(str(mixed / "loose.onnx") in problem and "tts-mesh voice add" in problem for problem in problems)
    assert any(problem.startswith(f"{mixed / 'zh_CN-tiny-medium'}: not built: mel_head.pt missing; run `tts-mesh voice add") for problem in problems)
    with pytest.raises(UnknownVoiceError, match=r"not served: .*44100"):
        catalogue.get("en_US-tiny-medium")


def test_add_refuses_a_voice_it_cannot_serve_before_copying_anything(built, tmp_path: Path) -> None:
    _, folders = built
    source = tmp_path / "source"
    shutil.copytree(folders["en_US-tiny-medium"], source)
    config_path = source / "en_US-tiny-medium.onnx.json"
    config = json.loads(config_path.read_text())
    config["phoneme_type"] = "pinyin"
    config_path.write_text(json.dumps(config))
    target = tmp_path / "voices"
    with pytest.raises(VoiceRejectedError, match="phoneme_type 'pinyin' is not served") as refused:
        add_voice(source / "en_US-tiny-medium.onnx", voices_dir=target, config=SHORT_BUILD, threads=1, work_dir=tmp_path)
    assert refused.value.path == config_path
    assert not target.exists()
