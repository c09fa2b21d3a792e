"""The `tts-mesh` command against the real mesh: it writes playable files in the format their name
asks for, reads long text from a file, lists the voices, and fails with the service's message."""

from __future__ import annotations

import io
import socket
import subprocess
import sys
import wave
from pathlib import Path

import av
import pytest

from tests.support.mesh import Mesh

ROOT = Path(__file__).resolve().parents[2]


def _cli(mesh: Mesh, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tts_mesh.cli", "--address", mesh.gateway_address, *args],
        cwd=ROOT, input=stdin, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def _duration_s(path: Path) -> float:
    with av.open(str(path)) as container:
        stream = container.streams.audio[0]
        return sum(frame.samples for frame in container.decode(stream)) / stream.sample_rate


@pytest.mark.parametrize(("name", "container"), [("hello.opus", "ogg"), ("hello.mp3", "mp3"), ("hello.flac", "flac")])
def test_say_writes_the_format_the_file_name_asks_for(mesh: Mesh, tmp_path: Path, name: str, container: str) -> None:
    out = tmp_path / name
    result = _cli(mesh, "say", "Files in any format.", "-o", str(out))
    assert result.returncode == 0, result.stderr
    with av.open(str(out)) as opened:
        assert opened.format.name.split(",")[0] == container
    assert 0.8 < _duration_s(out) < 4.0
    assert "first audio after" in result.stderr


def test_a_wav_file_gets_its_real_sizes(mesh: Mesh, tmp_path: Path) -> None:
    out = tmp_path / "hello.wav"
    assert _cli(mesh, "say", "A proper wave file.", "-o", str(out)).returncode == 0
    data = out.read_bytes()
    assert int.from_bytes(data[4:8], "little") == len(data) - 8
    with wave.open(io.BytesIO(data)) as wav:
        assert wav.getframerate() == 22050 and wav.getnframes() == (len(data) - 44) // 2


def test_long_text_from_a_file_or_stdin(mesh: Mesh, tmp_path: Path) -> None:
    text = "This is one sentence of a longer text. " * 6
    source = tmp_path / "chapter.txt"
    source.write_text(text, encoding="utf-8")
    from_file = _cli(mesh, "say", "--file", str(source), "-o", str(tmp_path / "a.opus"))
    from_stdin = _cli(mesh, "say", "-", "-o", str(tmp_path / "b.opus"), stdin=text)
    assert from_file.returncode == 0 and from_stdin.returncode == 0, from_file.stderr + from_stdin.stderr
    assert "6 sentences" in from_file.stderr
    assert _duration_s(tmp_path / "a.opus") == pytest.approx(_duration_s(tmp_path / "b.opus"), abs=0.03)


def test_voices_and_errors(mesh: Mesh, tmp_path: Path) -> None:
    voices = _cli(mesh, "voices")
    assert voices.returncode == 0 and "en_US-joe-medium" in voices.stdout and "(default)" in voices.stdout
    failed = _cli(mesh, "say", "Hello.", "--voice", "nobody", "-o", str(tmp_path / "x.wav"))
    assert failed.returncode == 1
    assert failed.stderr.startswith("tts-mesh: NOT_FOUND:") and "en_US-joe-medium" in failed.stderr


def test_a_mesh_that_does_not_answer_is_named_at_once_and_leaves_no_file(tmp_path: Path) -> None:
    with socket.socket() as placeholder:  # a port nothing listens on
        placeholder.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{placeholder.getsockname()[1]}"
    out = tmp_path / "nothing.wav"
    result = subprocess.run(  # its timeout, far under the call's own ten minutes, fails a command that waits on
        [sys.executable, "-m", "tts_mesh.cli", "--address", address, "--connect-timeout", "1", "say", "Anyone there?", "-o", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 1
    assert f"nothing answers at {address} within 1 s" in result.stderr and "make run" in result.stderr
    assert not out.exists()
