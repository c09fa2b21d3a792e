"""The commands of `tts-mesh` that run here, without a mesh:

    tts-mesh phonemes "我去银行。" --language zh       # how a text will be read (no voice needed)
    tts-mesh phonemes "Hello." --voice en_US-joe-medium --json
    tts-mesh phonemes "你好" --language zh --url http://127.0.0.1:8080   # ask a gateway or the edge
    tts-mesh voice add ~/voices/zh_CN-huayan-medium.onnx      # import a Piper voice, build its pieces
    tts-mesh voice list                                       # the voices of the catalogue

They need the project's text front end (and, for `voice add`, its training code): run them from a
checkout of the project.
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Final


def add_parsers(commands: argparse._SubParsersAction) -> None:
    """The `phonemes` and `voice` commands."""
    phonemes = commands.add_parser("phonemes", help="how a text will be read: each sentence's phonemes (and pinyin)")
    phonemes.add_argument("text", nargs="?", default=None, help='the text; "-" reads standard input')
    chosen = phonemes.add_mutually_exclusive_group(required=True)
    chosen.add_argument("--language", default=None, help="a BCP 47 language: en, en-US, en-GB, zh, zh-CN")
    chosen.add_argument("--voice", default=None, help="a voice of the catalogue (its own phoneme map and espeak-ng voice)")
    phonemes.add_argument("--voices-dir", type=Path, default=None, help="the voice catalogue's folder (default: the installed voices)")
    phonemes.add_argument("--url", default=None, help="ask this gateway or edge (http://HOST:PORT) instead of reading here")
    phonemes.add_argument("--json", action="store_true", help="print the answer of POST /v1/audio/phonemes")
    voice = commands.add_parser("voice", help="the voice catalogue: import a Piper voice, list the voices")
    actions = voice.add_subparsers(dest="voice_command", required=True)
    add = actions.add_parser("add", help="import a Piper NAME.onnx (+ NAME.onnx.json) and build its mel head and adapter")
    add.add_argument("onnx", type=Path, help="the Piper voice's .onnx file (its .onnx.json beside it)")
    add.add_argument("--config", type=Path, default=None, help="its .onnx.json (default: the .onnx path + .json)")
    add.add_argument("--voices-dir", type=Path, default=None, help="the catalogue to add it to (default: the installed voices)")
    add.add_argument("--name", default=None, help="the voice's name (default: the file name without .onnx)")
    add.add_argument("--threads", type=int, default=2, help="CPU threads for the build")
    add.add_argument("--quick", action="store_true", help="a smoke build in about a minute (weights unfit to serve)")
    listing = actions.add_parser("list", help="the voices of the catalogue, and the files it refuses with why")
    listing.add_argument("--voices-dir", type=Path, default=None, help="the catalogue's folder (default: the installed voices)")


def run(args: argparse.Namespace) -> int:
    """Run a local command; its exit status."""
    if args.command == "phonemes":
        return _phonemes(args)
    if args.voice_command == "add":
        return _voice_add(args)
    return _voice_list(args)


def _phonemes(args: argparse.Namespace) -> int:
    text = sys.stdin.read() if args.text in (None, "-") else args.text
    if args.url:
        answer = _ask(args.url, {"input": text, "voice": args.voice, "language": args.language})
    else:
        answer = _read_here(text, args.voice, args.language, args.voices_dir)
    if "error" in answer:
        print(f"tts-mesh: {answer['error']['message']}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(answer, ensure_ascii=False, indent=2))
        return 0
    for sentence in answer["sentences"]:
        print(sentence["text"])
        if sentence.get("pinyin"):
            print(f"  pinyin:   {sentence['pinyin']}")
        print(f"  phonemes: {sentence['phonemes']}")
    return 0


def _read_here(text: str, voice: str | None, language: str | None, voices_dir: Path | None) -> dict:
    from libs.synthesis.phoneme_reading import Reading, SentenceReading, language_espeak_voice, spoken_texts
    from libs.synthesis.text_side import TextLimits
    from libs.text.errors import TextError
    from libs.text.frontends import front_end_name, frontend_for
    from libs.text.reading import ReadingRules
    from libs.voice.catalogue import VoiceCatalogue
    from libs.voice.registry import UnknownVoiceError
    from libs.wire.errors import InvalidRequestError

    limits = TextLimits()
    try:
        if voice:
            chosen = VoiceCatalogue.scan(voices_dir).registry().get(voice)
            tag, espeak_voice, id_map, name = chosen.language_code, chosen.espeak_voice, chosen.phoneme_id_map(), chosen.name
        else:
            assert language is not None
            tag, espeak_voice = language_espeak_voice(language)
            id_map, name = VoiceCatalogue.scan(voices_dir).registry().default.phoneme_id_map(), None
        frontend = frontend_for(
            id_map, espeak_voice, max_phoneme_ids=limits.max_sentence_ids, max_word_chars=limits.max_word_chars,
            reading=ReadingRules(written_forms=limits.read_written_forms, heteronyms=limits.read_heteronyms),
        )  # fmt: skip
        sentences = [sentence for part in spoken_texts(text, frontend.max_text_chars) for sentence in frontend.sentences(part)]
    except (TextError, UnknownVoiceError, InvalidRequestError, ValueError) as error:
        return {"error": {"message": str(error), "type": "invalid_request_error", "param": None, "code": None}}
    reading = Reading(tag, espeak_voice, front_end_name(espeak_voice), name)
    reading.sentences.extend(SentenceReading(s.text, "".join(s.phonemes), s.phoneme_ids, " ".join(s.pinyin)) for s in sentences)
    return reading.to_json()


def _ask(url: str, body: dict) -> dict:
    request = urllib.request.Request(
        url.rstrip("/") + "/v1/audio/phonemes",
        data=json.dumps({key: value for key, value in body.items() if value}).encode(),
        headers={"content-type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as error:
        return json.loads(error.read() or b"{}") or {"error": {"message": str(error)}}


CHECKOUT: Final = Path(__file__).resolve().parents[1]
"""The project's checkout, when the command runs from one (an editable install, as `make` makes)."""


def voice_builder() -> Any:
    """`scripts.voice.build.add_voice`: the voice build lives in the checkout (with its corpus), not in
    the installed packages, so the command puts the checkout on the path. SystemExit saying so where
    there is none (an installed wheel)."""
    if not (CHECKOUT / "scripts" / "voice" / "build.py").is_file():
        raise SystemExit("tts-mesh: `voice add` builds the voice's mel head and adapter with the project's build scripts and corpus; "
                         "run it from a checkout of the project (`pip install -e .` there)")  # fmt: skip
    if str(CHECKOUT) not in sys.path:
        sys.path.insert(0, str(CHECKOUT))
    from scripts.voice.build import add_voice

    return add_voice


def _voice_add(args: argparse.Namespace) -> int:
    from libs.voice.catalogue import VoiceRejectedError

    add_voice = voice_builder()
    try:
        folder = add_voice(args.onnx, args.config, args.voices_dir, args.name, threads=args.threads, quick=args.quick)
    except VoiceRejectedError as error:
        print(f"tts-mesh: {error}", file=sys.stderr)
        return 1
    print(f"added {folder.name}: {folder}")
    return 0


def _voice_list(args: argparse.Namespace) -> int:
    from libs.voice.catalogue import VoiceCatalogue

    catalogue = VoiceCatalogue.scan(args.voices_dir)
    for entry in catalogue.voices:
        voice = entry.voice
        speakers = ", ".join(entry.speakers) if entry.speakers else "1 speaker"
        print(f"{voice.name}\t{voice.language_code}\t{voice.sample_rate_hz} Hz\t{voice.quality}\t{speakers}")
    for refusal in catalogue.refused:
        print(f"refused: {refusal}", file=sys.stderr)
    return 0
