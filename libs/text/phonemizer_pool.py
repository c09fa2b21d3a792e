"""A bounded pool of child processes that phonemise text, so a native crash in espeak-ng costs one
request instead of the gateway.

espeak-ng parses the client's text in C and some texts make it overflow a buffer and abort the
process (libs.text.espeak: a few are neutralised before it sees them; the pool is the safety net
for the rest). Each child (`python -m libs.text.phonemizer_child`) hosts the voices' `TextFrontend`s
and phonemises one chunk at a time:

- a request takes an idle child (waiting in line when all are busy) and has `call_timeout_s` from
  the moment the child has its text. A child that has not yet served the request's voice first
  loads its front end, dictionaries included, within `start_timeout_s` (loading is start-up work,
  bounded by what a start may take, and a slow machine's load must not count as a hung text);
- a child that dies on a request is replaced, and that request fails with PhonemizerCrashError (its
  text crashed espeak-ng: INVALID_ARGUMENT, saying what to change); one that does not answer in time
  is killed and replaced, and the request fails with PhonemizerTimeoutError. Requests on the other
  children, and those waiting in line, carry on;
- a child found dead while idle is replaced without failing anyone;
- answers are checked before use (a child whose memory espeak-ng corrupted could send anything):
  JSON, never pickle, with every id inside the voice's map.

Everything runs on the event loop; the children do the work. A request whose caller goes away
leaves its child to finish in the background before the child takes the next one.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import json
import logging
import os
import signal
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from libs.text.errors import PhonemizerCrashError, PhonemizerTimeoutError
from libs.text.frontend import Sentence
from libs.text.words import WordSpan

_log = logging.getLogger(__name__)

CHILD_MODULE: Final = "libs.text.phonemizer_child"
DEFAULT_START_TIMEOUT_S: Final = 60.0
"""Longest a text process may take to load espeak-ng and say it is ready before its start counts as failed."""
# The answer for a 1,000-character chunk is at most a few hundred KB (ids and phonemes, JSON).
_ANSWER_LIMIT_BYTES: Final = 8 * 1024 * 1024
_RESPAWN_BACKOFF_S: Final = (0.5, 1.0, 2.0, 5.0, 10.0, 30.0)
"""Waits between attempts to start a text process that failed to start: a broken install retries slowly, never in a loop."""
_CLOSE_GRACE_S: Final = 2.0
"""How long a closing pool lets each text process exit on its own before it is killed."""
_REPO_ROOT: Final = Path(__file__).resolve().parents[2]


class PhonemizerError(RuntimeError):
    """The pool itself failed (a child that cannot start, or one that answers nonsense): a server fault."""


class _ChildDied(Exception):
    pass


@dataclass(frozen=True)
class FrontendSpec:
    """What a child needs to build one voice's `TextFrontend`."""

    voice: str
    """The voice's name (a child keeps one frontend per name)."""
    phoneme_id_map: Mapping[str, Sequence[int]]
    """The voice's phoneme-id map."""
    espeak_voice: str
    """The espeak-ng voice it was trained with."""
    max_phoneme_ids: int | None
    """Most ids per sentence (TextFrontend's `max_phoneme_ids`)."""
    max_word_chars: int
    """Longest word handed to espeak-ng (TextFrontend's `max_word_chars`)."""
    read_written_forms: bool = False
    """Say written forms as words (libs.text.reading.ReadingRules)."""
    read_heteronyms: bool = False
    """Read heteronyms from their context (libs.text.reading.ReadingRules)."""
    lexicon_file: str = ""
    """The server's lexicon file (libs.text.lexicon; empty: none)."""
    lexicon_check_s: float = 2.0
    """How often a child looks whether the lexicon file changed (s)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "phoneme_id_map": {phoneme: list(ids) for phoneme, ids in self.phoneme_id_map.items()},
            "espeak_voice": self.espeak_voice,
            "max_phoneme_ids": self.max_phoneme_ids,
            "max_word_chars": self.max_word_chars,
            "read_written_forms": self.read_written_forms,
            "read_heteronyms": self.read_heteronyms,
            "lexicon_file": self.lexicon_file,
            "lexicon_check_s": self.lexicon_check_s,
        }

    @functools.cached_property
    def max_id(self) -> int:
        """The largest id of the map: no valid answer holds a larger one."""
        return max(max(ids) for ids in self.phoneme_id_map.values() if ids)


class _Child:
    """One child process and the voices it has a frontend for."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self.pid = process.pid
        self.voices: set[str] = set()

    @property
    def alive(self) -> bool:
        return self.process.returncode is None

    def send(self, request: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(request).encode("ascii") + b"\n")

    async def answer(self) -> dict[str, Any]:
        """The child's next answer; _ChildDied when it ended instead (ValueError: not an answer)."""
        assert self.process.stdout is not None
        line = await self.process.stdout.readline()
        if not line:
            raise _ChildDied
        answer = json.loads(line)
        if not isinstance(answer, dict):
            raise ValueError("the answer is not a JSON object")
        return answer

    def describe_exit(self) -> str:
        code = self.process.returncode
        if code is None:
            return "still running"
        if code < 0:
            try:
                return f"killed by {signal.Signals(-code).name}"
            except ValueError:
                return f"killed by signal {-code}"
        return f"exited with code {code}"


class PhonemizerPool:
    """`processes` children that phonemise chunks of text for any voice (see the module docstring)."""

    def __init__(
        self,
        processes: int,
        call_timeout_s: float,
        *,
        command: Sequence[str] | None = None,
        start_timeout_s: float = DEFAULT_START_TIMEOUT_S,
    ) -> None:
        if processes < 1:
            raise ValueError("a phonemiser pool needs at least one process")
        self.processes = processes
        self.call_timeout_s = call_timeout_s
        self._command = list(command) if command is not None else [sys.executable, "-m", CHILD_MODULE]
        self._start_timeout_s = start_timeout_s
        self._idle: asyncio.Queue[_Child] = asyncio.Queue()
        self._children: set[_Child] = set()
        self._background: set[asyncio.Task[None]] = set()
        self._request_ids = itertools.count()
        self._started = False
        self._starting: asyncio.Lock | None = None
        self._closed = False
        self.replaced = 0
        """Children replaced so far (crashed, hung, found dead or answering nonsense)."""

    async def start(self) -> None:
        """Start every child and wait until each has loaded espeak-ng (a server does this before it
        serves; otherwise the first request does it)."""
        if self._starting is None:
            self._starting = asyncio.Lock()
        async with self._starting:
            if not self._started:
                await self._start_children()
                self._started = True

    async def _start_children(self) -> None:
        children = await asyncio.gather(*(self._spawn() for _ in range(self.processes)), return_exceptions=True)
        failures = [child for child in children if isinstance(child, BaseException)]
        for child in children:
            if isinstance(child, _Child):
                self._idle.put_nowait(child)
        if failures:
            await self.close()
            raise PhonemizerError(f"{len(failures)} of {self.processes} text processes failed to start: {failures[0]}")

    def pids(self) -> list[int]:
        """Process ids of the children running now."""
        return sorted(child.pid for child in self._children if child.alive)

    async def sentences(
        self,
        spec: FrontendSpec,
        chunk: str,
        continues: bool = False,
        lexicon: Mapping[str, Sequence[str]] | None = None,
        first_max_ids: int | None = None,
        eager_opening: bool = False,
    ) -> list[Sentence]:
        """The sentences of one chunk (`TextFrontend.chunk_sentences` in a child), with `lexicon`
        (a request's, already checked against the voice) over the server's, the first sentence's
        opening cut to `first_max_ids` ids when it is longer (sooner with `eager_opening`).

        Raises PhonemizerCrashError when the text crashed espeak-ng, PhonemizerTimeoutError when a
        child took longer than `call_timeout_s` on it, PhonemizerError for a fault of the pool.
        """
        child = await self._take()
        if spec.voice not in child.voices:
            await self._load(child, spec)
        request: dict[str, Any] = {"id": next(self._request_ids), "voice": spec.voice, "chunk": chunk, "continues": continues}
        if lexicon:
            request["lexicon"] = {word: "".join(phonemes) for word, phonemes in lexicon.items()}
        if first_max_ids:
            request["first_max_ids"] = first_max_ids
            if eager_opening:
                request["eager_opening"] = True
        try:
            child.send(request)
            async with asyncio.timeout(self.call_timeout_s):
                answer = await child.answer()
        except TimeoutError:
            self._replace(child, f"gave no answer within {self.call_timeout_s:g} s on {len(chunk)} characters")
            raise PhonemizerTimeoutError(self.call_timeout_s) from None
        except (_ChildDied, ConnectionError):
            await self._wait_exit(child)
            self._replace(child, f"{child.describe_exit()} on {len(chunk)} characters")
            raise PhonemizerCrashError() from None
        except asyncio.CancelledError:
            self._finish_in_background(child)
            raise
        except ValueError as error:  # not JSON, or a line past the limit
            self._replace(child, f"sent an unreadable answer ({error})")
            raise PhonemizerError("a text process sent an unreadable answer") from None
        return self._accepted(child, request["id"], answer, spec)

    async def on_every_child(self, spec: FrontendSpec) -> None:
        """Load `spec`'s voice on every child, dictionaries included (a warm-up before serving)."""
        children = [await self._take() for _ in range(self.processes)]
        results = await asyncio.gather(*(self._load(child, spec) for child in children), return_exceptions=True)
        for child, result in zip(children, results, strict=True):
            if result is None:  # a child that failed was replaced by `_load`
                self._idle.put_nowait(child)
        for result in results:
            if isinstance(result, BaseException):
                raise result

    async def _load(self, child: _Child, spec: FrontendSpec) -> None:
        """Have `child` load `spec`'s voice before its first text of it, within the start timeout. The
        caller keeps the child; when it cannot load, it is replaced and PhonemizerError raised."""
        request = _load_request(next(self._request_ids), spec)
        try:
            child.send(request)
            async with asyncio.timeout(self._start_timeout_s):
                answer = await child.answer()
        except TimeoutError:
            self._replace(child, f"did not load voice {spec.voice!r} within {self._start_timeout_s:g} s")
            raise PhonemizerError(f"a text process did not load voice {spec.voice!r} in time") from None
        except (_ChildDied, ConnectionError):
            await self._wait_exit(child)
            self._replace(child, f"{child.describe_exit()} loading voice {spec.voice!r}")
            raise PhonemizerError(f"a text process died loading voice {spec.voice!r}") from None
        except asyncio.CancelledError:
            self._finish_in_background(child)
            raise
        except ValueError as error:
            self._replace(child, f"sent an unreadable answer ({error})")
            raise PhonemizerError("a text process sent an unreadable answer") from None
        if answer.get("id") != request["id"] or "error" in answer:
            self._replace(child, f"could not load voice {spec.voice!r}: {str(answer.get('error', 'another answer'))[:300]}")
            raise PhonemizerError(f"a text process could not load voice {spec.voice!r}")
        child.voices.add(spec.voice)

    async def close(self) -> None:
        """Stop every child: stdin closed (each ends), then killed after a grace period."""
        self._closed = True
        for task in list(self._background):
            task.cancel()
        children = list(self._children)
        for child in children:
            if child.process.stdin is not None:
                child.process.stdin.close()
        for child in children:
            try:
                async with asyncio.timeout(_CLOSE_GRACE_S):
                    await child.process.wait()
            except TimeoutError:
                child.process.kill()
                await child.process.wait()
        self._children.clear()

    async def _take(self) -> _Child:
        if not self._started:
            await self.start()
        while True:
            child = await self._idle.get()
            if child.alive:
                return child
            self._replace(child, f"{child.describe_exit()} while idle")

    def _accepted(self, child: _Child, request_id: int, answer: dict[str, Any], spec: FrontendSpec) -> list[Sentence]:
        if answer.get("id") != request_id:
            self._replace(child, "answered another request")
            raise PhonemizerError("a text process answered another request")
        if "error" in answer:
            self._idle.put_nowait(child)  # a Python error in the child: the child itself is fine
            _log.error("text process %d failed: %s", child.pid, str(answer["error"])[:500])
            raise PhonemizerError("a text process failed; see the server log")
        try:
            sentences = _checked_sentences(answer.get("sentences"), spec)
        except ValueError as error:
            self._replace(child, f"sent an invalid answer ({error})")
            raise PhonemizerError("a text process sent an invalid answer") from None
        self._idle.put_nowait(child)
        return sentences

    def _finish_in_background(self, child: _Child) -> None:
        """The caller went away: let `child` finish its answer, then give it back (or replace it)."""

        async def finish() -> None:
            try:
                async with asyncio.timeout(self.call_timeout_s):
                    await child.answer()
            except (TimeoutError, _ChildDied, ConnectionError, ValueError):
                self._replace(child, "did not finish an abandoned request")
                return
            self._idle.put_nowait(child)

        self._in_background(finish())

    async def _wait_exit(self, child: _Child) -> None:
        try:
            async with asyncio.timeout(1.0):
                await child.process.wait()
        except TimeoutError:
            pass

    def _replace(self, child: _Child, why: str) -> None:
        """Kill `child` (if it still runs) and start another in its place, in the background."""
        _log.warning("text process %d %s; starting another", child.pid, why)
        self.replaced += 1
        self._children.discard(child)
        if child.alive:
            child.process.kill()

        async def respawn() -> None:
            await child.process.wait()
            for attempt in itertools.count():
                if self._closed:
                    return
                try:
                    self._idle.put_nowait(await self._spawn())
                    return
                except (TimeoutError, OSError, ValueError, PhonemizerError) as error:
                    delay_s = _RESPAWN_BACKOFF_S[min(attempt, len(_RESPAWN_BACKOFF_S) - 1)]
                    _log.error("a text process failed to start (%s); trying again in %g s", error, delay_s)
                    await asyncio.sleep(delay_s)

        if not self._closed:
            self._in_background(respawn())

    def _in_background(self, work: Any) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _spawn(self) -> _Child:
        environment = dict(os.environ)
        environment["PYTHONPATH"] = os.pathsep.join(filter(None, [str(_REPO_ROOT), environment.get("PYTHONPATH")]))
        process = await asyncio.create_subprocess_exec(
            *self._command,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            env=environment,
            limit=_ANSWER_LIMIT_BYTES,
        )
        child = _Child(process)
        try:
            assert process.stdout is not None
            async with asyncio.timeout(self._start_timeout_s):
                line = await process.stdout.readline()
            ready = json.loads(line) if line else None
            if not isinstance(ready, dict) or ready.get("ready") != process.pid:
                raise PhonemizerError(f"text process {process.pid} {child.describe_exit()} before it was ready")
        except BaseException:
            if child.alive:
                process.kill()
            await process.wait()
            raise
        self._children.add(child)
        return child


def _load_request(request_id: int, spec: FrontendSpec) -> dict[str, Any]:
    """A request that only loads `spec`'s voice in a child (no chunk: no sentences in the answer)."""
    return {"id": request_id, "voice": spec.voice, "frontend": spec.to_json()}


def _checked_words(items: object, id_count: int) -> tuple[WordSpan, ...]:
    """A sentence's word spans, or ValueError for spans that are not in order inside its ids."""
    if not isinstance(items, list):
        raise ValueError("a sentence's words are not a list")
    words: list[WordSpan] = []
    previous_end = 0
    for item in items:
        if not (isinstance(item, list) and len(item) == 3):
            raise ValueError("a word is not [text, first id, end id]")
        text, first, end = item
        if not (isinstance(text, str) and type(first) is int and type(end) is int):
            raise ValueError("a word has fields of the wrong type")
        if not previous_end <= first < end <= id_count:
            raise ValueError("a word's ids are out of order or outside its sentence")
        words.append(WordSpan(text, first, end))
        previous_end = end
    return tuple(words)


def _checked_sentences(items: object, spec: FrontendSpec) -> list[Sentence]:
    """The sentences of an answer, or ValueError for anything a real frontend cannot have sent."""
    if not isinstance(items, list):
        raise ValueError("no list of sentences")
    max_id = spec.max_id
    sentences = []
    for item in items:
        if not (isinstance(item, list) and len(item) == 6):
            raise ValueError("a sentence is not [text, phonemes, ids, words, pinyin, spoken ids]")
        text, phonemes, ids, words, pinyin, spoken = item
        if not (
            isinstance(text, str) and isinstance(phonemes, str) and isinstance(ids, list) and ids and isinstance(pinyin, str)
            and isinstance(spoken, list)
        ):  # fmt: skip
            raise ValueError("a sentence has fields of the wrong type")
        if spoken and not (len(spoken) == 2 and all(type(value) is int for value in spoken) and 0 <= spoken[0] < spoken[1] <= len(ids)):
            raise ValueError("a sentence's spoken ids are not a span of its ids")
        if spec.max_phoneme_ids is not None and len(ids) > spec.max_phoneme_ids:
            raise ValueError(f"a sentence has {len(ids)} ids, past the limit of {spec.max_phoneme_ids}")
        if not all(type(value) is int and 0 <= value <= max_id for value in ids):
            raise ValueError("a sentence has an id outside the voice's map")
        sentences.append(
            Sentence(
                text=text, phonemes=tuple(phonemes), phoneme_ids=tuple(ids),
                words=_checked_words(words, spoken[1] - spoken[0] if spoken else len(ids)),
                pinyin=tuple(pinyin.split()), spoken_ids=(spoken[0], spoken[1]) if spoken else None,
            )
        )
    return sentences
