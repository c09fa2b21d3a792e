"""A small blocking client for the public API, recording what arrived and when."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TypeVar

import grpc
import numpy as np

from libs.pb.tts.v1 import tts_pb2, tts_pb2_grpc

_T = TypeVar("_T")


@dataclass
class Spoken:
    """Everything one call returned."""

    responses: list[tts_pb2.SynthesizeResponse]
    first_audio_s: float
    """Seconds from the call to the first non-empty audio piece."""
    total_s: float
    """Seconds from the call to the end of the stream."""

    @property
    def samples(self) -> np.ndarray:
        """All audio as float in [-1, 1] (LINEAR_PCM responses)."""
        pcm = b"".join(response.audio for response in self.responses)
        return np.frombuffer(pcm, dtype="<i2").astype(np.float32) / 32767.0

    @property
    def sample_rate_hz(self) -> int:
        return self.responses[0].sample_rate_hz

    @property
    def duration_s(self) -> float:
        return len(self.samples) / self.sample_rate_hz


def collect(stream: Iterable[tts_pb2.SynthesizeResponse], started: float) -> Spoken:
    """Drain a response stream, timing the first audio."""
    responses: list[tts_pb2.SynthesizeResponse] = []
    first_audio_s = float("nan")
    for response in stream:
        if response.audio and not responses:
            first_audio_s = time.monotonic() - started
        responses.append(response)
    return Spoken(responses, first_audio_s, time.monotonic() - started)


def synthesize(address: str, text: str, timeout_s: float = 120.0, **fields: object) -> Spoken:
    """One Synthesize call."""
    with grpc.insecure_channel(address) as channel:
        stub = tts_pb2_grpc.TextToSpeechStub(channel)
        started = time.monotonic()
        return collect(stub.Synthesize(tts_pb2.SynthesizeRequest(text=text, **fields), timeout=timeout_s), started)


def when_room(call: Callable[[], _T], within_s: float = 10.0) -> _T:
    """`call()`, made again while the gateway refuses it for room (RESOURCE_EXHAUSTED), for at most
    `within_s`: a stream cancelled a moment ago frees its place only once the gateway has heard of
    the cancel (an RST_STREAM on its way), so a call right after it may still find the place taken."""
    deadline = time.monotonic() + within_s
    while True:
        try:
            return call()
        except grpc.RpcError as error:
            if error.code() != grpc.StatusCode.RESOURCE_EXHAUSTED or time.monotonic() > deadline:
                raise
            time.sleep(0.1)
