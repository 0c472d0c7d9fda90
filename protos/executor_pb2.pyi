from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class ExecRequest(_message.Message):
    __slots__ = ("request_id", "op", "command", "args", "path", "timeout_s", "task_id", "call_id", "worldline_id")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    OP_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    ARGS_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_S_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    WORLDLINE_ID_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    op: str
    command: str
    args: _containers.RepeatedScalarFieldContainer[str]
    path: str
    timeout_s: int
    task_id: str
    call_id: str
    worldline_id: str
    def __init__(self, request_id: _Optional[str] = ..., op: _Optional[str] = ..., command: _Optional[str] = ..., args: _Optional[_Iterable[str]] = ..., path: _Optional[str] = ..., timeout_s: _Optional[int] = ..., task_id: _Optional[str] = ..., call_id: _Optional[str] = ..., worldline_id: _Optional[str] = ...) -> None: ...

class ExecResult(_message.Message):
    __slots__ = ("request_id", "status", "error_code", "error", "exit_code", "stdout", "stderr", "content", "truncated", "size", "worldline_id", "worldline_root", "added", "changed", "removed", "diff", "generation", "commit_id")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    STDOUT_FIELD_NUMBER: _ClassVar[int]
    STDERR_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    WORLDLINE_ID_FIELD_NUMBER: _ClassVar[int]
    WORLDLINE_ROOT_FIELD_NUMBER: _ClassVar[int]
    ADDED_FIELD_NUMBER: _ClassVar[int]
    CHANGED_FIELD_NUMBER: _ClassVar[int]
    REMOVED_FIELD_NUMBER: _ClassVar[int]
    DIFF_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    COMMIT_ID_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    status: str
    error_code: str
    error: str
    exit_code: int
    stdout: bytes
    stderr: bytes
    content: bytes
    truncated: bool
    size: int
    worldline_id: str
    worldline_root: str
    added: _containers.RepeatedScalarFieldContainer[str]
    changed: _containers.RepeatedScalarFieldContainer[str]
    removed: _containers.RepeatedScalarFieldContainer[str]
    diff: bytes
    generation: int
    commit_id: str
    def __init__(self, request_id: _Optional[str] = ..., status: _Optional[str] = ..., error_code: _Optional[str] = ..., error: _Optional[str] = ..., exit_code: _Optional[int] = ..., stdout: _Optional[bytes] = ..., stderr: _Optional[bytes] = ..., content: _Optional[bytes] = ..., truncated: _Optional[bool] = ..., size: _Optional[int] = ..., worldline_id: _Optional[str] = ..., worldline_root: _Optional[str] = ..., added: _Optional[_Iterable[str]] = ..., changed: _Optional[_Iterable[str]] = ..., removed: _Optional[_Iterable[str]] = ..., diff: _Optional[bytes] = ..., generation: _Optional[int] = ..., commit_id: _Optional[str] = ...) -> None: ...
