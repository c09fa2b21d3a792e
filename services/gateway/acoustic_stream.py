"""One utterance's acoustic stream that survives worker failures.

Sentences are requested one at a time on one bidi call. When the call breaks (or the worker goes
silent past the attempt timeout) in the middle of a sentence, a new call is opened on another
endpoint and the sentence is asked for again from the first frame not yet received. The seed is a
function of the request and the model version (DESIGN §4), and chunk boundaries are fixed by frame
index, so the new worker's frames are bit-identical to the ones the broken call would have sent.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, AsyncIterator

import grpc

from libs.mesh.worker_choice import Attempts
from libs.pb.tts.acoustic.v1 import acoustic_pb2
from libs.pb.tts.common.v1 import mel_pb2
from libs.routing.endpoints import Endpoint
from services.gateway.worker_calls import CALL_ERRORS, CallReader, Deadline, StreamEnded, accepted, failure_of, give_up, release, retry_after, stop_if_cancelled
from services.gateway.workers import WorkerPool

_log = logging.getLogger(__name__)


class ResumableAcousticStream:
    """Mel slices of each sentence of one utterance, from whichever acoustic worker can serve them."""

    def __init__(self, pool: WorkerPool, deadline: Deadline) -> None:
        self._pool = pool
        self._deadline = deadline
        self._timeout_s = pool.settings.attempt_timeout_s
        self._call: Any = None
        self._reader: CallReader | None = None
        self._endpoint: Endpoint | None = None
        self._progressed = False  # whether any slice arrived on this utterance (then a reopen is a resume)
        self._last_heard_s = 0.0
        self._cancelled = False

    async def sentence(self, request: acoustic_pb2.SentenceRequest) -> AsyncIterator[list[mel_pb2.MelSlice]]:
        """The slices of the sentence `request` asks for, in order, exactly once each, a chunk at a time."""
        attempts = self._pool.attempts("acoustic", request.expected_model_version)
        next_frame = 0
        while True:
            try:
                if self._call is None:
                    self._open(attempts)
                    await accepted(self._call, self._timeout_s)
                resumed = acoustic_pb2.SentenceRequest()
                resumed.CopyFrom(request)
                resumed.start_frame = next_frame
                self._last_heard_s = time.monotonic()
                await self._call.write(resumed)
                while True:
                    slices = list((await self._read()).slices)
                    if not slices:
                        continue  # an empty chunk carries nothing to forward
                    self._progressed = True
                    last = slices[-1]
                    next_frame = last.first_frame + last.frame_count
                    yield slices
                    if last.is_last:
                        attempts.succeeded(self._endpoint)  # type: ignore[arg-type]
                        return
            except CALL_ERRORS as error:
                await self._after_failure(attempts, error, request.sentence_index, next_frame)

    async def close(self) -> None:
        """Half-close the call (the worker then ends it cleanly) and stop counting it."""
        call = self._call
        if call is None:
            return
        try:
            await asyncio.wait_for(call.done_writing(), 1.0)
            # Let the worker finish its handler (its last metrics, an OK status) before the call is
            # dropped: dropping cancels it, and it would end as CANCELLED mid-bookkeeping.
            await asyncio.wait_for(call.code(), 1.0)
        except (*CALL_ERRORS, asyncio.TimeoutError):
            pass
        self._drop()

    def cancel(self) -> None:
        """Cancel the call at once (client gone or utterance failed); the stream never reopens."""
        self._cancelled = True
        self._drop()

    def _open(self, attempts: Attempts) -> None:
        stop_if_cancelled(self._cancelled)
        endpoint = attempts.choose()
        if endpoint is None:
            raise give_up(attempts, None, self._pool.metrics)
        self._call = self._pool.acoustic_stub(endpoint).SynthesizeMel(timeout=self._deadline.remaining_s())
        self._reader = CallReader(self._call)
        self._endpoint = endpoint
        self._pool.table("acoustic").stream_started(endpoint)

    async def _read(self) -> mel_pb2.MelSlices:
        assert self._reader is not None
        message = await self._reader.read(self._silent_too_long, check_every_s=self._timeout_s / 4)
        if message is grpc.aio.EOF:
            raise StreamEnded()
        self._last_heard_s = time.monotonic()
        return message

    def _silent_too_long(self) -> bool:
        # A sentence is always pending while this stream reads: the worker owes the next chunk.
        return time.monotonic() - self._last_heard_s > self._timeout_s

    async def _after_failure(self, attempts: Attempts, error: BaseException, sentence_index: int, next_frame: int) -> None:
        call, endpoint = self._call, self._endpoint
        self._drop()
        assert endpoint is not None
        stop_if_cancelled(self._cancelled)
        failure = await failure_of(call, error, self._timeout_s)
        stop_if_cancelled(self._cancelled)
        decision = attempts.failed(endpoint, failure, self._deadline.remaining_s())
        _log.warning(
            "acoustic stream on %s failed in sentence %d at frame %d: %s %s; %s",
            endpoint, sentence_index, next_frame, failure.code.name, failure.details,
            f"retrying in {decision.delay_s:.3f} s" if decision.retry else f"giving up ({decision.reason})",
        )  # fmt: skip
        if not decision.retry:
            raise give_up(attempts, decision, self._pool.metrics)
        await retry_after(self._pool, attempts, endpoint.zone, failure, decision.delay_s, self._progressed)

    def _drop(self) -> None:
        release(self._pool, "acoustic", self._call, self._reader, self._endpoint)
        self._call = self._reader = self._endpoint = None
