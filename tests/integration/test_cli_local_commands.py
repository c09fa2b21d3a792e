"""`tts-mesh phonemes` and `tts-mesh voice` run here, without a mesh."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tts_mesh.cli import main


def test_phonemes_of_a_language_print_each_sentence_with_its_pinyin(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["phonemes", "我去银行。他在行走。", "--language", "zh-CN"]) == 0
    printed = capsys.readouterr().out
    assert "pinyin:   wo3 qu4 yin2 hang2" in printed and "pinyin:   ta1 zai4 xing2 zou3" in printed


def test_phonemes_as_json_answer_as_the_http_route_does(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["phonemes", "Hello there.", "--voice", "en_US-joe-medium", "--json"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert (answer["voice"], answer["language"], answer["front_end"]) == ("en_US-joe-medium", "en-US", "espeak")
    assert answer["sentences"][0]["phoneme_ids"][:2] == [1, 0]


def test_ssml_is_read_here_as_it_is_spoken_not_as_its_markup(capsys: pytest.CaptureFixture[str]) -> None:
    document = '<speak>Hello <break time="300ms"/> there. <sub alias="World Wide Web">WWW</sub>.</speak>'
    assert main(["phonemes", document, "--voice", "en_US-joe-medium", "--json"]) == 0
    texts = [sentence["text"] for sentence in json.loads(capsys.readouterr().out)["sentences"]]
    assert " ".join(texts).split() == ["Hello", "there.", "World", "Wide", "Web."]
    assert main(["phonemes", "<speak><audio src='x'/></speak>", "--voice", "en_US-joe-medium"]) == 1
    assert "<audio>" in capsys.readouterr().err


def test_an_unknown_language_fails_saying_which_are_known(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["phonemes", "hi", "--language", "tlh"]) == 1
    assert "known languages: en, en-US, en-GB, zh, zh-CN" in capsys.readouterr().err


def test_voice_add_refuses_a_voice_it_cannot_serve_naming_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    onnx_path = tmp_path / "xx-broken-medium.onnx"
    onnx_path.write_bytes(b"")
    (tmp_path / "xx-broken-medium.onnx.json").write_text(json.dumps({"phoneme_type": "espeak", "audio": {"sample_rate": 22050}}))
    assert main(["voice", "add", str(onnx_path), "--voices-dir", str(tmp_path / "voices")]) == 1
    assert f"{tmp_path / 'xx-broken-medium.onnx.json'}: missing field espeak.voice" in capsys.readouterr().err
    assert not (tmp_path / "voices").exists()


def test_voice_list_names_the_installed_voice(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["voice", "list"]) == 0
    assert capsys.readouterr().out.startswith("en_US-joe-medium\ten-US\t22050 Hz\tmedium")


def test_the_installed_command_adds_a_voice_from_any_directory(tmp_path: Path) -> None:
    """The console script, run where the checkout is not the working directory nor on the path, still
    reaches the voice build (it lives in the checkout's scripts, with its corpus)."""
    onnx_path = tmp_path / "xx-broken-medium.onnx"
    onnx_path.write_bytes(b"")
    (tmp_path / "xx-broken-medium.onnx.json").write_text(json.dumps({"phoneme_type": "espeak", "audio": {"sample_rate": 22050}}))
    environment = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    done = subprocess.run(
        [str(Path(sys.executable).parent / "tts-mesh"), "voice", "add", str(onnx_path), "--voices-dir", str(tmp_path / "voices")],
        cwd=tmp_path, env=environment, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert "missing field espeak.voice" in done.stderr and "ModuleNotFoundError" not in done.stderr
