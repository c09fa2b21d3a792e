"""The vocoder worker over real gRPC: a message of many slices is answered step by step, exactly."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import grpc
import numpy as np

from libs.pb.tts.common.v1 import mel_pb2
from libs.pb.tts.vocoder.v1 import vocoder_pb2, vocoder_pb2_grpc
from libs.serving.voice_shelf import VoiceShelf
from libs.telemetry.metrics import VocoderMetrics
from libs.wire.mel_slices import cut_whole_mel, to_message
from services.vocoder.servicer import VocoderServicer
from tests.support.faults.toy_mesh import HOP_LENGTH, N_MELS, SAMPLE_RATE_HZ, toy_scheduling, toy_vocoder_engine
from tests.support.servers import aio_server

FRAMES = 200


async def _vocode(requests: list[vocoder_pb2.VocodeRequest]) -> list[vocoder_pb2.VocodeResponse]:
    executor = ThreadPoolExecutor(1)
    server = aio_server()
    metrics = VocoderMetrics()
    servicer = VocoderServicer(metrics, *toy_scheduling("vocoder", executor, metrics))
    servicer.install(VoiceShelf.holding(toy_vocoder_engine()))
    vocoder_pb2_grpc.add_VocoderServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            call = vocoder_pb2_grpc.VocoderStub(channel).Vocode(iter(requests), timeout=60)
            return [reply async for reply in call]
    finally:
        await server.stop(0)
        executor.shutdown()


def _slices(mel: np.ndarray) -> list[mel_pb2.MelSlice]:
    cuts = cut_whole_mel(mel, HOP_LENGTH, SAMPLE_RATE_HZ)
    return [to_message(cut, utterance_id="u", sentence_index=0, sentence_frame_count=mel.shape[1]) for cut in cuts]


async def test_a_whole_sentence_in_one_message_is_answered_once_per_step() -> None:
    mel = np.random.default_rng(3).normal(-5.0, 1.5, size=(N_MELS, FRAMES)).astype(np.float32)
    one_message = await _vocode([vocoder_pb2.VocodeRequest(slices=_slices(mel))])
    one_per_slice = await _vocode([vocoder_pb2.VocodeRequest(slices=[s]) for s in _slices(mel)])

    engine = toy_vocoder_engine()
    steps = [engine.schedule.chunk_frames(i) for i in range(4)]  # 32 + 32 + 64 frames, then the last 72
    assert sum(steps[:3]) < FRAMES < sum(steps)
    # The first answer comes after the first step, not after the whole sentence.
    assert len(one_message) == 4 and one_message[-1].is_last and not one_message[0].is_last
    assert one_message[0].first_sample == 0 and len(one_message[0].samples) < 4 * steps[0] * HOP_LENGTH
    joined = np.concatenate([np.frombuffer(r.samples, dtype="<f4") for r in one_message])
    per_slice = np.concatenate([np.frombuffer(r.samples, dtype="<f4") for r in one_per_slice])
    whole = engine.vocode(mel)
    assert len(joined) == FRAMES * HOP_LENGTH
    np.testing.assert_array_equal(joined, per_slice)  # packing does not change the steps
    assert float(np.abs(joined - whole).max()) <= 1e-4
