from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Decision(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DECISION_UNSPECIFIED: _ClassVar[Decision]
    APPROVE: _ClassVar[Decision]
    DENY: _ClassVar[Decision]

class CardState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CARD_STATE_UNSPECIFIED: _ClassVar[CardState]
    PENDING: _ClassVar[CardState]
    APPROVED: _ClassVar[CardState]
    EXECUTED: _ClassVar[CardState]
    DENIED: _ClassVar[CardState]
    EXPIRED: _ClassVar[CardState]
    VOIDED: _ClassVar[CardState]
    REFUSED: _ClassVar[CardState]
    SYNC_DONE: _ClassVar[CardState]
    LEASE_ACCEPTED: _ClassVar[CardState]
    OPTIONS_CHANGED: _ClassVar[CardState]
DECISION_UNSPECIFIED: Decision
APPROVE: Decision
DENY: Decision
CARD_STATE_UNSPECIFIED: CardState
PENDING: CardState
APPROVED: CardState
EXECUTED: CardState
DENIED: CardState
EXPIRED: CardState
VOIDED: CardState
REFUSED: CardState
SYNC_DONE: CardState
LEASE_ACCEPTED: CardState
OPTIONS_CHANGED: CardState

class ConfirmCard(_message.Message):
    __slots__ = ("card_id", "effect", "target", "title", "preview", "expires_ms", "nonce", "action_hash", "package", "tool", "created_ms", "short_form")
    CARD_ID_FIELD_NUMBER: _ClassVar[int]
    EFFECT_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    TITLE_FIELD_NUMBER: _ClassVar[int]
    PREVIEW_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_MS_FIELD_NUMBER: _ClassVar[int]
    NONCE_FIELD_NUMBER: _ClassVar[int]
    ACTION_HASH_FIELD_NUMBER: _ClassVar[int]
    PACKAGE_FIELD_NUMBER: _ClassVar[int]
    TOOL_FIELD_NUMBER: _ClassVar[int]
    CREATED_MS_FIELD_NUMBER: _ClassVar[int]
    SHORT_FORM_FIELD_NUMBER: _ClassVar[int]
    card_id: str
    effect: str
    target: str
    title: str
    preview: str
    expires_ms: int
    nonce: bytes
    action_hash: bytes
    package: str
    tool: str
    created_ms: int
    short_form: bool
    def __init__(self, card_id: _Optional[str] = ..., effect: _Optional[str] = ..., target: _Optional[str] = ..., title: _Optional[str] = ..., preview: _Optional[str] = ..., expires_ms: _Optional[int] = ..., nonce: _Optional[bytes] = ..., action_hash: _Optional[bytes] = ..., package: _Optional[str] = ..., tool: _Optional[str] = ..., created_ms: _Optional[int] = ..., short_form: _Optional[bool] = ...) -> None: ...

class ApprovalBody(_message.Message):
    __slots__ = ("card_id", "action_hash", "expires_ms", "nonce", "decision", "device_id", "signed_ms", "unlocked", "lock_sensor")
    CARD_ID_FIELD_NUMBER: _ClassVar[int]
    ACTION_HASH_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_MS_FIELD_NUMBER: _ClassVar[int]
    NONCE_FIELD_NUMBER: _ClassVar[int]
    DECISION_FIELD_NUMBER: _ClassVar[int]
    DEVICE_ID_FIELD_NUMBER: _ClassVar[int]
    SIGNED_MS_FIELD_NUMBER: _ClassVar[int]
    UNLOCKED_FIELD_NUMBER: _ClassVar[int]
    LOCK_SENSOR_FIELD_NUMBER: _ClassVar[int]
    card_id: str
    action_hash: bytes
    expires_ms: int
    nonce: bytes
    decision: Decision
    device_id: str
    signed_ms: int
    unlocked: bool
    lock_sensor: str
    def __init__(self, card_id: _Optional[str] = ..., action_hash: _Optional[bytes] = ..., expires_ms: _Optional[int] = ..., nonce: _Optional[bytes] = ..., decision: _Optional[_Union[Decision, str]] = ..., device_id: _Optional[str] = ..., signed_ms: _Optional[int] = ..., unlocked: _Optional[bool] = ..., lock_sensor: _Optional[str] = ...) -> None: ...

class UnlockLease(_message.Message):
    __slots__ = ("device_id", "unlocked_ms", "expires_ms", "lock_sensor", "signed_ms")
    DEVICE_ID_FIELD_NUMBER: _ClassVar[int]
    UNLOCKED_MS_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_MS_FIELD_NUMBER: _ClassVar[int]
    LOCK_SENSOR_FIELD_NUMBER: _ClassVar[int]
    SIGNED_MS_FIELD_NUMBER: _ClassVar[int]
    device_id: str
    unlocked_ms: int
    expires_ms: int
    lock_sensor: str
    signed_ms: int
    def __init__(self, device_id: _Optional[str] = ..., unlocked_ms: _Optional[int] = ..., expires_ms: _Optional[int] = ..., lock_sensor: _Optional[str] = ..., signed_ms: _Optional[int] = ...) -> None: ...

class Approval(_message.Message):
    __slots__ = ("body", "signature", "sync", "lease", "lease_signature", "options", "options_signature")
    BODY_FIELD_NUMBER: _ClassVar[int]
    SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    SYNC_FIELD_NUMBER: _ClassVar[int]
    LEASE_FIELD_NUMBER: _ClassVar[int]
    LEASE_SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    body: bytes
    signature: bytes
    sync: bool
    lease: bytes
    lease_signature: bytes
    options: bytes
    options_signature: bytes
    def __init__(self, body: _Optional[bytes] = ..., signature: _Optional[bytes] = ..., sync: _Optional[bool] = ..., lease: _Optional[bytes] = ..., lease_signature: _Optional[bytes] = ..., options: _Optional[bytes] = ..., options_signature: _Optional[bytes] = ...) -> None: ...

class CardUpdate(_message.Message):
    __slots__ = ("card_id", "state", "reason", "status", "summary", "at_ms")
    CARD_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    AT_MS_FIELD_NUMBER: _ClassVar[int]
    card_id: str
    state: CardState
    reason: str
    status: str
    summary: str
    at_ms: int
    def __init__(self, card_id: _Optional[str] = ..., state: _Optional[_Union[CardState, str]] = ..., reason: _Optional[str] = ..., status: _Optional[str] = ..., summary: _Optional[str] = ..., at_ms: _Optional[int] = ...) -> None: ...

class AuditHead(_message.Message):
    __slots__ = ("seq", "hash", "sig", "request")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    HASH_FIELD_NUMBER: _ClassVar[int]
    SIG_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    seq: int
    hash: str
    sig: bytes
    request: bool
    def __init__(self, seq: _Optional[int] = ..., hash: _Optional[str] = ..., sig: _Optional[bytes] = ..., request: _Optional[bool] = ...) -> None: ...
