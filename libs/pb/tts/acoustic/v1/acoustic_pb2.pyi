from libs.pb.tts.common.v1 import load_pb2 as _load_pb2
from libs.pb.tts.common.v1 import mel_pb2 as _mel_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class SentenceRequest(_message.Message):
    __slots__ = ("utterance_id", "sentence_index", "phoneme_ids", "voice", "speaker_id", "speed", "noise_scale", "noise_w", "seed", "expected_model_version", "start_frame", "slice_ms", "dtype", "playback_slack_ms", "vocoder_pacing", "downstream_ms", "spoken_first_id", "spoken_end_id", "unlistened", "end")
    UTTERANCE_ID_FIELD_NUMBER: _ClassVar[int]
    SENTENCE_INDEX_FIELD_NUMBER: _ClassVar[int]
    PHONEME_IDS_FIELD_NUMBER: _ClassVar[int]
    VOICE_FIELD_NUMBER: _ClassVar[int]
    SPEAKER_ID_FIELD_NUMBER: _ClassVar[int]
    SPEED_FIELD_NUMBER: _ClassVar[int]
    NOISE_SCALE_FIELD_NUMBER: _ClassVar[int]
    NOISE_W_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_MODEL_VERSION_FIELD_NUMBER: _ClassVar[int]
    START_FRAME_FIELD_NUMBER: _ClassVar[int]
    SLICE_MS_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    PLAYBACK_SLACK_MS_FIELD_NUMBER: _ClassVar[int]
    VOCODER_PACING_FIELD_NUMBER: _ClassVar[int]
    DOWNSTREAM_MS_FIELD_NUMBER: _ClassVar[int]
    SPOKEN_FIRST_ID_FIELD_NUMBER: _ClassVar[int]
    SPOKEN_END_ID_FIELD_NUMBER: _ClassVar[int]
    UNLISTENED_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    utterance_id: str
    sentence_index: int
    phoneme_ids: _containers.RepeatedScalarFieldContainer[int]
    voice: str
    speaker_id: int
    speed: float
    noise_scale: float
    noise_w: float
    seed: int
    expected_model_version: str
    start_frame: int
    slice_ms: float
    dtype: _mel_pb2.MelDType
    playback_slack_ms: float
    vocoder_pacing: _load_pb2.VocoderPacing
    downstream_ms: float
    spoken_first_id: int
    spoken_end_id: int
    unlistened: bool
    end: bool
    def __init__(self, utterance_id: _Optional[str] = ..., sentence_index: _Optional[int] = ..., phoneme_ids: _Optional[_Iterable[int]] = ..., voice: _Optional[str] = ..., speaker_id: _Optional[int] = ..., speed: _Optional[float] = ..., noise_scale: _Optional[float] = ..., noise_w: _Optional[float] = ..., seed: _Optional[int] = ..., expected_model_version: _Optional[str] = ..., start_frame: _Optional[int] = ..., slice_ms: _Optional[float] = ..., dtype: _Optional[_Union[_mel_pb2.MelDType, str]] = ..., playback_slack_ms: _Optional[float] = ..., vocoder_pacing: _Optional[_Union[_load_pb2.VocoderPacing, _Mapping]] = ..., downstream_ms: _Optional[float] = ..., spoken_first_id: _Optional[int] = ..., spoken_end_id: _Optional[int] = ..., unlistened: _Optional[bool] = ..., end: _Optional[bool] = ...) -> None: ...

class GetModelInfoRequest(_message.Message):
    __slots__ = ("voice",)
    VOICE_FIELD_NUMBER: _ClassVar[int]
    voice: str
    def __init__(self, voice: _Optional[str] = ...) -> None: ...

class ModelInfo(_message.Message):
    __slots__ = ("model_version", "voice", "sample_rate_hz", "hop_length", "n_mels", "num_speakers")
    MODEL_VERSION_FIELD_NUMBER: _ClassVar[int]
    VOICE_FIELD_NUMBER: _ClassVar[int]
    SAMPLE_RATE_HZ_FIELD_NUMBER: _ClassVar[int]
    HOP_LENGTH_FIELD_NUMBER: _ClassVar[int]
    N_MELS_FIELD_NUMBER: _ClassVar[int]
    NUM_SPEAKERS_FIELD_NUMBER: _ClassVar[int]
    model_version: str
    voice: str
    sample_rate_hz: int
    hop_length: int
    n_mels: int
    num_speakers: int
    def __init__(self, model_version: _Optional[str] = ..., voice: _Optional[str] = ..., sample_rate_hz: _Optional[int] = ..., hop_length: _Optional[int] = ..., n_mels: _Optional[int] = ..., num_speakers: _Optional[int] = ...) -> None: ...
