from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class AudioEncoding(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    AUDIO_ENCODING_UNSPECIFIED: _ClassVar[AudioEncoding]
    LINEAR_PCM: _ClassVar[AudioEncoding]
    FLOAT_PCM: _ClassVar[AudioEncoding]
    OGG_OPUS: _ClassVar[AudioEncoding]
    MP3: _ClassVar[AudioEncoding]
    FLAC: _ClassVar[AudioEncoding]
    WAV: _ClassVar[AudioEncoding]
    MULAW: _ClassVar[AudioEncoding]
    ALAW: _ClassVar[AudioEncoding]
    AAC: _ClassVar[AudioEncoding]

class Tier(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TIER_UNSPECIFIED: _ClassVar[Tier]
    TIER_QUALITY: _ClassVar[Tier]
    TIER_FAST: _ClassVar[Tier]
    TIER_AUTO: _ClassVar[Tier]
AUDIO_ENCODING_UNSPECIFIED: AudioEncoding
LINEAR_PCM: AudioEncoding
FLOAT_PCM: AudioEncoding
OGG_OPUS: AudioEncoding
MP3: AudioEncoding
FLAC: AudioEncoding
WAV: AudioEncoding
MULAW: AudioEncoding
ALAW: AudioEncoding
AAC: AudioEncoding
TIER_UNSPECIFIED: Tier
TIER_QUALITY: Tier
TIER_FAST: Tier
TIER_AUTO: Tier

class SynthesizeRequest(_message.Message):
    __slots__ = ("text", "voice", "speed", "encoding", "sample_rate_hz", "speaker_id", "request_id", "include_alignment", "lexicon", "ssml", "resume_token", "frame_ms", "speaker", "tier")
    class LexiconEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    TEXT_FIELD_NUMBER: _ClassVar[int]
    VOICE_FIELD_NUMBER: _ClassVar[int]
    SPEED_FIELD_NUMBER: _ClassVar[int]
    ENCODING_FIELD_NUMBER: _ClassVar[int]
    SAMPLE_RATE_HZ_FIELD_NUMBER: _ClassVar[int]
    SPEAKER_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_ALIGNMENT_FIELD_NUMBER: _ClassVar[int]
    LEXICON_FIELD_NUMBER: _ClassVar[int]
    SSML_FIELD_NUMBER: _ClassVar[int]
    RESUME_TOKEN_FIELD_NUMBER: _ClassVar[int]
    FRAME_MS_FIELD_NUMBER: _ClassVar[int]
    SPEAKER_FIELD_NUMBER: _ClassVar[int]
    TIER_FIELD_NUMBER: _ClassVar[int]
    text: str
    voice: str
    speed: float
    encoding: AudioEncoding
    sample_rate_hz: int
    speaker_id: int
    request_id: str
    include_alignment: bool
    lexicon: _containers.ScalarMap[str, str]
    ssml: bool
    resume_token: str
    frame_ms: int
    speaker: str
    tier: Tier
    def __init__(self, text: _Optional[str] = ..., voice: _Optional[str] = ..., speed: _Optional[float] = ..., encoding: _Optional[_Union[AudioEncoding, str]] = ..., sample_rate_hz: _Optional[int] = ..., speaker_id: _Optional[int] = ..., request_id: _Optional[str] = ..., include_alignment: _Optional[bool] = ..., lexicon: _Optional[_Mapping[str, str]] = ..., ssml: _Optional[bool] = ..., resume_token: _Optional[str] = ..., frame_ms: _Optional[int] = ..., speaker: _Optional[str] = ..., tier: _Optional[_Union[Tier, str]] = ...) -> None: ...

class StreamingSynthesizeConfig(_message.Message):
    __slots__ = ("voice", "speed", "encoding", "sample_rate_hz", "speaker_id", "request_id", "include_alignment", "lexicon", "resume_token", "frame_ms", "speaker", "tier")
    class LexiconEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    VOICE_FIELD_NUMBER: _ClassVar[int]
    SPEED_FIELD_NUMBER: _ClassVar[int]
    ENCODING_FIELD_NUMBER: _ClassVar[int]
    SAMPLE_RATE_HZ_FIELD_NUMBER: _ClassVar[int]
    SPEAKER_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_ALIGNMENT_FIELD_NUMBER: _ClassVar[int]
    LEXICON_FIELD_NUMBER: _ClassVar[int]
    RESUME_TOKEN_FIELD_NUMBER: _ClassVar[int]
    FRAME_MS_FIELD_NUMBER: _ClassVar[int]
    SPEAKER_FIELD_NUMBER: _ClassVar[int]
    TIER_FIELD_NUMBER: _ClassVar[int]
    voice: str
    speed: float
    encoding: AudioEncoding
    sample_rate_hz: int
    speaker_id: int
    request_id: str
    include_alignment: bool
    lexicon: _containers.ScalarMap[str, str]
    resume_token: str
    frame_ms: int
    speaker: str
    tier: Tier
    def __init__(self, voice: _Optional[str] = ..., speed: _Optional[float] = ..., encoding: _Optional[_Union[AudioEncoding, str]] = ..., sample_rate_hz: _Optional[int] = ..., speaker_id: _Optional[int] = ..., request_id: _Optional[str] = ..., include_alignment: _Optional[bool] = ..., lexicon: _Optional[_Mapping[str, str]] = ..., resume_token: _Optional[str] = ..., frame_ms: _Optional[int] = ..., speaker: _Optional[str] = ..., tier: _Optional[_Union[Tier, str]] = ...) -> None: ...

class StreamingSynthesizeRequest(_message.Message):
    __slots__ = ("config", "text")
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    config: StreamingSynthesizeConfig
    text: str
    def __init__(self, config: _Optional[_Union[StreamingSynthesizeConfig, _Mapping]] = ..., text: _Optional[str] = ...) -> None: ...

class SentenceInfo(_message.Message):
    __slots__ = ("index", "text", "phonemes", "audio_offset_s", "audio_duration_s", "phoneme_frames", "frame_duration_s", "words", "marks", "pause_before_s", "pause_after_s", "tier")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    PHONEMES_FIELD_NUMBER: _ClassVar[int]
    AUDIO_OFFSET_S_FIELD_NUMBER: _ClassVar[int]
    AUDIO_DURATION_S_FIELD_NUMBER: _ClassVar[int]
    PHONEME_FRAMES_FIELD_NUMBER: _ClassVar[int]
    FRAME_DURATION_S_FIELD_NUMBER: _ClassVar[int]
    WORDS_FIELD_NUMBER: _ClassVar[int]
    MARKS_FIELD_NUMBER: _ClassVar[int]
    PAUSE_BEFORE_S_FIELD_NUMBER: _ClassVar[int]
    PAUSE_AFTER_S_FIELD_NUMBER: _ClassVar[int]
    TIER_FIELD_NUMBER: _ClassVar[int]
    index: int
    text: str
    phonemes: str
    audio_offset_s: float
    audio_duration_s: float
    phoneme_frames: _containers.RepeatedScalarFieldContainer[int]
    frame_duration_s: float
    words: _containers.RepeatedCompositeFieldContainer[WordInfo]
    marks: _containers.RepeatedCompositeFieldContainer[MarkInfo]
    pause_before_s: float
    pause_after_s: float
    tier: Tier
    def __init__(self, index: _Optional[int] = ..., text: _Optional[str] = ..., phonemes: _Optional[str] = ..., audio_offset_s: _Optional[float] = ..., audio_duration_s: _Optional[float] = ..., phoneme_frames: _Optional[_Iterable[int]] = ..., frame_duration_s: _Optional[float] = ..., words: _Optional[_Iterable[_Union[WordInfo, _Mapping]]] = ..., marks: _Optional[_Iterable[_Union[MarkInfo, _Mapping]]] = ..., pause_before_s: _Optional[float] = ..., pause_after_s: _Optional[float] = ..., tier: _Optional[_Union[Tier, str]] = ...) -> None: ...

class MarkInfo(_message.Message):
    __slots__ = ("name", "time_s")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TIME_S_FIELD_NUMBER: _ClassVar[int]
    name: str
    time_s: float
    def __init__(self, name: _Optional[str] = ..., time_s: _Optional[float] = ...) -> None: ...

class WordInfo(_message.Message):
    __slots__ = ("text", "start_s", "end_s")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    START_S_FIELD_NUMBER: _ClassVar[int]
    END_S_FIELD_NUMBER: _ClassVar[int]
    text: str
    start_s: float
    end_s: float
    def __init__(self, text: _Optional[str] = ..., start_s: _Optional[float] = ..., end_s: _Optional[float] = ...) -> None: ...

class SynthesizeResponse(_message.Message):
    __slots__ = ("audio", "sample_rate_hz", "encoding", "request_id", "sentence_index", "audio_offset_s", "audio_duration_s", "sentence", "sentence_end", "resume_point")
    AUDIO_FIELD_NUMBER: _ClassVar[int]
    SAMPLE_RATE_HZ_FIELD_NUMBER: _ClassVar[int]
    ENCODING_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    SENTENCE_INDEX_FIELD_NUMBER: _ClassVar[int]
    AUDIO_OFFSET_S_FIELD_NUMBER: _ClassVar[int]
    AUDIO_DURATION_S_FIELD_NUMBER: _ClassVar[int]
    SENTENCE_FIELD_NUMBER: _ClassVar[int]
    SENTENCE_END_FIELD_NUMBER: _ClassVar[int]
    RESUME_POINT_FIELD_NUMBER: _ClassVar[int]
    audio: bytes
    sample_rate_hz: int
    encoding: AudioEncoding
    request_id: str
    sentence_index: int
    audio_offset_s: float
    audio_duration_s: float
    sentence: SentenceInfo
    sentence_end: bool
    resume_point: ResumePoint
    def __init__(self, audio: _Optional[bytes] = ..., sample_rate_hz: _Optional[int] = ..., encoding: _Optional[_Union[AudioEncoding, str]] = ..., request_id: _Optional[str] = ..., sentence_index: _Optional[int] = ..., audio_offset_s: _Optional[float] = ..., audio_duration_s: _Optional[float] = ..., sentence: _Optional[_Union[SentenceInfo, _Mapping]] = ..., sentence_end: _Optional[bool] = ..., resume_point: _Optional[_Union[ResumePoint, _Mapping]] = ...) -> None: ...

class ResumePoint(_message.Message):
    __slots__ = ("sentence_index", "sentence_samples", "stream_samples", "token")
    SENTENCE_INDEX_FIELD_NUMBER: _ClassVar[int]
    SENTENCE_SAMPLES_FIELD_NUMBER: _ClassVar[int]
    STREAM_SAMPLES_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    sentence_index: int
    sentence_samples: int
    stream_samples: int
    token: str
    def __init__(self, sentence_index: _Optional[int] = ..., sentence_samples: _Optional[int] = ..., stream_samples: _Optional[int] = ..., token: _Optional[str] = ...) -> None: ...

class ListVoicesRequest(_message.Message):
    __slots__ = ("language_code",)
    LANGUAGE_CODE_FIELD_NUMBER: _ClassVar[int]
    language_code: str
    def __init__(self, language_code: _Optional[str] = ...) -> None: ...

class Voice(_message.Message):
    __slots__ = ("name", "language_code", "natural_sample_rate_hz", "num_speakers", "is_default", "quality", "speakers", "tiers")
    class SpeakersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    LANGUAGE_CODE_FIELD_NUMBER: _ClassVar[int]
    NATURAL_SAMPLE_RATE_HZ_FIELD_NUMBER: _ClassVar[int]
    NUM_SPEAKERS_FIELD_NUMBER: _ClassVar[int]
    IS_DEFAULT_FIELD_NUMBER: _ClassVar[int]
    QUALITY_FIELD_NUMBER: _ClassVar[int]
    SPEAKERS_FIELD_NUMBER: _ClassVar[int]
    TIERS_FIELD_NUMBER: _ClassVar[int]
    name: str
    language_code: str
    natural_sample_rate_hz: int
    num_speakers: int
    is_default: bool
    quality: str
    speakers: _containers.ScalarMap[str, int]
    tiers: _containers.RepeatedScalarFieldContainer[Tier]
    def __init__(self, name: _Optional[str] = ..., language_code: _Optional[str] = ..., natural_sample_rate_hz: _Optional[int] = ..., num_speakers: _Optional[int] = ..., is_default: _Optional[bool] = ..., quality: _Optional[str] = ..., speakers: _Optional[_Mapping[str, int]] = ..., tiers: _Optional[_Iterable[_Union[Tier, str]]] = ...) -> None: ...

class ListVoicesResponse(_message.Message):
    __slots__ = ("voices",)
    VOICES_FIELD_NUMBER: _ClassVar[int]
    voices: _containers.RepeatedCompositeFieldContainer[Voice]
    def __init__(self, voices: _Optional[_Iterable[_Union[Voice, _Mapping]]] = ...) -> None: ...
