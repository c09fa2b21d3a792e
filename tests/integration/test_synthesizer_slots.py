"""The synthesizer's stream counts: a slot is given back exactly once, whether its stream ran,
failed, or was never started by the door that asked for it."""

from __future__ import annotations

import asyncio
import gc
from types import SimpleNamespace

import grpc
import pytest

from libs.synthesis.synthesizer import Synthesizer
from libs.wire.errors import DownstreamError


class _Pool:
    """What the counts read of a worker pool: the workers' stream capacity and the shed counter."""

    def __init__(self, capacity: int | None) -> None:
        self.capacity = capacity
        self.metrics = SimpleNamespace(shed=lambda reason: None)

    def stream_capacity(self) -> int | None:
        return self.capacity


def _synthesizer(capacity: int | None, per_client: int = 0, share: float = 0.5) -> Synthesizer:
    pool = _Pool(capacity)
    return Synthesizer(
        pool=pool, cache=None, text_side=None, max_streams=8, max_streams_per_client=per_client, max_client_share=share,  # type: ignore[arg-type]
    )  # fmt: skip


def test_a_client_limit_is_its_share_of_the_workers_or_the_fixed_limit_whichever_is_less() -> None:
    assert _synthesizer(capacity=None).client_limit() is None  # the workers have not said
    assert _synthesizer(capacity=32).client_limit() == 16
    assert _synthesizer(capacity=32, per_client=10).client_limit() == 10
    assert _synthesizer(capacity=1).client_limit() == 1  # never none at all
    assert _synthesizer(capacity=32, share=0.0).client_limit() is None


def test_a_dropped_slot_is_given_back_and_a_released_one_only_once() -> None:
    synthesizer = _synthesizer(capacity=4)  # two per client
    first, second = synthesizer._take_slot("a"), synthesizer._take_slot("a")
    with pytest.raises(DownstreamError) as caught:
        synthesizer._take_slot("a")
    assert caught.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    synthesizer._take_slot("b").release()
    first.release()
    first.release()
    del second
    gc.collect()
    assert synthesizer._open_streams == 0 and synthesizer._client_streams == {}


def test_a_response_never_iterated_frees_its_slot() -> None:
    synthesizer = _synthesizer(capacity=2)  # one per client

    async def never_read() -> None:
        async def no_sentences():  # type: ignore[no-untyped-def]
            return
            yield

        chunks = synthesizer.speak(no_sentences(), options=None, timeout_s=None, client="a")  # type: ignore[arg-type]
        with pytest.raises(DownstreamError):
            synthesizer.speak(no_sentences(), options=None, timeout_s=None, client="a")  # type: ignore[arg-type]
        del chunks  # the door dropped the response before sending it

    asyncio.run(never_read())
    gc.collect()
    assert synthesizer._open_streams == 0
