"""`tts-mesh`: speak text with the mesh from a shell.

    tts-mesh say "Hello there." -o hello.opus          # the format follows the file name
    tts-mesh say --file chapter.txt -o chapter.mp3      # long text, with progress on the terminal
    echo "Hi." | tts-mesh say - --play                  # read stdin, play as it arrives
    tts-mesh voices
    tts-mesh phonemes "我去银行。" --language zh          # how a text will be read (tts_mesh/local_commands.py)
    tts-mesh voice add zh_CN-huayan-medium.onnx          # import a Piper voice into the catalogue

The audio is written as it arrives. A WAV file gets its header sizes filled in at the end (a
stream's WAV header cannot know them).
"""

from __future__ import annotations

import argparse
import os
import shutil
import struct
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import BinaryIO, TextIO

import grpc

from tts_mesh import local_commands
from tts_mesh.client import ENCODINGS_BY_NAME, TextToSpeechClient, encoding_for_path

DEFAULT_ADDRESS = os.environ.get("TTS_MESH_ADDRESS", "127.0.0.1:50051")
DEFAULT_CONNECT_TIMEOUT_S = 10.0
"""How long `say` and `voices` wait for the mesh to answer before saying nothing does (a mesh just
started answers within a few seconds)."""
PLAYERS = (
    ("ffplay", ["-autoexit", "-nodisp", "-loglevel", "quiet", "-i", "-"]),
    ("mpv", ["--no-video", "--really-quiet", "-"]),
)
"""Programs `--play` can feed the audio stream to, in order of preference."""


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command in ("phonemes", "voice"):  # run here, no mesh needed
        return local_commands.run(args)
    client = TextToSpeechClient(
        args.address,
        api_key=args.api_key or os.environ.get("TTS_MESH_API_KEY"),
        tls=args.tls,
        root_certificates=Path(args.ca).read_bytes() if args.ca else None,
        connect_timeout_s=args.connect_timeout,
    )
    try:
        with client:
            if args.command == "voices":
                return _voices(client)
            return _say(client, args)
    except grpc.RpcError as error:
        print(f"tts-mesh: {error.code().name}: {error.details()}", file=sys.stderr)
        return 1
    except ConnectionError as error:
        print(f"tts-mesh: {error}; start the mesh (`make run`) or give its --address", file=sys.stderr)
        return 1


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tts-mesh", description="Speak text with the TTS mesh.")
    parser.add_argument("--address", default=DEFAULT_ADDRESS, help=f"gateway or edge HOST:PORT (default {DEFAULT_ADDRESS}; env TTS_MESH_ADDRESS)")
    parser.add_argument("--api-key", default=None, help="API key sent as `authorization: Bearer` (env TTS_MESH_API_KEY)")
    parser.add_argument("--tls", action="store_true", help="connect with TLS (the system's root certificates)")
    parser.add_argument("--connect-timeout", type=float, default=DEFAULT_CONNECT_TIMEOUT_S, help=f"seconds to wait for the mesh to answer at all (default {DEFAULT_CONNECT_TIMEOUT_S:g})")
    parser.add_argument("--ca", default=None, help="a CA certificate file to trust instead (implies --tls)")
    commands = parser.add_subparsers(dest="command", required=True)
    say = commands.add_parser("say", help="speak a text into a file, or play it")
    say.add_argument("text", nargs="?", default=None, help='the text; "-" reads standard input')
    say.add_argument("--file", default=None, help="read the text from this file")
    say.add_argument("-o", "--out", default=None, help="write the audio here (default: speech.<format>)")
    say.add_argument("--format", choices=sorted(ENCODINGS_BY_NAME), default=None, help="encoding (default: from the file name, else wav)")
    say.add_argument("--voice", default="", help="voice name (default: the service's default voice)")
    say.add_argument("--speed", type=float, default=1.0, help="speaking-rate multiple, 0.25 to 4.0")
    say.add_argument("--rate", type=int, default=0, help="output sample rate in Hz (0: the format's default)")
    say.add_argument("--tier", choices=("quality", "fast", "auto"), default="", help="the voice's tier (default: quality)")
    say.add_argument("--play", action="store_true", help="also play the audio as it arrives (needs ffplay or mpv)")
    say.add_argument("--quiet", action="store_true", help="no progress or summary on standard error")
    commands.add_parser("voices", help="list the voices the service speaks")
    local_commands.add_parsers(commands)
    return parser


def _voices(client: TextToSpeechClient) -> int:
    for voice in client.voices():
        default = " (default)" if voice.is_default else ""
        print(f"{voice.name}\t{voice.language_code}\t{voice.natural_sample_rate_hz} Hz\t{voice.num_speakers} speaker(s){default}")
    return 0


def _say(client: TextToSpeechClient, args: argparse.Namespace) -> int:
    text = _text(args)
    encoding = args.format or (encoding_for_path(args.out) if args.out else "wav")
    out_path = Path(args.out or f"speech.{encoding}")
    player = _player() if args.play else None
    if args.play and player is None:
        print("tts-mesh: --play needs ffplay or mpv on the PATH", file=sys.stderr)
        return 2
    progress = _Progress(sys.stderr, enabled=not args.quiet, characters=len(text))
    started = time.monotonic()
    responses = client.synthesize(text, voice=args.voice, speed=args.speed, encoding=encoding, sample_rate_hz=args.rate, tier=args.tier)
    with out_path.open("wb") as out:  # opened once the mesh answers: a mesh that does not leaves no empty file
        for response in responses:
            out.write(response.audio)
            if player is not None and response.audio:
                player.stdin.write(response.audio)  # type: ignore[union-attr]
                player.stdin.flush()  # type: ignore[union-attr]
            progress.update(response, time.monotonic() - started)
        if encoding == "wav":
            _fix_wav_sizes(out)
    if player is not None:
        player.stdin.close()  # type: ignore[union-attr]
        player.wait()
    progress.done(out_path, time.monotonic() - started)
    return 0


def _text(args: argparse.Namespace) -> str:
    if args.file:
        return Path(args.file).read_text(encoding="utf-8")
    if args.text in (None, "-"):
        return sys.stdin.read()
    return args.text


def _player() -> subprocess.Popen[bytes] | None:
    for program, arguments in PLAYERS:
        path = shutil.which(program)
        if path:
            return subprocess.Popen([path, *arguments], stdin=subprocess.PIPE)
    return None


def _fix_wav_sizes(out: BinaryIO) -> None:
    """Write the real RIFF and data sizes over the stream's "unknown" ones (a file can seek back)."""
    size = out.tell()
    out.seek(4)
    out.write(struct.pack("<I", size - 8))
    out.seek(40)
    out.write(struct.pack("<I", size - 44))
    out.seek(size)


class _Progress:
    """Audio received, sentences done and time so far, on one terminal line."""

    def __init__(self, stream: TextIO, enabled: bool, characters: int) -> None:
        self._stream = stream
        self._enabled = enabled
        self._live = enabled and stream.isatty()
        self._characters = characters
        self.first_audio_s: float | None = None
        self.audio_s = 0.0
        self.sentences = 0
        self.sample_rate_hz = 0

    def update(self, response: object, elapsed_s: float) -> None:
        audio_s = getattr(response, "audio_offset_s", 0.0) + getattr(response, "audio_duration_s", 0.0)
        self.audio_s = max(self.audio_s, audio_s)
        self.sample_rate_hz = getattr(response, "sample_rate_hz", 0)
        if self.first_audio_s is None and getattr(response, "audio_duration_s", 0.0) > 0:
            self.first_audio_s = elapsed_s
        if getattr(response, "sentence_end", False):
            self.sentences += 1
            if self._live:
                self._stream.write(f"\r{self.sentences} sentences, {self.audio_s:6.1f} s of audio in {elapsed_s:5.1f} s")
                self._stream.flush()

    def done(self, path: Path, elapsed_s: float) -> None:
        if not self._enabled:
            return
        if self._live:
            self._stream.write("\r")
        first = f"{self.first_audio_s:.3f} s" if self.first_audio_s is not None else "-"
        self._stream.write(
            f"wrote {path}: {self.audio_s:.2f} s of audio at {self.sample_rate_hz} Hz, {self.sentences} sentences "
            f"({self._characters} characters); first audio after {first}, done after {elapsed_s:.3f} s\n"
        )


if __name__ == "__main__":
    sys.exit(main())
