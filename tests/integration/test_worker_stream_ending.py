"""How a worker stream ends, over real gRPC: a caller that announces its last request (`end`) ends
the stream cleanly; requests that end unannounced from a caller that promised to announce (the
gateway) are a cancellation, whenever the cancellation itself lands; another caller's half-close
is still a clean end; a request after `end`, or one marked `end` that carries more, is refused; a call cancelled while its answers are being
written is counted as cancelled too."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor

import grpc
import numpy as np
import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge

from libs.pb.tts.common.v1 import mel_pb2
from libs.pb.tts.vocoder.v1 import vocoder_pb2
from libs.serving.server import StreamTracker
from libs.wire.headers import ANNOUNCES_END_METADATA
from libs.wire.mel_slices import cut_whole_mel, to_message
from tests.support.faults.toy_mesh import HOP_LENGTH, N_MELS, SAMPLE_RATE_HZ, toy_vocoder_engine, wait_until
from tests.support.servers import aio_server
from tests.support.vocoder_worker import VocoderWorker, vocoder_worker

FRAMES = 80
CANCELLED_CALLS = 10
LONG_ANSWER_MESSAGE_BYTES = 20_000


@pytest.fixture
async def worker() -> AsyncIterator[VocoderWorker]:
    async with vocoder_worker(toy_vocoder_engine(), ThreadPoolExecutor(1)) as running:
        yield running


def _ended(worker: VocoderWorker, code: str) -> float:
    """How many of the worker's streams ended with `code`."""
    return worker.metrics.registry.get_sample_value("tts_vocoder_streams_total", {"code": code}) or 0.0


def _sentence(seed: int) -> vocoder_pb2.VocodeRequest:
    mel = np.random.default_rng(seed).normal(-5.0, 1.5, size=(N_MELS, FRAMES)).astype(np.float32)
    cuts = cut_whole_mel(mel, HOP_LENGTH, SAMPLE_RATE_HZ)
    slices: list[mel_pb2.MelSlice] = [to_message(cut, utterance_id="u", sentence_index=0, sentence_frame_count=FRAMES) for cut in cuts]
    return vocoder_pb2.VocodeRequest(slices=slices)


async def _read_sentence(call: grpc.aio.StreamStreamCall) -> int:
    samples = 0
    while True:
        reply = await call.read()
        assert reply is not grpc.aio.EOF
        samples += len(reply.samples) // 4
        if reply.is_last:
            return samples


async def test_an_announced_end_is_a_clean_end(worker: VocoderWorker) -> None:
    call = worker.stub.Vocode(timeout=60)
    await call.write(_sentence(1))
    assert await _read_sentence(call) == FRAMES * HOP_LENGTH
    await call.write(vocoder_pb2.VocodeRequest(end=True))
    await call.done_writing()
    assert await call.read() is grpc.aio.EOF
    assert await call.code() == grpc.StatusCode.OK
    await wait_until(lambda: _ended(worker, "OK") == 1)
    assert _ended(worker, "CANCELLED") == 0


async def test_a_half_close_without_announcing_is_still_a_clean_end(worker: VocoderWorker) -> None:
    call = worker.stub.Vocode(iter([_sentence(2)]), timeout=60)
    replies = [reply async for reply in call]
    assert sum(len(reply.samples) // 4 for reply in replies) == FRAMES * HOP_LENGTH
    assert await call.code() == grpc.StatusCode.OK
    await wait_until(lambda: _ended(worker, "OK") == 1)


async def test_a_request_after_the_announced_end_is_refused(worker: VocoderWorker) -> None:
    call = worker.stub.Vocode(iter([vocoder_pb2.VocodeRequest(end=True), _sentence(3)]), timeout=60)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        async for _ in call:
            pass
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "after the one marked end" in (caught.value.details() or "")


async def test_a_request_marked_end_that_carries_slices_is_refused_not_dropped(worker: VocoderWorker) -> None:
    last = _sentence(6)
    last.end = True
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        async for _ in worker.stub.Vocode(iter([last]), timeout=60):
            pass
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "a request marked end carries nothing else" in (caught.value.details() or "")


async def test_requests_that_end_unannounced_from_a_caller_that_announces_are_a_cancel(worker: VocoderWorker) -> None:
    # What a gateway's cancelled call looks like to the worker before the cancellation lands: its
    # requests just end. The gateway announces its ends, so the worker knows at once.
    call = worker.stub.Vocode(timeout=60, metadata=(ANNOUNCES_END_METADATA,))
    await call.write(_sentence(4))
    await _read_sentence(call)
    await call.done_writing()
    assert await call.read() is grpc.aio.EOF
    await wait_until(lambda: _ended(worker, "CANCELLED") == 1)
    assert _ended(worker, "OK") == 0


async def test_a_sentence_cut_off_is_a_cancel_from_a_caller_that_announces_and_an_error_from_another(worker: VocoderWorker) -> None:
    whole = _sentence(5)
    cut = vocoder_pb2.VocodeRequest(slices=whole.slices[:2])
    gone = worker.stub.Vocode(iter([cut]), timeout=60, metadata=(ANNOUNCES_END_METADATA,))
    async for _ in gone:
        pass
    await wait_until(lambda: _ended(worker, "CANCELLED") == 1)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        async for _ in worker.stub.Vocode(iter([cut]), timeout=60):
            pass
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "ended inside sentence 0" in (caught.value.details() or "")
    await wait_until(lambda: _ended(worker, "INVALID_ARGUMENT") == 1)


async def test_a_call_cancelled_while_its_responses_are_written_is_counted_cancelled() -> None:
    # A caller that stops reading and cancels: the handler's answers pile up against flow control,
    # and the cancellation lands while grpc writes one of them, outside the handler, which grpc then
    # closes (GeneratorExit) where a done callback added would never run. The answer has no end: one
    # of 400 messages (8 MB) fitted the caller's buffers now and then on a busy machine, ended before
    # the cancellation, and was rightly counted OK.
    registry = CollectorRegistry()
    tracker = StreamTracker(Gauge("open", "", registry=registry), Counter("ended", "", ["code"], registry=registry))

    async def answer_at_length(requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext) -> AsyncIterator[bytes]:
        async with tracker.track(context):
            async for _ in requests:
                while True:  # an answer without end: whatever the caller's buffers take, a write waits when it cancels
                    yield bytes(LONG_ANSWER_MESSAGE_BYTES)

    server = aio_server()
    handler = grpc.stream_stream_rpc_method_handler(answer_at_length)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("test.Long", {"Answer": handler}),))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            answer = channel.stream_stream("/test.Long/Answer")
            for _ in range(CANCELLED_CALLS):
                call = answer()
                await call.write(b"go")
                await call.read()
                await asyncio.sleep(0.05)  # the handler is now blocked writing
                call.cancel()
            await wait_until(lambda: registry.get_sample_value("open") == 0)
            await wait_until(lambda: registry.get_sample_value("ended_total", {"code": "CANCELLED"}) == CANCELLED_CALLS)
    finally:
        await server.stop(0)
