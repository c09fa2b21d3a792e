"""The voices a worker holds: loaded at start or on a voice's first stream, unloaded least recently
used when the next one would not fit the memory budget.

A worker serves every voice of its catalogue (the installed voices and `--voices-dir`), but holds in
memory only those it has been asked for. A voice in use by a stream is pinned and never unloaded;
when the voices in use alone fill the budget, a stream for yet another voice is refused with
RESOURCE_EXHAUSTED, so the gateway tries a worker that has room.

What a voice takes is measured, not guessed: the process's resident memory grows by it while it
loads (loads run one at a time, and freed heap goes back to the system before and after). Before a
voice has been loaded once, it is expected to take what the voices loaded so far took per byte of
their Piper model.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import threading
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Generic, TypeVar

import grpc

from libs.serving.admission import process_rss_mb
from libs.serving.memory import RELEASER, release_free_memory
from libs.serving.server import StreamEnding, StreamTracker
from libs.serving.status import abort_for
from libs.settings.fields import setting
from libs.telemetry.metrics import WorkerMetrics
from libs.voice.catalogue import CatalogueVoice, VoiceCatalogue
from libs.voice.registry import DEFAULT_VOICE_NAME, UnknownVoiceError, speaker_number
from libs.wire.errors import DownstreamError, InvalidRequestError, echo
from libs.wire.headers import SPEAKER_METADATA_KEY, TIER_METADATA_KEY, VOICE_METADATA_KEY

_log = logging.getLogger(__name__)

Engine = TypeVar("Engine")

MIB: Final = 1 << 20
FIRST_GUESS_BYTES_PER_MODEL_BYTE: Final = {"acoustic": 4.0, "vocoder": 1.5}
"""What a voice is expected to take per byte of its Piper model before a voice of its size has been
measured (the torch modules, the onnxruntime graphs and their arenas: a medium voice's acoustic side
takes about 3.4 times its model, its vocoder side about 1.4 times, after the first voice)."""
VOICE_ROOM_RETRY_S: Final = 1.0
"""When a stream refused for want of voice memory may try this worker again."""


@dataclass(frozen=True)
class VoiceFolderSettings:
    """Where the voices beside the installed ones are (the gateway and the workers read the same folder)."""

    voices_dir: str = setting(
        "", env="TTS_VOICES_DIR",
        doc="folder of voices served beside the installed ones (each made by `tts-mesh voice add`); empty: the installed voices only",
    )  # fmt: skip

    def catalogue(self) -> VoiceCatalogue:
        """The installed voices and those of `voices_dir`; refused ones are logged with why."""
        catalogue = VoiceCatalogue.scan(Path(self.voices_dir) if self.voices_dir else None)
        for refusal in catalogue.refused:
            _log.warning("voice not served: %s", refusal)
        return catalogue


@dataclass(frozen=True)
class VoiceShelfSettings:
    """Which voices a worker loads when, and how much memory they may take."""

    preload_voices: str = setting(
        "default", env="TTS_PRELOAD_VOICES",
        doc="voices loaded before the worker serves: default, all, or voice names separated by commas; any other voice loads on its first stream",
    )  # fmt: skip
    voice_memory_mb: float = setting(
        4096.0, env="TTS_VOICE_MEMORY_MB", unit="MiB", minimum=0,
        doc="memory the loaded voices may take together; the least recently used voice no stream uses is unloaded to make room (0: no bound)",
    )  # fmt: skip

    def preload_names(self, catalogue: VoiceCatalogue) -> list[str]:
        """The voices to load at start, each checked against `catalogue`."""
        if self.preload_voices == "default":
            return [DEFAULT_VOICE_NAME]
        if self.preload_voices == "all":
            return catalogue.names()
        names = [name.strip() for name in self.preload_voices.split(",") if name.strip()]
        for name in names:
            catalogue.get(name)  # UnknownVoiceError names the voices there are
        return names


class VoiceMemoryFullError(DownstreamError):
    """No room for another voice: the voices loaded are all in use and fill the budget
    (RESOURCE_EXHAUSTED, so the gateway tries another worker)."""

    def __init__(self, message: str) -> None:
        super().__init__(grpc.StatusCode.RESOURCE_EXHAUSTED, message, retry_after_s=VOICE_ROOM_RETRY_S)


@dataclass
class _Held(Generic[Engine]):
    engine: Engine
    bytes: int
    """What loading it added to the process's resident memory."""
    model_bytes: int
    """Size of its Piper model file."""
    streams: int = 0
    """Streams using it now: a voice in use is never unloaded."""


class VoiceShelf(Generic[Engine]):
    """The engines of the voices a worker holds, by voice name, least recently used first."""

    def __init__(
        self,
        catalogue: VoiceCatalogue,
        load: Callable[[CatalogueVoice], Engine],
        budget_bytes: int = 0,
        *,
        close: Callable[[Engine], None] = lambda engine: getattr(engine, "close", lambda: None)(),
        resident_bytes: Callable[[], int] = lambda: int(process_rss_mb() * MIB),
        tidy: Callable[[], None] = lambda: hand_back_free_memory(),
        default_name: str = DEFAULT_VOICE_NAME,
        on_change: Callable[[str, str], None] = lambda change, voice: None,
        first_guess_per_model_byte: float = FIRST_GUESS_BYTES_PER_MODEL_BYTE["acoustic"],
    ) -> None:
        """`load` builds (and warms) one voice's engine; `budget_bytes` 0 means no bound.
        `resident_bytes` reads the process's resident memory, `tidy` hands freed memory back first;
        `on_change(change, voice)` hears of every load and eviction (metrics);
        `first_guess_per_model_byte`: what a voice is expected to take per byte of its model before
        one of its size has been measured."""
        self.catalogue = catalogue
        self.default_name = default_name
        self.budget_bytes = budget_bytes
        self._load = load
        self._close = close
        self._resident_bytes = resident_bytes
        self._tidy = tidy
        self._on_change = on_change
        self._first_guess = first_guess_per_model_byte
        self._held: OrderedDict[str, _Held[Engine]] = OrderedDict()
        self._lock = threading.RLock()  # guards _held; loads also hold _loading, one at a time
        self._loading = threading.Lock()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="voice-load")
        self._flights: dict[str, asyncio.Future[Engine]] = {}
        self.loads = 0
        """Voices loaded since start (a voice loaded again after eviction counts again)."""
        self.evictions = 0
        """Voices unloaded to make room."""

    @classmethod
    def holding(cls, engine: Engine, name: str = DEFAULT_VOICE_NAME) -> VoiceShelf[Engine]:
        """A shelf of one engine already loaded, as the worker's default voice and its only one."""
        shelf: VoiceShelf[Engine] = cls(VoiceCatalogue(), lambda entry: engine, default_name=name)
        shelf._held[name] = _Held(engine, 0, 0)
        return shelf

    def name_of(self, voice: str) -> str:
        """The voice's name ("" is the default voice)."""
        return voice or self.default_name

    def servable(self) -> list[str]:
        """Every voice this worker serves, loaded or not."""
        return list(dict.fromkeys([*self.catalogue.names(), *self.loaded()]))

    def loaded(self) -> list[str]:
        """The voices in memory now, least recently used first."""
        with self._lock:
            return list(self._held)

    def used_bytes(self) -> int:
        """What the loaded voices take together."""
        with self._lock:
            return sum(held.bytes for held in self._held.values())

    def held(self, voice: str) -> Engine | None:
        """The engine of `voice` if it is loaded (it becomes the most recently used), else None."""
        name = self.name_of(voice)
        with self._lock:
            held = self._held.get(name)
            if held is None:
                return None
            self._held.move_to_end(name)
            return held.engine

    def peek(self, voice: str) -> Engine | None:
        """The engine of `voice` if it is loaded, its place in the least-recently-used order untouched."""
        with self._lock:
            held = self._held.get(self.name_of(voice))
            return None if held is None else held.engine

    def any_engine(self) -> Engine | None:
        """The most recently used engine (None before the first load)."""
        with self._lock:
            return next(reversed(self._held.values())).engine if self._held else None

    def load(self, voice: str) -> Engine:
        """`voice`'s engine, loaded now if it is not held (blocking: run off the event loop).
        UnknownVoiceError for a voice not served here; VoiceMemoryFullError when the voices in use fill
        the budget."""
        name = self.name_of(voice)
        engine = self.held(name)
        if engine is not None:
            return engine
        entry = self.catalogue.get(name)  # UnknownVoiceError before anything else
        with self._loading:
            engine = self.held(name)
            if engine is not None:
                return engine
            model_bytes = entry.assets.onnx_path.stat().st_size
            self._make_room(self._expected_bytes(model_bytes), keep=name)
            self._tidy()
            before = self._resident_bytes()
            engine = self._load(entry)
            self._tidy()
            grown = max(0, self._resident_bytes() - before)
            with self._lock:
                self._held[name] = _Held(engine, grown, model_bytes)
                self.loads += 1
            self._on_change("load", name)
            _log.info("voice %s loaded: %.0f MiB (voices: %s)", name, grown / MIB, ", ".join(self.loaded()))
            self._make_room(0, keep=name)  # it took more than expected: the least recently used make way
            return engine

    async def engine_for(self, voice: str) -> Engine:
        """`voice`'s engine; loaded off the event loop (once, however many streams ask) if not held."""
        engine = self.held(voice)
        if engine is not None:
            return engine
        name = self.name_of(voice)
        self.catalogue.get(name)  # an unknown voice is refused at once
        flight = self._flights.get(name)
        if flight is None:
            flight = asyncio.get_running_loop().run_in_executor(self._executor, self.load, name)
            self._flights[name] = flight
            flight.add_done_callback(lambda _done: self._flights.pop(name, None))
        return await asyncio.shield(flight)

    async def pin(self, voice: str) -> Engine:
        """`voice`'s engine (loaded if need be), never unloaded until `unpin` (a stream's life)."""
        name = self.name_of(voice)
        while True:
            engine = await self.engine_for(name)
            with self._lock:
                held = self._held.get(name)
                if held is not None and held.engine is engine:  # not unloaded in the meantime
                    held.streams += 1
                    return engine

    def unpin(self, engine: Engine) -> None:
        """A stream that `pin` gave `engine` has ended."""
        with self._lock:
            for held in self._held.values():
                if held.engine is engine:
                    held.streams -= 1
                    return

    def close(self) -> None:
        """Unload every voice and stop the loading thread."""
        self._executor.shutdown(wait=False, cancel_futures=True)
        with self._lock:
            held, self._held = list(self._held.values()), OrderedDict()
        for entry in held:
            self._close(entry.engine)

    def _expected_bytes(self, model_bytes: int) -> int:
        """What a voice whose Piper model has `model_bytes` is expected to take: as much per model byte
        as the voices of a like size measured so far, and never less than the smallest of them (every
        engine has its fixed part: graphs, arenas)."""
        with self._lock:
            measured = [(held.bytes, held.model_bytes) for held in self._held.values() if held.model_bytes and held.bytes]
        alike = [taken / size for taken, size in measured if size / 2 <= model_bytes <= size * 2]
        per_model_byte = max(alike) if alike else self._first_guess
        return max(int(model_bytes * per_model_byte), min((taken for taken, _ in measured), default=0))

    def _make_room(self, incoming_bytes: int, keep: str) -> None:
        """Unload the least recently used voices no stream uses until `incoming_bytes` more fit."""
        if not self.budget_bytes:
            return
        while True:
            with self._lock:
                used = sum(held.bytes for held in self._held.values())
                if used + incoming_bytes <= self.budget_bytes:
                    return
                victim = next((name for name, held in self._held.items() if held.streams == 0 and name != keep), None)
                if victim is None:
                    if incoming_bytes == 0:
                        return  # what is held is in use: it stays until its streams end
                    if not self._held:
                        # Alone it is over the budget (or expected to be): a worker serves at least one voice.
                        _log.warning("voice %s is expected to take %.0f MiB, over the %.0f MiB budget on its own",
                                     keep, incoming_bytes / MIB, self.budget_bytes / MIB)  # fmt: skip
                        return
                    raise VoiceMemoryFullError(
                        f"no memory for voice {keep}: the voices in use ({', '.join(self._held)}) take "
                        f"{used / MIB:.0f} of {self.budget_bytes / MIB:.0f} MiB; another worker may have room"
                    )
                held = self._held.pop(victim)
                self.evictions += 1
            self._on_change("evict", victim)
            self._close(held.engine)
            del held
            self._tidy()
            _log.info("voice %s unloaded to make room (%.0f MiB)", victim, used / MIB)


def hand_back_free_memory() -> None:
    """Collect cycles (an engine's modules hold some), then return the C heap's free pages."""
    gc.collect()
    release_free_memory()


def load_shelf(
    kind: str, catalogue: VoiceCatalogue, settings: VoiceShelfSettings, load: Callable[[CatalogueVoice], Any], metrics: WorkerMetrics
) -> VoiceShelf:
    """A worker's shelf with its budget from `settings` and its preloaded voices loaded (blocking);
    the first of them is the worker's default voice. Its voices and their memory go to `metrics`."""
    names = settings.preload_names(catalogue)
    if not names:
        raise ValueError("--preload-voices names no voice; a worker needs at least one (its default)")
    shelf = VoiceShelf(
        catalogue, load, int(settings.voice_memory_mb * MIB), default_name=names[0], on_change=metrics.voice_changed,
        first_guess_per_model_byte=FIRST_GUESS_BYTES_PER_MODEL_BYTE[kind],
    )  # fmt: skip
    metrics.track_voices(lambda: len(shelf.loaded()), shelf.used_bytes)
    for name in names:
        shelf.load(name)
    return shelf


class VoiceServicer:
    """What both workers' servicers share: the shelf of voices they serve once it is installed, and
    their load with the voices in it."""

    kind: str
    """"acoustic" or "vocoder", for the still-loading message."""
    shelf: VoiceShelf | None = None
    """The voices, once the preloaded ones are in; None means "still loading"."""
    _scheduler: Any
    _admission: Any
    _tracker: StreamTracker

    def install(self, shelf: VoiceShelf) -> None:
        """Serve with the voices of `shelf` from now on (the preloaded ones have loaded, warmed up and
        been calibrated)."""
        self.shelf = shelf

    async def _ready_shelf(self, context: grpc.aio.ServicerContext) -> VoiceShelf:
        if self.shelf is None:
            await context.abort(grpc.StatusCode.UNAVAILABLE, f"the {self.kind} model is still loading; retry shortly")
        return self.shelf  # type: ignore[return-value]

    @asynccontextmanager
    async def _model_stream(self, context: grpc.aio.ServicerContext) -> AsyncIterator[tuple[Any, StreamEnding]]:
        """The engine one model stream runs on, for the stream's whole life, and the StreamEnding its
        requests are read through: the stream is counted (one refused at admission or cut before it
        starts too), its voice pinned (loaded if this worker does not hold it) and the stream admitted
        (RESOURCE_EXHAUSTED when out of room); once it ends, the voice is unpinned and a long
        sentence's memory goes back."""
        async with self._tracker.track(context) as ending:
            shelf = await self._ready_shelf(context)
            engine = await pin_stream_voice(shelf, context)
            try:
                await self._admission.admit(context, engine)
                context.add_done_callback(RELEASER.call_done)
                yield engine, ending
            finally:
                shelf.unpin(engine)

    async def GetLoad(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        shelf = await self._ready_shelf(context)
        load = with_voices(self._scheduler.load(self._admission.by_gateway, self._admission.settings.realtime_capacity), shelf)
        load.stream_limit = self._admission.settings.max_streams
        return load


def stream_voice(context: grpc.aio.ServicerContext) -> str:
    """The voice a worker stream was opened for (its tts-voice header; "" for the default voice)."""
    return str(dict(context.invocation_metadata() or ()).get(VOICE_METADATA_KEY, ""))


def stream_tier(context: grpc.aio.ServicerContext) -> str:
    """The tier a vocoder stream was opened for (its tts-tier header; "" for quality)."""
    return str(dict(context.invocation_metadata() or ()).get(TIER_METADATA_KEY, ""))


def stream_speaker(context: grpc.aio.ServicerContext, engine: Any) -> int:
    """The speaker a vocoder stream was opened for (its tts-speaker-id header; none: 0), checked
    against `engine`'s voice: InvalidRequestError naming the speakers there are."""
    text = str(dict(context.invocation_metadata() or ()).get(SPEAKER_METADATA_KEY, "0"))
    speakers = int(getattr(engine, "num_speakers", 1))
    number = speaker_number(text)
    if number is None or number >= speakers:
        raise InvalidRequestError(f"{SPEAKER_METADATA_KEY} {echo(text)} is not a speaker of this voice; use 0 to {speakers - 1}")
    return number


async def pin_stream_voice(shelf: VoiceShelf, context: grpc.aio.ServicerContext) -> Any:
    """The engine of the stream's voice, pinned (`shelf.unpin` it when the stream ends); the call is
    aborted with the reason when the voice is not served here or has no room."""
    try:
        return await shelf.pin(stream_voice(context))
    except (UnknownVoiceError, DownstreamError) as error:
        await abort_for(context, error)
        raise


def with_voices(load: Any, shelf: VoiceShelf) -> Any:
    """A worker's `WorkerLoad` with the voices it serves and those it holds."""
    load.voices.extend(shelf.servable())
    load.loaded_voices.extend(shelf.loaded())
    return load
