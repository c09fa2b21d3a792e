from libs.pb.tts.v1 import tts_pb2 as _tts_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class JobState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    JOB_STATE_UNSPECIFIED: _ClassVar[JobState]
    JOB_STATE_QUEUED: _ClassVar[JobState]
    JOB_STATE_RUNNING: _ClassVar[JobState]
    JOB_STATE_SUCCEEDED: _ClassVar[JobState]
    JOB_STATE_FAILED: _ClassVar[JobState]
    JOB_STATE_CANCELLED: _ClassVar[JobState]
JOB_STATE_UNSPECIFIED: JobState
JOB_STATE_QUEUED: JobState
JOB_STATE_RUNNING: JobState
JOB_STATE_SUCCEEDED: JobState
JOB_STATE_FAILED: JobState
JOB_STATE_CANCELLED: JobState

class CreateJobRequest(_message.Message):
    __slots__ = ("text", "voice", "speed", "encoding", "sample_rate_hz", "speaker_id", "idempotency_key")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    VOICE_FIELD_NUMBER: _ClassVar[int]
    SPEED_FIELD_NUMBER: _ClassVar[int]
    ENCODING_FIELD_NUMBER: _ClassVar[int]
    SAMPLE_RATE_HZ_FIELD_NUMBER: _ClassVar[int]
    SPEAKER_ID_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    text: str
    voice: str
    speed: float
    encoding: _tts_pb2.AudioEncoding
    sample_rate_hz: int
    speaker_id: int
    idempotency_key: str
    def __init__(self, text: _Optional[str] = ..., voice: _Optional[str] = ..., speed: _Optional[float] = ..., encoding: _Optional[_Union[_tts_pb2.AudioEncoding, str]] = ..., sample_rate_hz: _Optional[int] = ..., speaker_id: _Optional[int] = ..., idempotency_key: _Optional[str] = ...) -> None: ...

class Job(_message.Message):
    __slots__ = ("id", "state", "error", "text_chars", "chars_done", "sentences_done", "audio_s", "voice", "encoding", "sample_rate_hz", "created_s", "updated_s", "attempts")
    ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    TEXT_CHARS_FIELD_NUMBER: _ClassVar[int]
    CHARS_DONE_FIELD_NUMBER: _ClassVar[int]
    SENTENCES_DONE_FIELD_NUMBER: _ClassVar[int]
    AUDIO_S_FIELD_NUMBER: _ClassVar[int]
    VOICE_FIELD_NUMBER: _ClassVar[int]
    ENCODING_FIELD_NUMBER: _ClassVar[int]
    SAMPLE_RATE_HZ_FIELD_NUMBER: _ClassVar[int]
    CREATED_S_FIELD_NUMBER: _ClassVar[int]
    UPDATED_S_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    id: str
    state: JobState
    error: str
    text_chars: int
    chars_done: int
    sentences_done: int
    audio_s: float
    voice: str
    encoding: _tts_pb2.AudioEncoding
    sample_rate_hz: int
    created_s: float
    updated_s: float
    attempts: int
    def __init__(self, id: _Optional[str] = ..., state: _Optional[_Union[JobState, str]] = ..., error: _Optional[str] = ..., text_chars: _Optional[int] = ..., chars_done: _Optional[int] = ..., sentences_done: _Optional[int] = ..., audio_s: _Optional[float] = ..., voice: _Optional[str] = ..., encoding: _Optional[_Union[_tts_pb2.AudioEncoding, str]] = ..., sample_rate_hz: _Optional[int] = ..., created_s: _Optional[float] = ..., updated_s: _Optional[float] = ..., attempts: _Optional[int] = ...) -> None: ...

class GetJobRequest(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    def __init__(self, id: _Optional[str] = ...) -> None: ...

class ListJobsRequest(_message.Message):
    __slots__ = ("page_size", "page_token")
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListJobsResponse(_message.Message):
    __slots__ = ("jobs", "next_page_token")
    JOBS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.RepeatedCompositeFieldContainer[Job]
    next_page_token: str
    def __init__(self, jobs: _Optional[_Iterable[_Union[Job, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class CancelJobRequest(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    def __init__(self, id: _Optional[str] = ...) -> None: ...

class DeleteJobRequest(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    def __init__(self, id: _Optional[str] = ...) -> None: ...

class DeleteJobResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetJobAudioRequest(_message.Message):
    __slots__ = ("id", "encoding")
    ID_FIELD_NUMBER: _ClassVar[int]
    ENCODING_FIELD_NUMBER: _ClassVar[int]
    id: str
    encoding: _tts_pb2.AudioEncoding
    def __init__(self, id: _Optional[str] = ..., encoding: _Optional[_Union[_tts_pb2.AudioEncoding, str]] = ...) -> None: ...

class JobAudioChunk(_message.Message):
    __slots__ = ("audio", "encoding", "sample_rate_hz")
    AUDIO_FIELD_NUMBER: _ClassVar[int]
    ENCODING_FIELD_NUMBER: _ClassVar[int]
    SAMPLE_RATE_HZ_FIELD_NUMBER: _ClassVar[int]
    audio: bytes
    encoding: _tts_pb2.AudioEncoding
    sample_rate_hz: int
    def __init__(self, audio: _Optional[bytes] = ..., encoding: _Optional[_Union[_tts_pb2.AudioEncoding, str]] = ..., sample_rate_hz: _Optional[int] = ...) -> None: ...
