"""One utterance's acoustic stream that survives worker failures.

Sentences are requested one at a time on one bidi call. When the call breaks (or the worker goes
silent past the attempt timeout) in the middle of a sentence, a new call is opened on another
endpoint and the sentence is asked for again from the first frame not yet received. The seed is a
function of the sentence's inputs, and chunk boundaries are fixed by frame index, so the new
worker's frames are bit-identical to the ones the broken call would have sent.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import grpc

from libs.pb.tts.acoustic.v1 import acoustic_pb2
from libs.pb.tts.common.v1 import mel_pb2
from libs.routing.endpoints import Endpoint
from libs.upstream.calls import CALL_ERRORS, Deadline, StreamEnded
from libs.upstream.playback import PlaybackClock
from libs.upstream.pool import WorkerPool
from libs.upstream.resumable import ResumableCall
from libs.voice.inputs import SynthesisInputs


def sentence_request(
    inputs: SynthesisInputs, *, utterance_id: str, sentence_index: int, slice_ms: float, dtype: int
) -> acoustic_pb2.SentenceRequest:
    """The acoustic worker's request for the sentence `inputs` describe (from its first frame)."""
    params = inputs.params
    first_id, end_id = inputs.spoken_ids or (0, 0)
    return acoustic_pb2.SentenceRequest(
        utterance_id=utterance_id,
        sentence_index=sentence_index,
        phoneme_ids=inputs.phoneme_ids,
        voice=inputs.voice,
        speaker_id=params.speaker_id,
        speed=params.speed,
        noise_scale=params.noise_scale,
        noise_w=params.noise_w,
        expected_model_version=inputs.model_version,
        slice_ms=slice_ms,
        dtype=dtype,
        spoken_first_id=first_id,
        spoken_end_id=end_id,
    )


class ResumableAcousticStream(ResumableCall):
    """Mel slices of each sentence of one utterance, from whichever acoustic worker can serve them."""

    kind = "acoustic"

    def __init__(self, pool: WorkerPool, deadline: Deadline, clock: PlaybackClock | None = None, voice: str = "") -> None:
        """`clock`, when given, is the listener's: each request then tells the worker its slack.
        `voice` ("": the workers' default) picks the workers, and every request must name it."""
        super().__init__(pool, deadline, pool.attempts(self.kind, voice=voice))
        self._voice = voice
        self._clock = clock
        self._sentence_index = 0
        self._next_frame = 0
        self._model_version: str | None = None
        """The model the attempts are counted for (only workers running it may answer)."""

    def _attempts_for(self, model_version: str) -> None:
        """Count attempts among the workers running `model_version`; kept while it stays the same."""
        if model_version != self._model_version:
            self.attempts = self._pool.attempts(self.kind, model_version, self._voice)
            self._model_version = model_version

    async def sentence(self, request: acoustic_pb2.SentenceRequest) -> AsyncIterator[list[mel_pb2.MelSlice]]:
        """The slices of the sentence `request` asks for, in order, exactly once each, a chunk at a time."""
        # Only workers running the model the cache key was made with may answer.
        self._attempts_for(request.expected_model_version)
        self._sentence_index, self._next_frame = request.sentence_index, 0
        # A first call for a later sentence: the ones before it came from the cache, to the listener.
        self._under_way = self._under_way or request.sentence_index > 0
        while True:
            try:
                if self._call is None:
                    await self._open()
                resumed = acoustic_pb2.SentenceRequest()
                resumed.CopyFrom(request)
                resumed.start_frame = self._next_frame
                if self._clock is not None:
                    # What follows this worker's step before the listener hears it: the vocoder's step
                    # and the hops to it and back, so the slack the worker gets is its own.
                    after_s = self._pool.step_lead_s(None, "vocoder") + self._pool.round_trip_s(self._endpoint)
                    resumed.playback_slack_ms = self._clock.slack_ms(request.sentence_index, self._next_frame) - 1000.0 * after_s
                    resumed.downstream_ms = 1000.0 * after_s
                    resumed.unlistened = not self._clock.listened
                pacing = self._pool.vocoder_pacing(None)
                if pacing is not None:
                    resumed.vocoder_pacing.CopyFrom(pacing)
                self._owed_since_s = time.monotonic()  # a sentence is pending: the worker owes its next chunk
                await self._call.write(resumed)
                while True:
                    message = await self._read()
                    if message is grpc.aio.EOF:
                        raise StreamEnded()
                    self._owed_since_s = time.monotonic()
                    slices = list(message.slices)
                    if not slices:
                        continue  # an empty chunk carries nothing to forward
                    self._progressed = True
                    last = slices[-1]
                    self._next_frame = last.first_frame + last.frame_count
                    yield slices
                    if last.is_last:
                        self.attempts.succeeded(self._endpoint)  # type: ignore[arg-type]
                        return
            except CALL_ERRORS as error:
                await self._recover(error)

    def _start(self, endpoint: Endpoint, timeout_s: float | None) -> Any:
        metadata = self._open_metadata(self._pool.stream_metadata(self._voice))
        return self._pool.acoustic_stub(endpoint).SynthesizeMel(timeout=timeout_s, metadata=metadata)

    def _end_request(self) -> acoustic_pb2.SentenceRequest:
        return acoustic_pb2.SentenceRequest(end=True)

    def _position(self) -> str:
        return f"in sentence {self._sentence_index} at frame {self._next_frame}"
