from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class DocUpdate(_message.Message):
    __slots__ = ("doc", "blob", "snapshot")
    DOC_FIELD_NUMBER: _ClassVar[int]
    BLOB_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    doc: str
    blob: bytes
    snapshot: bool
    def __init__(self, doc: _Optional[str] = ..., blob: _Optional[bytes] = ..., snapshot: _Optional[bool] = ...) -> None: ...

class DocState(_message.Message):
    __slots__ = ("doc", "version")
    DOC_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    doc: str
    version: bytes
    def __init__(self, doc: _Optional[str] = ..., version: _Optional[bytes] = ...) -> None: ...

class SyncUpdate(_message.Message):
    __slots__ = ("updates",)
    UPDATES_FIELD_NUMBER: _ClassVar[int]
    updates: _containers.RepeatedCompositeFieldContainer[DocUpdate]
    def __init__(self, updates: _Optional[_Iterable[_Union[DocUpdate, _Mapping]]] = ...) -> None: ...

class SyncRequest(_message.Message):
    __slots__ = ("have", "push", "list_docs")
    HAVE_FIELD_NUMBER: _ClassVar[int]
    PUSH_FIELD_NUMBER: _ClassVar[int]
    LIST_DOCS_FIELD_NUMBER: _ClassVar[int]
    have: _containers.RepeatedCompositeFieldContainer[DocState]
    push: _containers.RepeatedCompositeFieldContainer[DocUpdate]
    list_docs: bool
    def __init__(self, have: _Optional[_Iterable[_Union[DocState, _Mapping]]] = ..., push: _Optional[_Iterable[_Union[DocUpdate, _Mapping]]] = ..., list_docs: _Optional[bool] = ...) -> None: ...

class SyncResponse(_message.Message):
    __slots__ = ("updates", "have", "applied", "refused")
    UPDATES_FIELD_NUMBER: _ClassVar[int]
    HAVE_FIELD_NUMBER: _ClassVar[int]
    APPLIED_FIELD_NUMBER: _ClassVar[int]
    REFUSED_FIELD_NUMBER: _ClassVar[int]
    updates: _containers.RepeatedCompositeFieldContainer[DocUpdate]
    have: _containers.RepeatedCompositeFieldContainer[DocState]
    applied: int
    refused: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, updates: _Optional[_Iterable[_Union[DocUpdate, _Mapping]]] = ..., have: _Optional[_Iterable[_Union[DocState, _Mapping]]] = ..., applied: _Optional[int] = ..., refused: _Optional[_Iterable[str]] = ...) -> None: ...
