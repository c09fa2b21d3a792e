"""The gateway's check that a worker accepted a stream before it writes to it."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from libs.upstream.calls import Accepted, StreamRefused, WorkerSilent, accepted
from libs.wire.headers import MODEL_VERSION_METADATA_KEY, STREAM_ACCEPTED_METADATA, STREAM_LIMIT_METADATA_KEY


class _Call:
    """The two things `accepted` reads of a grpc.aio call: its headers and whether it is over."""

    def __init__(self, headers: grpc.aio.Metadata | None, done: bool, delay_s: float = 0.0) -> None:
        self._headers, self._done, self._delay_s = headers, done, delay_s

    async def initial_metadata(self) -> grpc.aio.Metadata | None:
        await asyncio.sleep(self._delay_s)
        return self._headers

    def done(self) -> bool:
        return self._done


def test_admission_header_means_accepted_and_names_the_model_and_the_stream_limit() -> None:
    assert asyncio.run(accepted(_Call(grpc.aio.Metadata(STREAM_ACCEPTED_METADATA), done=False), 1.0)) == Accepted()
    headers = grpc.aio.Metadata(
        STREAM_ACCEPTED_METADATA, (MODEL_VERSION_METADATA_KEY, "vocoder-7"), (STREAM_LIMIT_METADATA_KEY, "32")
    )
    assert asyncio.run(accepted(_Call(headers, done=False), 1.0)) == Accepted("vocoder-7", 32)


def test_a_garbled_stream_limit_is_not_taken_for_one() -> None:
    headers = grpc.aio.Metadata(STREAM_ACCEPTED_METADATA, (STREAM_LIMIT_METADATA_KEY, "many"))
    assert asyncio.run(accepted(_Call(headers, done=False), 1.0)).stream_limit is None


def test_refusal_headers_are_a_refusal_even_before_the_call_reads_as_done() -> None:
    # A trailers-only refusal: headers arrive without the admission header, and the status a moment later.
    async def refused_a_moment_later() -> None:
        call = _Call(grpc.aio.Metadata(), done=False)
        asyncio.get_running_loop().call_later(0.01, setattr, call, "_done", True)
        await accepted(call, 1.0)

    with pytest.raises(StreamRefused):
        asyncio.run(refused_a_moment_later())
    with pytest.raises(StreamRefused):
        asyncio.run(accepted(_Call(grpc.aio.Metadata(STREAM_ACCEPTED_METADATA), done=True), 1.0))


def test_worker_from_before_the_admission_header_is_still_accepted() -> None:
    assert asyncio.run(accepted(_Call(grpc.aio.Metadata(), done=False), 1.0)) == Accepted()


def test_a_worker_that_sends_no_headers_is_silent() -> None:
    with pytest.raises(WorkerSilent):
        asyncio.run(accepted(_Call(None, done=False, delay_s=1.0), 0.05))
