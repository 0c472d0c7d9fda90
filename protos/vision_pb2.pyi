from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class CaptureRequest(_message.Message):
    __slots__ = ("request_id", "turn_id", "asked_ms")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TURN_ID_FIELD_NUMBER: _ClassVar[int]
    ASKED_MS_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    turn_id: str
    asked_ms: int
    def __init__(self, request_id: _Optional[str] = ..., turn_id: _Optional[str] = ..., asked_ms: _Optional[int] = ...) -> None: ...

class PhotoChunk(_message.Message):
    __slots__ = ("photo_id", "index", "total", "data")
    PHOTO_ID_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    photo_id: str
    index: int
    total: int
    data: bytes
    def __init__(self, photo_id: _Optional[str] = ..., index: _Optional[int] = ..., total: _Optional[int] = ..., data: _Optional[bytes] = ...) -> None: ...

class Photo(_message.Message):
    __slots__ = ("photo_id", "turn_id", "taken_ms", "width", "height", "chunks", "size", "sha256", "camera", "error")
    PHOTO_ID_FIELD_NUMBER: _ClassVar[int]
    TURN_ID_FIELD_NUMBER: _ClassVar[int]
    TAKEN_MS_FIELD_NUMBER: _ClassVar[int]
    WIDTH_FIELD_NUMBER: _ClassVar[int]
    HEIGHT_FIELD_NUMBER: _ClassVar[int]
    CHUNKS_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    CAMERA_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    photo_id: str
    turn_id: str
    taken_ms: int
    width: int
    height: int
    chunks: int
    size: int
    sha256: bytes
    camera: str
    error: str
    def __init__(self, photo_id: _Optional[str] = ..., turn_id: _Optional[str] = ..., taken_ms: _Optional[int] = ..., width: _Optional[int] = ..., height: _Optional[int] = ..., chunks: _Optional[int] = ..., size: _Optional[int] = ..., sha256: _Optional[bytes] = ..., camera: _Optional[str] = ..., error: _Optional[str] = ...) -> None: ...
