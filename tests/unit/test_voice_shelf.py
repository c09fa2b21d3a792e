"""The voices a worker holds: loaded once on first use, the least recently used one no stream uses
unloaded when the next would not fit the budget, a voice in use never unloaded, and a clear refusal
when the voices in use fill the budget. Engines here are stand-ins with a size; the real engines'
memory is measured by `make bench-voices` and their serving by tests/e2e/test_voices_mesh.py."""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

from libs.serving.voice_shelf import MIB, VoiceMemoryFullError, VoiceShelf, VoiceShelfSettings
from libs.voice.assets import VoiceAssets
from libs.voice.catalogue import CatalogueVoice, VoiceCatalogue
from libs.voice.registry import UnknownVoiceError, Voice

MODEL_BYTES = 1 << 20
"""Each stand-in voice's model file; its engine takes 3 MiB once loaded."""
ENGINE_BYTES = 3 * MIB


@dataclass
class FakeEngine:
    name: str
    closed: bool = False

    def close(self) -> None:
        self.closed = True


class Memory:
    """The process's resident memory as the stand-in engines change it."""

    def __init__(self) -> None:
        self.resident = 100 * MIB
        self.peak_used = 0

    def load(self, entry: CatalogueVoice) -> FakeEngine:
        self.resident += ENGINE_BYTES
        return FakeEngine(entry.voice.name)

    def close(self, engine: FakeEngine) -> None:
        engine.closed = True
        self.resident -= ENGINE_BYTES


def catalogue_of(tmp_path: Path, names: list[str]) -> VoiceCatalogue:
    catalogue = VoiceCatalogue()
    for name in names:
        onnx = tmp_path / f"{name}.onnx"
        onnx.write_bytes(b"\0" * MODEL_BYTES)
        voice = Voice(name, "en-US", 22050, 1, "medium", "en-us", onnx, tmp_path / f"{name}.onnx.json", 0.667, 0.8)
        catalogue.voices.append(CatalogueVoice(voice, VoiceAssets(name, onnx, voice.config_path, tmp_path)))
    return catalogue


def shelf_of(tmp_path: Path, names: list[str], budget_voices: float, memory: Memory, loads: list[str] | None = None) -> VoiceShelf:
    def load(entry: CatalogueVoice) -> FakeEngine:
        if loads is not None:
            loads.append(entry.voice.name)
        return memory.load(entry)

    return VoiceShelf(
        catalogue_of(tmp_path, names), load, int(budget_voices * ENGINE_BYTES),
        close=memory.close, resident_bytes=lambda: memory.resident, tidy=lambda: None, default_name=names[0],
    )  # fmt: skip


def test_a_voice_loads_once_however_many_streams_ask_for_it_at_once(tmp_path: Path) -> None:
    memory, loads = Memory(), []
    shelf = shelf_of(tmp_path, ["a", "b"], 4, memory, loads)

    async def ask() -> list[FakeEngine]:
        return await asyncio.gather(*(shelf.engine_for("b") for _ in range(5)))

    engines = asyncio.run(ask())
    assert loads == ["b"] and all(engine is engines[0] for engine in engines)
    assert shelf.loaded() == ["b"] and shelf.servable() == ["a", "b"]
    assert shelf.used_bytes() == ENGINE_BYTES, "what a voice takes is what loading it added to resident memory"
    assert asyncio.run(shelf.engine_for("")).name == "a", "an empty voice is the default voice"


def test_the_least_recently_used_voice_makes_room_for_the_next(tmp_path: Path) -> None:
    memory = Memory()
    shelf = shelf_of(tmp_path, ["a", "b", "c", "d"], 3, memory)
    for name in ("a", "b", "c"):
        shelf.load(name)
    shelf.held("a")  # a is used again: b is now the least recently used
    engine_b = shelf.held("b")
    shelf.held("c")
    shelf.held("a")
    shelf.load("d")
    assert shelf.loaded() == ["c", "a", "d"]
    assert engine_b is not None and engine_b.closed
    assert shelf.evictions == 1
    assert shelf.used_bytes() <= shelf.budget_bytes


def test_a_voice_in_use_is_never_unloaded_and_a_full_shelf_refuses_with_resource_exhausted(tmp_path: Path) -> None:
    memory = Memory()
    shelf = shelf_of(tmp_path, ["a", "b", "c"], 2, memory)

    async def scenario() -> None:
        engine_a = await shelf.pin("a")
        engine_b = await shelf.pin("b")
        with pytest.raises(VoiceMemoryFullError) as refused:
            await shelf.pin("c")
        assert refused.value.code is grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "voice c" in str(refused.value) and "another worker may have room" in str(refused.value)
        assert not engine_a.closed and not engine_b.closed
        shelf.unpin(engine_a)  # a's stream ended: a may make room now
        engine_c = await shelf.pin("c")
        assert engine_a.closed and not engine_b.closed and engine_c.name == "c"
        shelf.unpin(engine_b)
        shelf.unpin(engine_c)

    asyncio.run(scenario())
    assert shelf.loaded() == ["b", "c"]


def test_an_unknown_voice_is_refused_naming_the_voices_served(tmp_path: Path) -> None:
    shelf = shelf_of(tmp_path, ["a", "b"], 4, Memory())
    with pytest.raises(UnknownVoiceError, match="available voices: a, b"):
        asyncio.run(shelf.engine_for("nope"))
    assert shelf.loaded() == []


def test_the_loaded_voices_never_take_more_than_the_budget(tmp_path: Path) -> None:
    memory = Memory()
    names = [f"v{index}" for index in range(6)]
    shelf = shelf_of(tmp_path, names, 3.5, memory)
    rng = random.Random(7)
    for _ in range(200):
        shelf.load(rng.choice(names))
        assert shelf.used_bytes() <= shelf.budget_bytes
        assert memory.resident - 100 * MIB <= shelf.budget_bytes
    assert len(shelf.loaded()) == 3 and shelf.evictions > 0


def test_a_shelf_holding_one_engine_serves_it_as_its_default_and_only_voice() -> None:
    engine = FakeEngine("x")
    shelf = VoiceShelf.holding(engine, "x")
    assert asyncio.run(shelf.engine_for("")) is engine and asyncio.run(shelf.engine_for("x")) is engine
    assert shelf.servable() == ["x"] and shelf.loaded() == ["x"]
    with pytest.raises(UnknownVoiceError):
        asyncio.run(shelf.engine_for("y"))


def test_preloaded_voices_are_the_default_all_or_named_ones_checked_against_the_catalogue(tmp_path: Path) -> None:
    catalogue = catalogue_of(tmp_path, ["en_US-joe-medium", "b", "c"])
    assert VoiceShelfSettings().preload_names(catalogue) == ["en_US-joe-medium"]
    assert VoiceShelfSettings(preload_voices="all").preload_names(catalogue) == ["en_US-joe-medium", "b", "c"]
    assert VoiceShelfSettings(preload_voices="c, b").preload_names(catalogue) == ["c", "b"]
    with pytest.raises(UnknownVoiceError, match="nope"):
        VoiceShelfSettings(preload_voices="b,nope").preload_names(catalogue)
