from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class GetLoadRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class VocoderPacing(_message.Message):
    __slots__ = ("lag_frames", "first_step_frames", "step_growth", "max_step_frames", "first_steps")
    LAG_FRAMES_FIELD_NUMBER: _ClassVar[int]
    FIRST_STEP_FRAMES_FIELD_NUMBER: _ClassVar[int]
    STEP_GROWTH_FIELD_NUMBER: _ClassVar[int]
    MAX_STEP_FRAMES_FIELD_NUMBER: _ClassVar[int]
    FIRST_STEPS_FIELD_NUMBER: _ClassVar[int]
    lag_frames: int
    first_step_frames: int
    step_growth: float
    max_step_frames: int
    first_steps: int
    def __init__(self, lag_frames: _Optional[int] = ..., first_step_frames: _Optional[int] = ..., step_growth: _Optional[float] = ..., max_step_frames: _Optional[int] = ..., first_steps: _Optional[int] = ...) -> None: ...

class WorkerLoad(_message.Message):
    __slots__ = ("capacity_streams", "open_streams", "cpu_s_per_audio_s", "budget_cores", "step_lead_ms", "plan_fixed_ms", "plan_per_id_ms", "pacing", "queued_cpu_s", "first_step_ms", "open_streams_by_gateway", "voices", "loaded_voices", "fast_tier_cost", "piece_lead_ms", "stream_limit")
    class OpenStreamsByGatewayEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    CAPACITY_STREAMS_FIELD_NUMBER: _ClassVar[int]
    OPEN_STREAMS_FIELD_NUMBER: _ClassVar[int]
    CPU_S_PER_AUDIO_S_FIELD_NUMBER: _ClassVar[int]
    BUDGET_CORES_FIELD_NUMBER: _ClassVar[int]
    STEP_LEAD_MS_FIELD_NUMBER: _ClassVar[int]
    PLAN_FIXED_MS_FIELD_NUMBER: _ClassVar[int]
    PLAN_PER_ID_MS_FIELD_NUMBER: _ClassVar[int]
    PACING_FIELD_NUMBER: _ClassVar[int]
    QUEUED_CPU_S_FIELD_NUMBER: _ClassVar[int]
    FIRST_STEP_MS_FIELD_NUMBER: _ClassVar[int]
    OPEN_STREAMS_BY_GATEWAY_FIELD_NUMBER: _ClassVar[int]
    VOICES_FIELD_NUMBER: _ClassVar[int]
    LOADED_VOICES_FIELD_NUMBER: _ClassVar[int]
    FAST_TIER_COST_FIELD_NUMBER: _ClassVar[int]
    PIECE_LEAD_MS_FIELD_NUMBER: _ClassVar[int]
    STREAM_LIMIT_FIELD_NUMBER: _ClassVar[int]
    capacity_streams: float
    open_streams: int
    cpu_s_per_audio_s: float
    budget_cores: float
    step_lead_ms: float
    plan_fixed_ms: float
    plan_per_id_ms: float
    pacing: VocoderPacing
    queued_cpu_s: float
    first_step_ms: float
    open_streams_by_gateway: _containers.ScalarMap[str, int]
    voices: _containers.RepeatedScalarFieldContainer[str]
    loaded_voices: _containers.RepeatedScalarFieldContainer[str]
    fast_tier_cost: float
    piece_lead_ms: float
    stream_limit: int
    def __init__(self, capacity_streams: _Optional[float] = ..., open_streams: _Optional[int] = ..., cpu_s_per_audio_s: _Optional[float] = ..., budget_cores: _Optional[float] = ..., step_lead_ms: _Optional[float] = ..., plan_fixed_ms: _Optional[float] = ..., plan_per_id_ms: _Optional[float] = ..., pacing: _Optional[_Union[VocoderPacing, _Mapping]] = ..., queued_cpu_s: _Optional[float] = ..., first_step_ms: _Optional[float] = ..., open_streams_by_gateway: _Optional[_Mapping[str, int]] = ..., voices: _Optional[_Iterable[str]] = ..., loaded_voices: _Optional[_Iterable[str]] = ..., fast_tier_cost: _Optional[float] = ..., piece_lead_ms: _Optional[float] = ..., stream_limit: _Optional[int] = ...) -> None: ...
