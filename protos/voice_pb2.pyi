from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Verdict(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    VERDICT_UNSPECIFIED: _ClassVar[Verdict]
    VERIFIED: _ClassVar[Verdict]
    UNCERTAIN: _ClassVar[Verdict]
    UNMATCHED: _ClassVar[Verdict]
    UNENROLLED: _ClassVar[Verdict]

class Window(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    WINDOW_UNSPECIFIED: _ClassVar[Window]
    WAKE: _ClassVar[Window]
    FOLLOW_UP: _ClassVar[Window]
VERDICT_UNSPECIFIED: Verdict
VERIFIED: Verdict
UNCERTAIN: Verdict
UNMATCHED: Verdict
UNENROLLED: Verdict
WINDOW_UNSPECIFIED: Window
WAKE: Window
FOLLOW_UP: Window

class VoiceInfo(_message.Message):
    __slots__ = ("verdict", "score", "embedding", "voiced_ms", "quality", "level_dbfs", "window", "wake_id", "wake_score", "call_id", "audio_chunks", "audio_bytes", "audio_sha256", "audio_format", "sample_rate", "speaker_model", "preview_samples")
    VERDICT_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    EMBEDDING_FIELD_NUMBER: _ClassVar[int]
    VOICED_MS_FIELD_NUMBER: _ClassVar[int]
    QUALITY_FIELD_NUMBER: _ClassVar[int]
    LEVEL_DBFS_FIELD_NUMBER: _ClassVar[int]
    WINDOW_FIELD_NUMBER: _ClassVar[int]
    WAKE_ID_FIELD_NUMBER: _ClassVar[int]
    WAKE_SCORE_FIELD_NUMBER: _ClassVar[int]
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    AUDIO_CHUNKS_FIELD_NUMBER: _ClassVar[int]
    AUDIO_BYTES_FIELD_NUMBER: _ClassVar[int]
    AUDIO_SHA256_FIELD_NUMBER: _ClassVar[int]
    AUDIO_FORMAT_FIELD_NUMBER: _ClassVar[int]
    SAMPLE_RATE_FIELD_NUMBER: _ClassVar[int]
    SPEAKER_MODEL_FIELD_NUMBER: _ClassVar[int]
    PREVIEW_SAMPLES_FIELD_NUMBER: _ClassVar[int]
    verdict: Verdict
    score: float
    embedding: bytes
    voiced_ms: int
    quality: float
    level_dbfs: float
    window: Window
    wake_id: str
    wake_score: float
    call_id: str
    audio_chunks: int
    audio_bytes: int
    audio_sha256: bytes
    audio_format: str
    sample_rate: int
    speaker_model: str
    preview_samples: int
    def __init__(self, verdict: _Optional[_Union[Verdict, str]] = ..., score: _Optional[float] = ..., embedding: _Optional[bytes] = ..., voiced_ms: _Optional[int] = ..., quality: _Optional[float] = ..., level_dbfs: _Optional[float] = ..., window: _Optional[_Union[Window, str]] = ..., wake_id: _Optional[str] = ..., wake_score: _Optional[float] = ..., call_id: _Optional[str] = ..., audio_chunks: _Optional[int] = ..., audio_bytes: _Optional[int] = ..., audio_sha256: _Optional[bytes] = ..., audio_format: _Optional[str] = ..., sample_rate: _Optional[int] = ..., speaker_model: _Optional[str] = ..., preview_samples: _Optional[int] = ...) -> None: ...

class AudioChunk(_message.Message):
    __slots__ = ("utterance_id", "index", "total", "data")
    UTTERANCE_ID_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    utterance_id: str
    index: int
    total: int
    data: bytes
    def __init__(self, utterance_id: _Optional[str] = ..., index: _Optional[int] = ..., total: _Optional[int] = ..., data: _Optional[bytes] = ...) -> None: ...

class AudioPreview(_message.Message):
    __slots__ = ("utterance_id", "samples", "data")
    UTTERANCE_ID_FIELD_NUMBER: _ClassVar[int]
    SAMPLES_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    utterance_id: str
    samples: int
    data: bytes
    def __init__(self, utterance_id: _Optional[str] = ..., samples: _Optional[int] = ..., data: _Optional[bytes] = ...) -> None: ...

class WakeClaim(_message.Message):
    __slots__ = ("wake_id", "heard_ms", "wake_score", "level_dbfs")
    WAKE_ID_FIELD_NUMBER: _ClassVar[int]
    HEARD_MS_FIELD_NUMBER: _ClassVar[int]
    WAKE_SCORE_FIELD_NUMBER: _ClassVar[int]
    LEVEL_DBFS_FIELD_NUMBER: _ClassVar[int]
    wake_id: str
    heard_ms: int
    wake_score: float
    level_dbfs: float
    def __init__(self, wake_id: _Optional[str] = ..., heard_ms: _Optional[int] = ..., wake_score: _Optional[float] = ..., level_dbfs: _Optional[float] = ...) -> None: ...

class WakeDecision(_message.Message):
    __slots__ = ("wake_id", "answer", "winner")
    WAKE_ID_FIELD_NUMBER: _ClassVar[int]
    ANSWER_FIELD_NUMBER: _ClassVar[int]
    WINNER_FIELD_NUMBER: _ClassVar[int]
    wake_id: str
    answer: bool
    winner: str
    def __init__(self, wake_id: _Optional[str] = ..., answer: _Optional[bool] = ..., winner: _Optional[str] = ...) -> None: ...

class EnrolSegment(_message.Message):
    __slots__ = ("embedding", "voiced_ms", "quality", "label")
    EMBEDDING_FIELD_NUMBER: _ClassVar[int]
    VOICED_MS_FIELD_NUMBER: _ClassVar[int]
    QUALITY_FIELD_NUMBER: _ClassVar[int]
    LABEL_FIELD_NUMBER: _ClassVar[int]
    embedding: bytes
    voiced_ms: int
    quality: float
    label: str
    def __init__(self, embedding: _Optional[bytes] = ..., voiced_ms: _Optional[int] = ..., quality: _Optional[float] = ..., label: _Optional[str] = ...) -> None: ...

class VoiceEnrol(_message.Message):
    __slots__ = ("channel", "segments", "speaker_model", "replace")
    CHANNEL_FIELD_NUMBER: _ClassVar[int]
    SEGMENTS_FIELD_NUMBER: _ClassVar[int]
    SPEAKER_MODEL_FIELD_NUMBER: _ClassVar[int]
    REPLACE_FIELD_NUMBER: _ClassVar[int]
    channel: str
    segments: _containers.RepeatedCompositeFieldContainer[EnrolSegment]
    speaker_model: str
    replace: bool
    def __init__(self, channel: _Optional[str] = ..., segments: _Optional[_Iterable[_Union[EnrolSegment, _Mapping]]] = ..., speaker_model: _Optional[str] = ..., replace: _Optional[bool] = ...) -> None: ...

class VoiceEnrolResult(_message.Message):
    __slots__ = ("ok", "error_key", "error_text", "samples", "line", "loo_scores")
    OK_FIELD_NUMBER: _ClassVar[int]
    ERROR_KEY_FIELD_NUMBER: _ClassVar[int]
    ERROR_TEXT_FIELD_NUMBER: _ClassVar[int]
    SAMPLES_FIELD_NUMBER: _ClassVar[int]
    LINE_FIELD_NUMBER: _ClassVar[int]
    LOO_SCORES_FIELD_NUMBER: _ClassVar[int]
    ok: bool
    error_key: str
    error_text: str
    samples: int
    line: float
    loo_scores: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, ok: _Optional[bool] = ..., error_key: _Optional[str] = ..., error_text: _Optional[str] = ..., samples: _Optional[int] = ..., line: _Optional[float] = ..., loo_scores: _Optional[_Iterable[float]] = ...) -> None: ...

class Voiceprint(_message.Message):
    __slots__ = ("channel", "centroid", "line", "samples", "version", "speaker_model")
    CHANNEL_FIELD_NUMBER: _ClassVar[int]
    CENTROID_FIELD_NUMBER: _ClassVar[int]
    LINE_FIELD_NUMBER: _ClassVar[int]
    SAMPLES_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    SPEAKER_MODEL_FIELD_NUMBER: _ClassVar[int]
    channel: str
    centroid: bytes
    line: float
    samples: int
    version: int
    speaker_model: str
    def __init__(self, channel: _Optional[str] = ..., centroid: _Optional[bytes] = ..., line: _Optional[float] = ..., samples: _Optional[int] = ..., version: _Optional[int] = ..., speaker_model: _Optional[str] = ...) -> None: ...

class TrustWindow(_message.Message):
    __slots__ = ("opened_ms", "seconds", "method")
    OPENED_MS_FIELD_NUMBER: _ClassVar[int]
    SECONDS_FIELD_NUMBER: _ClassVar[int]
    METHOD_FIELD_NUMBER: _ClassVar[int]
    opened_ms: int
    seconds: int
    method: str
    def __init__(self, opened_ms: _Optional[int] = ..., seconds: _Optional[int] = ..., method: _Optional[str] = ...) -> None: ...
