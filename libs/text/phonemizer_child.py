"""`python -m libs.text.phonemizer_child`: one process of the phonemiser pool (libs.text.phonemizer_pool).

espeak-ng is native code that reads the client's text, and some texts crash it; here it crashes
this process and not the gateway. The process imports only the text frontend (no torch, no gRPC),
reads one request per line on stdin and answers one line on stdout, both JSON:

- request: {"id": n, "voice": name, "frontend": {...}, "chunk": text, "continues": bool, "lexicon":
  {word: ipa}, "first_max_ids": n, "eager_opening": bool} ("lexicon": the request's, checked by the
  gateway, over the server's file; "first_max_ids": cut the first sentence's opening to that many
  ids; "eager_opening": a stream that starts alone, `TextFrontend.chunk_sentences`); "frontend"
  (`FrontendSpec.to_json`) comes with the first request for a voice, and the process keeps that
  voice's `TextFrontend` for the requests after it. A request without "chunk" only loads the
  voice's front end, dictionaries included, and answers no sentences;
- answer: {"id": n, "sentences": [[text, phonemes, [ids], [[word, first id, end id], ...], pinyin,
  [first spoken id, end spoken id]], ...]} or {"id": n, "error": message}; pinyin is space-separated
  ("" but for Mandarin), the spoken span empty for a sentence spoken whole.

On start it loads espeak-ng and writes {"ready": pid}. It ends when stdin closes, and with the
gateway: it asks the kernel for SIGKILL when its parent dies, and ignores SIGINT and SIGTERM, which
a terminal or a process manager sends to the whole group while the gateway drains its streams.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import sys
from typing import Any, BinaryIO

from libs.text.espeak import espeak_engine
from libs.text.frontends import Frontend, frontend_for
from libs.text.lexicon import LexiconFile
from libs.text.pronounce import phoneme_symbols
from libs.text.reading import ReadingRules

_PR_SET_PDEATHSIG = 1
# The server's lexicon file of each voice (the gateway checked it before starting this process).
_LEXICON_FILES: dict[str, LexiconFile] = {}


def _die_with_parent() -> None:
    with contextlib.suppress(OSError, AttributeError):  # not Linux: stdin closing still ends the process
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _answer(request: dict[str, Any], frontends: dict[str, Frontend]) -> dict[str, Any]:
    voice = request["voice"]
    spec = request.get("frontend")
    if spec is not None:
        frontends[voice] = frontend_for(  # by the voice's espeak-ng voice (libs.text.frontends)
            {phoneme: tuple(ids) for phoneme, ids in spec["phoneme_id_map"].items()},
            espeak_voice=spec["espeak_voice"],
            max_phoneme_ids=spec["max_phoneme_ids"],
            max_word_chars=spec["max_word_chars"],
            reading=ReadingRules(
                written_forms=bool(spec.get("read_written_forms")), heteronyms=bool(spec.get("read_heteronyms"))
            ),
        )
        _LEXICON_FILES.pop(voice, None)
        if spec.get("lexicon_file"):
            _LEXICON_FILES[voice] = LexiconFile(
                spec["lexicon_file"], frontends[voice].phoneme_id_map, float(spec.get("lexicon_check_s", 2.0)), strict=False
            )
    frontend = frontends.get(voice)
    if frontend is None:
        return {"id": request["id"], "error": f"no frontend for voice {voice!r} in this process"}
    if "chunk" not in request:
        frontend.load()
        return {"id": request["id"], "sentences": []}
    server_lexicon = _LEXICON_FILES.get(voice)
    lexicon = dict(server_lexicon.entries()) if server_lexicon is not None else {}
    lexicon.update({word: phoneme_symbols(ipa) for word, ipa in request.get("lexicon", {}).items()})
    first_max_ids = request.get("first_max_ids")
    sentences = frontend.chunk_sentences(
        request["chunk"], continues=bool(request.get("continues")), lexicon=lexicon,
        first_max_ids=int(first_max_ids) if first_max_ids else None, eager_opening=bool(request.get("eager_opening")),
    )  # fmt: skip
    return {
        "id": request["id"],
        "sentences": [
            [
                sentence.text,
                "".join(sentence.phonemes),
                list(sentence.phoneme_ids),
                [[word.text, word.first_id, word.end_id] for word in sentence.words],
                " ".join(sentence.pinyin),
                list(sentence.spoken_ids or ()),
            ]
            for sentence in sentences
        ],
    }


def serve(requests: BinaryIO, answers: BinaryIO) -> None:
    """Answer requests until `requests` ends."""
    frontends: dict[str, Frontend] = {}
    for line in requests:
        request: dict[str, Any] = {}
        try:
            request = json.loads(line)
            answer = _answer(request, frontends)
        except Exception as error:  # a bug or a malformed line: say so, and keep serving
            answer = {"id": request.get("id"), "error": f"{type(error).__name__}: {error}"}
        answers.write(json.dumps(answer).encode("ascii") + b"\n")
        answers.flush()


def main() -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    _die_with_parent()
    # The answers go to a copy of stdout; stdout itself becomes stderr, so nothing espeak-ng or a
    # library prints can corrupt them.
    answers = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    espeak_engine()  # load espeak-ng and its data before saying ready
    answers.write(json.dumps({"ready": os.getpid()}).encode() + b"\n")
    answers.flush()
    serve(sys.stdin.buffer, answers)
    return 0


if __name__ == "__main__":
    sys.exit(main())
