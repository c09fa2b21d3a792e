from libs.pb.tts.common.v1 import load_pb2 as _load_pb2
from libs.pb.tts.common.v1 import mel_pb2 as _mel_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class VocodeRequest(_message.Message):
    __slots__ = ("slices", "context_only", "playback_slack_ms", "downstream_ms", "tier", "unlistened", "end")
    SLICES_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_ONLY_FIELD_NUMBER: _ClassVar[int]
    PLAYBACK_SLACK_MS_FIELD_NUMBER: _ClassVar[int]
    DOWNSTREAM_MS_FIELD_NUMBER: _ClassVar[int]
    TIER_FIELD_NUMBER: _ClassVar[int]
    UNLISTENED_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    slices: _containers.RepeatedCompositeFieldContainer[_mel_pb2.MelSlice]
    context_only: bool
    playback_slack_ms: float
    downstream_ms: float
    tier: str
    unlistened: bool
    end: bool
    def __init__(self, slices: _Optional[_Iterable[_Union[_mel_pb2.MelSlice, _Mapping]]] = ..., context_only: _Optional[bool] = ..., playback_slack_ms: _Optional[float] = ..., downstream_ms: _Optional[float] = ..., tier: _Optional[str] = ..., unlistened: _Optional[bool] = ..., end: _Optional[bool] = ...) -> None: ...

class VocodeResponse(_message.Message):
    __slots__ = ("utterance_id", "sentence_index", "first_sample", "samples", "sample_rate_hz", "is_last", "busy", "step_continues")
    UTTERANCE_ID_FIELD_NUMBER: _ClassVar[int]
    SENTENCE_INDEX_FIELD_NUMBER: _ClassVar[int]
    FIRST_SAMPLE_FIELD_NUMBER: _ClassVar[int]
    SAMPLES_FIELD_NUMBER: _ClassVar[int]
    SAMPLE_RATE_HZ_FIELD_NUMBER: _ClassVar[int]
    IS_LAST_FIELD_NUMBER: _ClassVar[int]
    BUSY_FIELD_NUMBER: _ClassVar[int]
    STEP_CONTINUES_FIELD_NUMBER: _ClassVar[int]
    utterance_id: str
    sentence_index: int
    first_sample: int
    samples: bytes
    sample_rate_hz: int
    is_last: bool
    busy: bool
    step_continues: bool
    def __init__(self, utterance_id: _Optional[str] = ..., sentence_index: _Optional[int] = ..., first_sample: _Optional[int] = ..., samples: _Optional[bytes] = ..., sample_rate_hz: _Optional[int] = ..., is_last: _Optional[bool] = ..., busy: _Optional[bool] = ..., step_continues: _Optional[bool] = ...) -> None: ...
