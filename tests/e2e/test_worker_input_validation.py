"""Workers trust no caller: every field of every request is checked against real worker processes, and
each bad one is INVALID_ARGUMENT with a message that says what to fix, never INTERNAL, a hang or a
crash; the worker goes on serving."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

import grpc
import numpy as np
import pytest

from libs.pb.tts.acoustic.v1 import acoustic_pb2, acoustic_pb2_grpc
from libs.pb.tts.common.v1 import mel_pb2
from libs.pb.tts.vocoder.v1 import vocoder_pb2, vocoder_pb2_grpc
from libs.text.frontend import TextFrontend
from libs.voice.registry import default_registry
from libs.wire.mel_slices import cut_whole_mel, to_message
from tests.support.mesh import Mesh

CALL_TIMEOUT_S = 60.0
MESSAGE_LIMIT_CHARS = 400  # no error message repeats more than a few dozen characters of input


@pytest.fixture(scope="module")
def sentence(mesh: Mesh) -> acoustic_pb2.SentenceRequest:
    """A valid request for one short sentence, as the gateway would send it."""
    voice = default_registry().default
    ids = TextFrontend(voice.phoneme_id_map(), espeak_voice=voice.espeak_voice).sentences("Hello there.")[0].phoneme_ids
    with mesh.worker_channel("acoustic") as channel:
        info = acoustic_pb2_grpc.AcousticStub(channel).GetModelInfo(acoustic_pb2.GetModelInfoRequest(), timeout=10)
    return acoustic_pb2.SentenceRequest(
        utterance_id="validation", sentence_index=0, phoneme_ids=ids, voice=voice.name, speed=1.0,
        noise_scale=voice.noise_scale, noise_w=voice.noise_w, expected_model_version=info.model_version,
        dtype=mel_pb2.MEL_DTYPE_FLOAT16,
    )  # fmt: skip


def _synthesize_mel(mesh: Mesh, requests: Iterable[acoustic_pb2.SentenceRequest]) -> list[Any] | grpc.RpcError:
    with mesh.worker_channel("acoustic") as channel:
        try:
            return list(acoustic_pb2_grpc.AcousticStub(channel).SynthesizeMel(iter(list(requests)), timeout=CALL_TIMEOUT_S))
        except grpc.RpcError as error:
            return error


def _vocode(mesh: Mesh, requests: Iterable[vocoder_pb2.VocodeRequest]) -> list[Any] | grpc.RpcError:
    with mesh.worker_channel("vocoder") as channel:
        try:
            return list(vocoder_pb2_grpc.VocoderStub(channel).Vocode(iter(list(requests)), timeout=CALL_TIMEOUT_S))
        except grpc.RpcError as error:
            return error


def _changed(request: Any, **fields: Any) -> Any:
    copy = type(request)()
    copy.CopyFrom(request)
    for name, value in fields.items():
        if name == "phoneme_ids":
            del copy.phoneme_ids[:]
            copy.phoneme_ids.extend(value)
        else:
            setattr(copy, name, value)
    return copy


def _assert_refused(outcome: Any, code: grpc.StatusCode, fragment: str) -> None:
    assert isinstance(outcome, grpc.RpcError), f"accepted: {len(outcome)} answers"
    assert outcome.code() == code, (outcome.code(), outcome.details())
    assert fragment in outcome.details(), outcome.details()
    assert len(outcome.details()) < MESSAGE_LIMIT_CHARS, outcome.details()


ACOUSTIC_CASES: list[tuple[str, dict[str, Any], str]] = [
    ("id-past-vocabulary", dict(phoneme_ids=[1, 0, 999, 0, 2]), "phoneme id 999 is not in this voice's vocabulary"),
    ("negative-id", dict(phoneme_ids=[1, -4, 2]), "phoneme id -4 is not in this voice's vocabulary"),
    ("no-ids", dict(phoneme_ids=[]), "phoneme_ids is empty"),
    ("too-many-ids", dict(phoneme_ids=[1] + [0, 20] * 5000 + [2]), "a sentence may have at most"),
    ("speed-nan", dict(speed=math.nan), "speed nan is outside"),
    ("speed-zero", dict(speed=0.0), "speed 0.0 is outside"),
    ("speed-huge", dict(speed=1e30), "is outside 0.25..4.0"),
    ("noise-scale-negative", dict(noise_scale=-1.0), "noise_scale -1.0 is outside 0..2.0"),
    ("noise-w-infinite", dict(noise_w=math.inf), "noise_w inf is outside 0..2.0"),
    ("noise-w-huge", dict(noise_w=50.0), "noise_w 50.0 is outside"),
    ("slice-tiny", dict(slice_ms=0.001), "slice_ms"),
    ("slice-nan", dict(slice_ms=math.nan), "slice_ms nan"),
    ("slice-huge", dict(slice_ms=1e9), "slice_ms"),
    ("dtype-unknown", dict(dtype=7), "dtype 7 is not a mel dtype"),
    ("start-negative", dict(start_frame=-1), "start_frame -1 is outside"),
    ("start-past-any-sentence", dict(start_frame=2**30), "start_frame 1073741824 is outside"),
    ("start-past-this-sentence", dict(start_frame=5000), "start_frame 5000 is past the sentence's"),
    ("speaker-unknown", dict(speaker_id=7), "speaker_id 7 is outside"),
    ("sentence-negative", dict(sentence_index=-3), "sentence_index -3 is negative"),
    ("utterance-id-long", dict(utterance_id="u" * 5000), "utterance_id is 5000 characters long"),
    ("slack-nan", dict(playback_slack_ms=math.nan), "playback_slack_ms is nan"),
    ("slack-infinite", dict(playback_slack_ms=-math.inf), "playback_slack_ms is -inf"),
    ("spoken-empty", dict(spoken_first_id=3, spoken_end_id=3), "spoken ids 3..3 are not a span"),
    ("spoken-past-the-ids", dict(spoken_end_id=5000), "spoken ids 0..5000 are not a span"),
    ("spoken-first-past-the-ids", dict(spoken_first_id=5000), "spoken ids 5000..0 are not a span"),
    ("spoken-negative", dict(spoken_first_id=-2, spoken_end_id=4), "spoken ids -2..4 are not a span"),
]


@pytest.mark.parametrize("fields, fragment", [case[1:] for case in ACOUSTIC_CASES], ids=[case[0] for case in ACOUSTIC_CASES])
def test_acoustic_worker_refuses_a_bad_field(mesh: Mesh, sentence: acoustic_pb2.SentenceRequest, fields: dict, fragment: str) -> None:
    _assert_refused(_synthesize_mel(mesh, [_changed(sentence, **fields)]), grpc.StatusCode.INVALID_ARGUMENT, fragment)


def test_acoustic_worker_refuses_sentences_out_of_order_or_of_another_utterance(
    mesh: Mesh, sentence: acoustic_pb2.SentenceRequest
) -> None:
    again = _synthesize_mel(mesh, [sentence, _changed(sentence)])
    _assert_refused(again, grpc.StatusCode.INVALID_ARGUMENT, "sentence_index 0 after sentence 0")
    other = _synthesize_mel(mesh, [sentence, _changed(sentence, sentence_index=1, utterance_id="another")])
    _assert_refused(other, grpc.StatusCode.INVALID_ARGUMENT, "utterance_id of its first one")


def test_names_from_the_caller_are_echoed_only_in_part(mesh: Mesh, sentence: acoustic_pb2.SentenceRequest) -> None:
    voice = _synthesize_mel(mesh, [_changed(sentence, voice="x" * 200)])
    _assert_refused(voice, grpc.StatusCode.NOT_FOUND, "… (200 characters)")
    version = _synthesize_mel(mesh, [_changed(sentence, expected_model_version="m" * 200)])
    _assert_refused(version, grpc.StatusCode.FAILED_PRECONDITION, "… (200 characters)")


def test_acoustic_worker_still_serves_after_bad_requests(mesh: Mesh, sentence: acoustic_pb2.SentenceRequest) -> None:
    _synthesize_mel(mesh, [_changed(sentence, phoneme_ids=[999])])
    _synthesize_mel(mesh, [_changed(sentence, playback_slack_ms=math.nan)])
    answers = _synthesize_mel(mesh, [sentence])
    assert isinstance(answers, list) and answers[-1].slices[-1].is_last


def test_acoustic_worker_speaks_a_span_of_a_sentence_from_its_first_frame(mesh: Mesh, sentence: acoustic_pb2.SentenceRequest) -> None:
    whole = _synthesize_mel(mesh, [sentence])
    span = (4, len(sentence.phoneme_ids) - 2)
    part = _synthesize_mel(mesh, [_changed(sentence, spoken_first_id=span[0], spoken_end_id=span[1])])
    assert isinstance(whole, list) and isinstance(part, list)
    frames = list(whole[0].slices[0].alignment.phoneme_frames)
    part_slices = [mel_slice for answer in part for mel_slice in answer.slices]
    assert list(part_slices[0].alignment.phoneme_frames) == frames[span[0] : span[1]]
    assert part_slices[0].sentence_frame_count == sum(frames[span[0] : span[1]]) and part_slices[0].first_frame == 0
    assert part_slices[-1].is_last


# --- the vocoder ---------------------------------------------------------------------------------

N_MELS, HOP, RATE_HZ = 80, 256, 22050
FRAMES = 40


def _slices(frames: int = FRAMES, sentence_index: int = 0, utterance_id: str = "validation") -> list[mel_pb2.MelSlice]:
    """A valid sentence of `frames` frames of quiet log-mel, cut into 40 ms slices."""
    mel = np.full((N_MELS, frames), -6.0, dtype=np.float32)
    return [
        to_message(cut, utterance_id=utterance_id, sentence_index=sentence_index, sentence_frame_count=frames)
        for cut in cut_whole_mel(mel, HOP, RATE_HZ)
    ]


def _with(mel_slice: mel_pb2.MelSlice, **fields: Any) -> mel_pb2.MelSlice:
    return _changed(mel_slice, **fields)


def _frames_bytes(values: np.ndarray) -> bytes:
    return np.ascontiguousarray(values.T, dtype="<f4").tobytes()


def _second_slice(change: Callable[[mel_pb2.MelSlice], mel_pb2.MelSlice]) -> list[vocoder_pb2.VocodeRequest]:
    """The valid sentence with its second slice changed, one slice per message."""
    slices = _slices()
    slices[1] = change(slices[1])
    return [vocoder_pb2.VocodeRequest(slices=[one]) for one in slices]


VOCODER_CASES: list[tuple[str, list[vocoder_pb2.VocodeRequest], str]] = [
    ("bands", _second_slice(lambda s: _with(s, n_mels=40, frames=s.frames[: len(s.frames) // 2])), "has 40 bands; this model takes 80"),
    ("dtype", _second_slice(lambda s: _with(s, dtype=9)), "unsupported dtype 9"),
    ("frame-bytes", _second_slice(lambda s: _with(s, frames=s.frames[:-4])), "bytes"),
    ("no-frames", _second_slice(lambda s: _with(s, frame_count=0, frames=b"")), "frame_count 0"),
    ("too-many-frames", _second_slice(lambda s: _with(s, frame_count=5000)), "frame_count 5000"),
    ("nan", _second_slice(lambda s: _with(s, frames=_frames_bytes(np.full((N_MELS, s.frame_count), np.nan)))), "NaN or infinite"),
    ("inf", _second_slice(lambda s: _with(s, frames=_frames_bytes(np.full((N_MELS, s.frame_count), -np.inf)))), "NaN or infinite"),
    ("not-a-mel", _second_slice(lambda s: _with(s, frames=_frames_bytes(np.full((N_MELS, s.frame_count), 1e4)))), "magnitude 10000"),
    ("gap", _second_slice(lambda s: _with(s, first_frame=s.first_frame + 1)), "(no gaps, no overlaps)"),
    ("overlap", _second_slice(lambda s: _with(s, first_frame=s.first_frame - 1)), "(no gaps, no overlaps)"),
    ("frame-count-changes", _second_slice(lambda s: _with(s, sentence_frame_count=FRAMES + 8)), "its first slice said 40"),
    ("early-is-last", _second_slice(lambda s: _with(s, is_last=True)), "is marked is_last"),
    ("negative-slice", _second_slice(lambda s: _with(s, slice_index=-1)), "must not be negative"),
    ("other-utterance", _second_slice(lambda s: _with(s, utterance_id="another")), "utterance_id of its first slice"),
    ("sentence-frames-zero", [vocoder_pb2.VocodeRequest(slices=[_with(s, sentence_frame_count=0) for s in _slices()])], "sentence_frame_count 0 is outside"),
    ("sentence-frames-huge", [vocoder_pb2.VocodeRequest(slices=[_with(s, sentence_frame_count=10**8) for s in _slices()])], "sentence_frame_count 100000000 is outside"),
    ("past-the-sentence", [vocoder_pb2.VocodeRequest(slices=[_with(s, sentence_frame_count=20) for s in _slices()])], "past the sentence's 20 frames"),
    ("sentence-negative", [vocoder_pb2.VocodeRequest(slices=_slices(sentence_index=-2))], "sentence_index -2 is negative"),
    ("utterance-id-long", [vocoder_pb2.VocodeRequest(slices=_slices(utterance_id="u" * 5000))], "utterance_id is 5000 characters long"),
    ("no-is-last", [vocoder_pb2.VocodeRequest(slices=_slices()[:-1])], "stream ended inside sentence 0"),
    ("next-before-end", [vocoder_pb2.VocodeRequest(slices=_slices()[:-1]), vocoder_pb2.VocodeRequest(slices=_slices(sentence_index=1))], "ended without a slice marked is_last"),
    ("sentences-backwards", [vocoder_pb2.VocodeRequest(slices=_slices(sentence_index=3)), vocoder_pb2.VocodeRequest(slices=_slices(sentence_index=1))], "send sentences in increasing order"),
    ("context-after-audio", [vocoder_pb2.VocodeRequest(slices=_slices()[:2]), vocoder_pb2.VocodeRequest(slices=_slices()[2:3], context_only=True)], "context-only slices must come before"),
    ("context-to-the-end", [vocoder_pb2.VocodeRequest(slices=_slices(), context_only=True)], "ended with context-only slices"),
    ("resume-without-context", [vocoder_pb2.VocodeRequest(slices=[s for s in _slices(400) if s.first_frame >= 200])], "needs mel context from frame"),
    ("slack-nan", [vocoder_pb2.VocodeRequest(slices=_slices(), playback_slack_ms=math.nan)], "playback_slack_ms is nan"),
    ("slack-infinite", [vocoder_pb2.VocodeRequest(slices=_slices(), playback_slack_ms=math.inf)], "playback_slack_ms is inf"),
]  # fmt: skip


@pytest.mark.parametrize("requests, fragment", [case[1:] for case in VOCODER_CASES], ids=[case[0] for case in VOCODER_CASES])
def test_vocoder_worker_refuses_a_bad_slice(mesh: Mesh, requests: list[vocoder_pb2.VocodeRequest], fragment: str) -> None:
    _assert_refused(_vocode(mesh, requests), grpc.StatusCode.INVALID_ARGUMENT, fragment)


def test_vocoder_worker_still_serves_after_bad_slices(mesh: Mesh) -> None:
    _vocode(mesh, VOCODER_CASES[0][1])
    answers = _vocode(mesh, [vocoder_pb2.VocodeRequest(slices=_slices())])
    assert isinstance(answers, list) and answers[-1].is_last
    samples = sum(len(answer.samples) // 4 for answer in answers)
    assert samples == FRAMES * HOP
