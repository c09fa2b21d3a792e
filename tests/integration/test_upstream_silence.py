"""A worker's silence counts only while the gateway waits for it: time the gateway spends not reading
(its own client is not reading, so the pipeline has stopped) is not the worker's."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace
from typing import Any

import pytest

from libs.upstream.calls import CallReader, Deadline, WorkerSilent
from libs.upstream.resumable import ResumableCall

ATTEMPT_TIMEOUT_S = 2.0


class _Call:
    """The one thing `CallReader` uses of a grpc.aio call: `read`, answering after `delay_s`."""

    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s

    async def read(self) -> str:
        await asyncio.sleep(self.delay_s)
        return "message"


class _Stream(ResumableCall):
    """Just the silence bookkeeping of a worker stream, over a stand-in call."""

    kind = "vocoder"

    def __init__(self, call: _Call, owed_for_s: float) -> None:
        pool = SimpleNamespace(settings=SimpleNamespace(attempt_timeout_s=ATTEMPT_TIMEOUT_S))
        super().__init__(pool, Deadline(None), attempts=None)  # type: ignore[arg-type]
        self._reader = CallReader(call)
        self._owed_since_s = time.monotonic() - owed_for_s

    def _start(self, endpoint: Any, timeout_s: float | None) -> Any:
        raise NotImplementedError

    def _end_request(self) -> Any:
        raise NotImplementedError

    def _position(self) -> str:
        return ""


def test_a_worker_owed_an_answer_while_the_gateway_was_not_reading_is_not_silent() -> None:
    # The worker has owed samples for 10 s, but the gateway only now reads again; the answer takes
    # half the attempt timeout (the worker was held back by flow control and computes the next step).
    stream = _Stream(_Call(delay_s=ATTEMPT_TIMEOUT_S / 2), owed_for_s=10.0)
    assert asyncio.run(stream._read()) == "message"


def test_a_worker_silent_past_the_timeout_while_the_gateway_reads_is_silent() -> None:
    stream = _Stream(_Call(delay_s=60.0), owed_for_s=0.0)
    started = time.monotonic()
    with pytest.raises(WorkerSilent):
        asyncio.run(stream._read())
    assert time.monotonic() - started >= ATTEMPT_TIMEOUT_S
