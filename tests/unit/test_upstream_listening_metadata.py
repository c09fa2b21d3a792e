"""A worker stream opened once the listener has audio of its utterance (from the cache before any call,
or from a worker that went away) says so with LISTENING_METADATA, so the worker admits it past its
real-time checks; one opened before the listener has audio does not."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from libs.pb.tts.acoustic.v1 import acoustic_pb2
from libs.upstream.acoustic_stream import ResumableAcousticStream
from libs.upstream.calls import Deadline
from libs.upstream.playback import PlaybackClock
from libs.wire.errors import NoWorkerError
from libs.wire.headers import ANNOUNCES_END_METADATA, LISTENING_METADATA


class _Pool:
    """Stands in for the worker pool: the stream reads only its settings, attempts and metadata here."""

    settings = SimpleNamespace(attempt_timeout_s=1.0)

    def attempts(self, *args: Any, **kwargs: Any) -> None:
        return None

    def stream_metadata(self, voice: str, *args: Any) -> tuple[tuple[str, str], ...]:
        return (("tts-voice", voice),)


def test_a_stream_says_its_listener_hears_it_once_the_listener_has_audio() -> None:
    pool = _Pool()
    clock = PlaybackClock(frame_s=0.0116)
    stream = ResumableAcousticStream(pool, Deadline(None), clock, voice="v")  # type: ignore[arg-type]
    assert LISTENING_METADATA not in stream._open_metadata(pool.stream_metadata("v"))
    clock.delivered(0.5)  # a cached first sentence went to the client
    assert stream._open_metadata(pool.stream_metadata("v")) == (("tts-voice", "v"), ANNOUNCES_END_METADATA, LISTENING_METADATA)
    without_clock = ResumableAcousticStream(pool, Deadline(None), None, voice="v")  # type: ignore[arg-type]
    assert LISTENING_METADATA not in without_clock._open_metadata(())
    without_clock._progressed = True  # slices of this utterance reached the client: a reopen is a resume
    assert LISTENING_METADATA in without_clock._open_metadata(())


async def test_a_first_call_for_a_later_sentence_says_the_listener_hears_the_utterance() -> None:
    """Sentence 0 came from the cache: the acoustic stream's first call is for sentence 1, while the
    listener may not have had a sample yet, and it must not be refused as a new listener."""
    pool = _Pool()
    stream = ResumableAcousticStream(pool, Deadline(None), PlaybackClock(frame_s=0.0116), voice="v")  # type: ignore[arg-type]
    stream.attempts = SimpleNamespace(choose=lambda: None, last_failure=None, refusal=None)  # no worker: the open fails at once
    request = acoustic_pb2.SentenceRequest(sentence_index=1, expected_model_version="m")
    stream._attempts_for = lambda model_version: None  # type: ignore[method-assign]
    with pytest.raises(NoWorkerError):
        async for _ in stream.sentence(request):
            pass
    assert LISTENING_METADATA in stream._open_metadata(())
