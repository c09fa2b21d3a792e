"""The server-wide lexicon: a file of words and their phonemes that applies to every request and is
read again when it changes, without a restart.

One entry per line, the word, whitespace, then its IPA (spaces between phonemes allowed):

    # comment
    Nguyen    ŋ w ˈɪ n
    kubectl   kˈuːb kəntɹˌoʊl

A request's own lexicon wins over this one for the words both have. The gateway reads the file at
start-up and refuses to start on a bad entry (naming its line); a bad edit later is logged and the
last good version stays in use.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from libs.text.pronounce import InvalidLexiconError, parse_lexicon_entries

_log = logging.getLogger(__name__)

DEFAULT_LEXICON_CHECK_S: Final = 2.0
"""How often the file's modification time is looked at (s)."""
MAX_LEXICON_FILE_BYTES: Final = 2 * 1024 * 1024


def parse_lexicon_file_text(text: str, inventory: Mapping[str, object], where: str) -> dict[str, tuple[str, ...]]:
    """The entries of a lexicon file's text, checked against the voice's phonemes."""
    entries: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split(None, 1)
        if len(parts) != 2:
            raise InvalidLexiconError(f"{where} line {number}: expected a word, whitespace, then its phonemes")
        word, ipa = parts
        entries.update(parse_lexicon_entries({word: ipa}, inventory, f"{where} line {number}"))
    return entries


class LexiconFile:
    """A lexicon file, read again at most every `check_s` seconds when its size or time changed."""

    def __init__(
        self, path: Path | str, inventory: Mapping[str, object], check_s: float = DEFAULT_LEXICON_CHECK_S, strict: bool = True
    ) -> None:
        """Reads the file now: InvalidLexiconError or InvalidPhonemeError (or OSError) when it is bad;
        not `strict`, a bad file is logged and the lexicon starts empty until a good version appears."""
        self.path = Path(path)
        self._inventory = inventory
        self._check_s = check_s
        self._signature: tuple[int, int] | None = None
        self._entries: dict[str, tuple[str, ...]] = {}
        self._checked_at = time.monotonic()
        if strict:
            self._signature = self._stat()
            self._entries = self._read()
        else:
            self.reload_if_changed()

    def _stat(self) -> tuple[int, int]:
        status = os.stat(self.path)
        return status.st_mtime_ns, status.st_size

    def _read(self) -> dict[str, tuple[str, ...]]:
        data = self.path.read_bytes()
        if len(data) > MAX_LEXICON_FILE_BYTES:
            raise InvalidLexiconError(f"{self.path} is {len(data)} bytes; the limit is {MAX_LEXICON_FILE_BYTES}")
        return parse_lexicon_file_text(data.decode("utf-8"), self._inventory, str(self.path))

    def entries(self) -> Mapping[str, tuple[str, ...]]:
        """The entries now in force (the file is looked at again when `check_s` has passed)."""
        now = time.monotonic()
        if now - self._checked_at >= self._check_s:
            self._checked_at = now
            self.reload_if_changed()
        return self._entries

    def reload_if_changed(self) -> bool:
        """Read the file again if it changed; True when new entries took effect. A bad version is
        logged and the last good one kept."""
        try:
            signature = self._stat()
            if signature == self._signature:
                return False
            entries = self._read()
        except (OSError, UnicodeDecodeError, ValueError) as error:
            _log.error("lexicon %s not reloaded, keeping the last good version: %s", self.path, error)
            return False
        self._signature, self._entries = signature, entries
        _log.info("lexicon %s reloaded: %d entries", self.path, len(entries))
        return True
