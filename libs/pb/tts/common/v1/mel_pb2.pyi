from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class MelDType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MEL_DTYPE_UNSPECIFIED: _ClassVar[MelDType]
    MEL_DTYPE_FLOAT32: _ClassVar[MelDType]
    MEL_DTYPE_FLOAT16: _ClassVar[MelDType]
MEL_DTYPE_UNSPECIFIED: MelDType
MEL_DTYPE_FLOAT32: MelDType
MEL_DTYPE_FLOAT16: MelDType

class PhonemeAlignment(_message.Message):
    __slots__ = ("phoneme_frames",)
    PHONEME_FRAMES_FIELD_NUMBER: _ClassVar[int]
    phoneme_frames: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, phoneme_frames: _Optional[_Iterable[int]] = ...) -> None: ...

class MelSlice(_message.Message):
    __slots__ = ("utterance_id", "sentence_index", "slice_index", "first_frame", "frame_count", "n_mels", "dtype", "frames", "is_last", "sentence_frame_count", "alignment")
    UTTERANCE_ID_FIELD_NUMBER: _ClassVar[int]
    SENTENCE_INDEX_FIELD_NUMBER: _ClassVar[int]
    SLICE_INDEX_FIELD_NUMBER: _ClassVar[int]
    FIRST_FRAME_FIELD_NUMBER: _ClassVar[int]
    FRAME_COUNT_FIELD_NUMBER: _ClassVar[int]
    N_MELS_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    FRAMES_FIELD_NUMBER: _ClassVar[int]
    IS_LAST_FIELD_NUMBER: _ClassVar[int]
    SENTENCE_FRAME_COUNT_FIELD_NUMBER: _ClassVar[int]
    ALIGNMENT_FIELD_NUMBER: _ClassVar[int]
    utterance_id: str
    sentence_index: int
    slice_index: int
    first_frame: int
    frame_count: int
    n_mels: int
    dtype: MelDType
    frames: bytes
    is_last: bool
    sentence_frame_count: int
    alignment: PhonemeAlignment
    def __init__(self, utterance_id: _Optional[str] = ..., sentence_index: _Optional[int] = ..., slice_index: _Optional[int] = ..., first_frame: _Optional[int] = ..., frame_count: _Optional[int] = ..., n_mels: _Optional[int] = ..., dtype: _Optional[_Union[MelDType, str]] = ..., frames: _Optional[bytes] = ..., is_last: _Optional[bool] = ..., sentence_frame_count: _Optional[int] = ..., alignment: _Optional[_Union[PhonemeAlignment, _Mapping]] = ...) -> None: ...

class MelSlices(_message.Message):
    __slots__ = ("slices",)
    SLICES_FIELD_NUMBER: _ClassVar[int]
    slices: _containers.RepeatedCompositeFieldContainer[MelSlice]
    def __init__(self, slices: _Optional[_Iterable[_Union[MelSlice, _Mapping]]] = ...) -> None: ...
