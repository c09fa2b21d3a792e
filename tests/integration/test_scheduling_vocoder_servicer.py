"""The vocoder worker over real gRPC: a stream that has played nothing jumps the queue of well-buffered
streams, and every stream's samples stay exactly what it gets alone."""

from __future__ import annotations

import asyncio

import grpc
import numpy as np

from libs.pb.tts.common.v1 import mel_pb2
from libs.pb.tts.vocoder.v1 import vocoder_pb2, vocoder_pb2_grpc
from libs.scheduling.executor import DeadlineExecutor
from libs.serving.voice_shelf import VoiceShelf
from libs.telemetry.metrics import VocoderMetrics
from libs.wire.mel_slices import cut_whole_mel, to_message
from services.vocoder.servicer import VocoderServicer
from tests.support.faults.toy_mesh import HOP_LENGTH, N_MELS, SAMPLE_RATE_HZ, toy_scheduling, toy_vocoder_engine
from tests.support.servers import aio_server

BUFFERED_STREAMS = 4
BUFFERED_FRAMES = 1500  # 13 steps each: they are still running when the new stream arrives
NEW_FRAMES = 120  # 3 steps: 32, 32 and the last 56
BUFFERED_SLACK_MS = 60_000.0


def _request(utterance_id: str, frames: int, seed: int, slack_ms: float) -> vocoder_pb2.VocodeRequest:
    mel = np.random.default_rng(seed).normal(-5.0, 1.5, size=(N_MELS, frames)).astype(np.float32)
    cuts = cut_whole_mel(mel, HOP_LENGTH, SAMPLE_RATE_HZ)
    slices: list[mel_pb2.MelSlice] = [
        to_message(cut, utterance_id=utterance_id, sentence_index=0, sentence_frame_count=frames) for cut in cuts
    ]
    return vocoder_pb2.VocodeRequest(slices=slices, playback_slack_ms=slack_ms)


async def _run(by_deadline: bool) -> tuple[int, dict[str, bytes]]:
    """Buffered streams run; a new one arrives. Returns how many buffered answers came while the new
    stream was served (from its request to its last answer), and every stream's samples."""
    executor = DeadlineExecutor(1, by_deadline=by_deadline)
    server = aio_server()
    metrics = VocoderMetrics()
    servicer = VocoderServicer(metrics, *toy_scheduling("vocoder", executor, metrics))
    servicer.install(VoiceShelf.holding(toy_vocoder_engine()))
    vocoder_pb2_grpc.add_VocoderServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    events: list[str] = []
    samples: dict[str, list[bytes]] = {}
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = vocoder_pb2_grpc.VocoderStub(channel)
            started = [asyncio.Event() for _ in range(BUFFERED_STREAMS)]

            async def stream(name: str, request: vocoder_pb2.VocodeRequest, first: asyncio.Event | None) -> None:
                samples[name] = []
                async for reply in stub.Vocode(iter([request]), timeout=120):
                    events.append(name)
                    samples[name].append(reply.samples)
                    if first is not None:
                        first.set()

            buffered = [
                asyncio.create_task(stream(f"buffered-{i}", _request(f"b{i}", BUFFERED_FRAMES, i, BUFFERED_SLACK_MS), started[i]))
                for i in range(BUFFERED_STREAMS)
            ]
            for event in started:
                await event.wait()
            events.append("sent")
            await stream("new", _request("n", NEW_FRAMES, 99, 0.0), None)
            await asyncio.gather(*buffered)
    finally:
        await server.stop(0)
        executor.shutdown()
    # From the new stream's first answer to its last: what the server ran once it held the new stream
    # (buffered answers written before it arrived are not its doing, however late a busy client reads them).
    window = events[events.index("new") : len(events) - events[::-1].index("new")]
    return sum(name.startswith("buffered") for name in window), {name: b"".join(parts) for name, parts in samples.items()}


async def test_a_new_stream_goes_before_buffered_ones_and_no_sample_changes() -> None:
    by_deadline, deadline_samples = await _run(by_deadline=True)
    by_arrival, arrival_samples = await _run(by_deadline=False)
    # The new stream's 2 later steps are each queued once the one before is answered: each waits for the
    # buffered step the thread took meanwhile (on a loaded machine, one more while the handler turns
    # the answer around); in arrival order each waits behind every buffered stream's queued step.
    print(f"\nbuffered answers while the new stream was served: {by_deadline} by deadline, {by_arrival} by arrival")
    assert by_deadline <= 4 < by_arrival, (by_deadline, by_arrival)
    assert deadline_samples == arrival_samples  # order changes when a step runs, never what it computes
    assert len(deadline_samples["new"]) == NEW_FRAMES * HOP_LENGTH * 4
