from protos import voice_pb2 as _voice_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Kind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    KIND_UNSPECIFIED: _ClassVar[Kind]
    UTTERANCE: _ClassVar[Kind]
    REPLY: _ClassVar[Kind]
    DELIVERY_ACK: _ClassVar[Kind]
    PRESENCE: _ClassVar[Kind]
    REVOCATION: _ClassVar[Kind]
    SYNC_UPDATE: _ClassVar[Kind]
    SYNC_REQUEST: _ClassVar[Kind]
    SYNC_RESPONSE: _ClassVar[Kind]
    CARD: _ClassVar[Kind]
    APPROVAL: _ClassVar[Kind]
    CARD_UPDATE: _ClassVar[Kind]
    EXEC_REQUEST: _ClassVar[Kind]
    EXEC_RESULT: _ClassVar[Kind]
    AUDIO_CHUNK: _ClassVar[Kind]
    WAKE_CLAIM: _ClassVar[Kind]
    WAKE_DECISION: _ClassVar[Kind]
    VOICE_ENROL: _ClassVar[Kind]
    VOICE_ENROL_RESULT: _ClassVar[Kind]
    VOICEPRINT: _ClassVar[Kind]
    TRUST_WINDOW: _ClassVar[Kind]
    GROUP_KEY: _ClassVar[Kind]
    CAPTURE_REQUEST: _ClassVar[Kind]
    PHOTO_CHUNK: _ClassVar[Kind]
    PHOTO: _ClassVar[Kind]
    AUDIO_PREVIEW: _ClassVar[Kind]
    AUDIT_HEAD: _ClassVar[Kind]

class Seal(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SEAL_UNSPECIFIED: _ClassVar[Seal]
    BOX: _ClassVar[Seal]
    GROUP: _ClassVar[Seal]

class DeliveryState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DELIVERY_STATE_UNSPECIFIED: _ClassVar[DeliveryState]
    RENDERED: _ClassVar[DeliveryState]
    PLAYED: _ClassVar[DeliveryState]

class PresenceState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PRESENCE_STATE_UNSPECIFIED: _ClassVar[PresenceState]
    ONLINE: _ClassVar[PresenceState]
    OFFLINE: _ClassVar[PresenceState]
KIND_UNSPECIFIED: Kind
UTTERANCE: Kind
REPLY: Kind
DELIVERY_ACK: Kind
PRESENCE: Kind
REVOCATION: Kind
SYNC_UPDATE: Kind
SYNC_REQUEST: Kind
SYNC_RESPONSE: Kind
CARD: Kind
APPROVAL: Kind
CARD_UPDATE: Kind
EXEC_REQUEST: Kind
EXEC_RESULT: Kind
AUDIO_CHUNK: Kind
WAKE_CLAIM: Kind
WAKE_DECISION: Kind
VOICE_ENROL: Kind
VOICE_ENROL_RESULT: Kind
VOICEPRINT: Kind
TRUST_WINDOW: Kind
GROUP_KEY: Kind
CAPTURE_REQUEST: Kind
PHOTO_CHUNK: Kind
PHOTO: Kind
AUDIO_PREVIEW: Kind
AUDIT_HEAD: Kind
SEAL_UNSPECIFIED: Seal
BOX: Seal
GROUP: Seal
DELIVERY_STATE_UNSPECIFIED: DeliveryState
RENDERED: DeliveryState
PLAYED: DeliveryState
PRESENCE_STATE_UNSPECIFIED: PresenceState
ONLINE: PresenceState
OFFLINE: PresenceState

class EnvelopeBody(_message.Message):
    __slots__ = ("version", "home_id", "sender", "counter", "time_ms", "kind", "recipient", "trace_id", "seal", "sealed", "epoch")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    HOME_ID_FIELD_NUMBER: _ClassVar[int]
    SENDER_FIELD_NUMBER: _ClassVar[int]
    COUNTER_FIELD_NUMBER: _ClassVar[int]
    TIME_MS_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    RECIPIENT_FIELD_NUMBER: _ClassVar[int]
    TRACE_ID_FIELD_NUMBER: _ClassVar[int]
    SEAL_FIELD_NUMBER: _ClassVar[int]
    SEALED_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    version: int
    home_id: str
    sender: str
    counter: int
    time_ms: int
    kind: Kind
    recipient: str
    trace_id: str
    seal: Seal
    sealed: bytes
    epoch: int
    def __init__(self, version: _Optional[int] = ..., home_id: _Optional[str] = ..., sender: _Optional[str] = ..., counter: _Optional[int] = ..., time_ms: _Optional[int] = ..., kind: _Optional[_Union[Kind, str]] = ..., recipient: _Optional[str] = ..., trace_id: _Optional[str] = ..., seal: _Optional[_Union[Seal, str]] = ..., sealed: _Optional[bytes] = ..., epoch: _Optional[int] = ...) -> None: ...

class SignedEnvelope(_message.Message):
    __slots__ = ("body", "signature")
    BODY_FIELD_NUMBER: _ClassVar[int]
    SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    body: bytes
    signature: bytes
    def __init__(self, body: _Optional[bytes] = ..., signature: _Optional[bytes] = ...) -> None: ...

class Utterance(_message.Message):
    __slots__ = ("id", "text", "channel", "started_ms", "ended_ms", "source", "voice")
    ID_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    CHANNEL_FIELD_NUMBER: _ClassVar[int]
    STARTED_MS_FIELD_NUMBER: _ClassVar[int]
    ENDED_MS_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    VOICE_FIELD_NUMBER: _ClassVar[int]
    id: str
    text: str
    channel: str
    started_ms: int
    ended_ms: int
    source: str
    voice: _voice_pb2.VoiceInfo
    def __init__(self, id: _Optional[str] = ..., text: _Optional[str] = ..., channel: _Optional[str] = ..., started_ms: _Optional[int] = ..., ended_ms: _Optional[int] = ..., source: _Optional[str] = ..., voice: _Optional[_Union[_voice_pb2.VoiceInfo, _Mapping]] = ...) -> None: ...

class Reply(_message.Message):
    __slots__ = ("id", "utterance_id", "text", "placeholder", "seq", "reply_seq", "chunk", "final", "task_id", "brain")
    ID_FIELD_NUMBER: _ClassVar[int]
    UTTERANCE_ID_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    PLACEHOLDER_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    REPLY_SEQ_FIELD_NUMBER: _ClassVar[int]
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    FINAL_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    BRAIN_FIELD_NUMBER: _ClassVar[int]
    id: str
    utterance_id: str
    text: str
    placeholder: bool
    seq: int
    reply_seq: int
    chunk: int
    final: bool
    task_id: str
    brain: str
    def __init__(self, id: _Optional[str] = ..., utterance_id: _Optional[str] = ..., text: _Optional[str] = ..., placeholder: _Optional[bool] = ..., seq: _Optional[int] = ..., reply_seq: _Optional[int] = ..., chunk: _Optional[int] = ..., final: _Optional[bool] = ..., task_id: _Optional[str] = ..., brain: _Optional[str] = ...) -> None: ...

class DeliveryAck(_message.Message):
    __slots__ = ("reply_id", "state", "at_ms", "chunk", "more_chunks")
    REPLY_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    AT_MS_FIELD_NUMBER: _ClassVar[int]
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    MORE_CHUNKS_FIELD_NUMBER: _ClassVar[int]
    reply_id: str
    state: DeliveryState
    at_ms: int
    chunk: int
    more_chunks: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, reply_id: _Optional[str] = ..., state: _Optional[_Union[DeliveryState, str]] = ..., at_ms: _Optional[int] = ..., chunk: _Optional[int] = ..., more_chunks: _Optional[_Iterable[int]] = ...) -> None: ...

class Presence(_message.Message):
    __slots__ = ("state", "session", "since_ms", "version")
    STATE_FIELD_NUMBER: _ClassVar[int]
    SESSION_FIELD_NUMBER: _ClassVar[int]
    SINCE_MS_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    state: PresenceState
    session: str
    since_ms: int
    version: str
    def __init__(self, state: _Optional[_Union[PresenceState, str]] = ..., session: _Optional[str] = ..., since_ms: _Optional[int] = ..., version: _Optional[str] = ...) -> None: ...

class Revocation(_message.Message):
    __slots__ = ("device_id", "revoked_ms")
    DEVICE_ID_FIELD_NUMBER: _ClassVar[int]
    REVOKED_MS_FIELD_NUMBER: _ClassVar[int]
    device_id: str
    revoked_ms: int
    def __init__(self, device_id: _Optional[str] = ..., revoked_ms: _Optional[int] = ...) -> None: ...

class GroupKey(_message.Message):
    __slots__ = ("epoch", "key", "made_ms")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    MADE_MS_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    key: bytes
    made_ms: int
    def __init__(self, epoch: _Optional[int] = ..., key: _Optional[bytes] = ..., made_ms: _Optional[int] = ...) -> None: ...

class DeviceCertificate(_message.Message):
    __slots__ = ("version", "home_id", "device_id", "name", "profile", "scopes", "sign_pk", "box_pk", "issued_ms", "expires_ms")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    HOME_ID_FIELD_NUMBER: _ClassVar[int]
    DEVICE_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    PROFILE_FIELD_NUMBER: _ClassVar[int]
    SCOPES_FIELD_NUMBER: _ClassVar[int]
    SIGN_PK_FIELD_NUMBER: _ClassVar[int]
    BOX_PK_FIELD_NUMBER: _ClassVar[int]
    ISSUED_MS_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_MS_FIELD_NUMBER: _ClassVar[int]
    version: int
    home_id: str
    device_id: str
    name: str
    profile: str
    scopes: _containers.RepeatedScalarFieldContainer[str]
    sign_pk: bytes
    box_pk: bytes
    issued_ms: int
    expires_ms: int
    def __init__(self, version: _Optional[int] = ..., home_id: _Optional[str] = ..., device_id: _Optional[str] = ..., name: _Optional[str] = ..., profile: _Optional[str] = ..., scopes: _Optional[_Iterable[str]] = ..., sign_pk: _Optional[bytes] = ..., box_pk: _Optional[bytes] = ..., issued_ms: _Optional[int] = ..., expires_ms: _Optional[int] = ...) -> None: ...

class SignedCertificate(_message.Message):
    __slots__ = ("body", "signature")
    BODY_FIELD_NUMBER: _ClassVar[int]
    SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    body: bytes
    signature: bytes
    def __init__(self, body: _Optional[bytes] = ..., signature: _Optional[bytes] = ...) -> None: ...

class IdentifyRequest(_message.Message):
    __slots__ = ("nonce",)
    NONCE_FIELD_NUMBER: _ClassVar[int]
    nonce: bytes
    def __init__(self, nonce: _Optional[bytes] = ...) -> None: ...

class HubIdentity(_message.Message):
    __slots__ = ("home_id", "hub_sign_pk", "hub_box_pk", "mqtt_port", "grpc_port", "version", "nonce")
    HOME_ID_FIELD_NUMBER: _ClassVar[int]
    HUB_SIGN_PK_FIELD_NUMBER: _ClassVar[int]
    HUB_BOX_PK_FIELD_NUMBER: _ClassVar[int]
    MQTT_PORT_FIELD_NUMBER: _ClassVar[int]
    GRPC_PORT_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    NONCE_FIELD_NUMBER: _ClassVar[int]
    home_id: str
    hub_sign_pk: bytes
    hub_box_pk: bytes
    mqtt_port: int
    grpc_port: int
    version: str
    nonce: bytes
    def __init__(self, home_id: _Optional[str] = ..., hub_sign_pk: _Optional[bytes] = ..., hub_box_pk: _Optional[bytes] = ..., mqtt_port: _Optional[int] = ..., grpc_port: _Optional[int] = ..., version: _Optional[str] = ..., nonce: _Optional[bytes] = ...) -> None: ...

class IdentifyResponse(_message.Message):
    __slots__ = ("identity", "signature")
    IDENTITY_FIELD_NUMBER: _ClassVar[int]
    SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    identity: bytes
    signature: bytes
    def __init__(self, identity: _Optional[bytes] = ..., signature: _Optional[bytes] = ...) -> None: ...

class PairDetails(_message.Message):
    __slots__ = ("name", "profile", "sign_pk", "box_pk", "time_ms")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PROFILE_FIELD_NUMBER: _ClassVar[int]
    SIGN_PK_FIELD_NUMBER: _ClassVar[int]
    BOX_PK_FIELD_NUMBER: _ClassVar[int]
    TIME_MS_FIELD_NUMBER: _ClassVar[int]
    name: str
    profile: str
    sign_pk: bytes
    box_pk: bytes
    time_ms: int
    def __init__(self, name: _Optional[str] = ..., profile: _Optional[str] = ..., sign_pk: _Optional[bytes] = ..., box_pk: _Optional[bytes] = ..., time_ms: _Optional[int] = ...) -> None: ...

class PairRequest(_message.Message):
    __slots__ = ("code_id", "salt", "details", "mac")
    CODE_ID_FIELD_NUMBER: _ClassVar[int]
    SALT_FIELD_NUMBER: _ClassVar[int]
    DETAILS_FIELD_NUMBER: _ClassVar[int]
    MAC_FIELD_NUMBER: _ClassVar[int]
    code_id: str
    salt: bytes
    details: bytes
    mac: bytes
    def __init__(self, code_id: _Optional[str] = ..., salt: _Optional[bytes] = ..., details: _Optional[bytes] = ..., mac: _Optional[bytes] = ...) -> None: ...

class PairSecrets(_message.Message):
    __slots__ = ("mqtt_username", "mqtt_password", "group_key", "group_epoch")
    MQTT_USERNAME_FIELD_NUMBER: _ClassVar[int]
    MQTT_PASSWORD_FIELD_NUMBER: _ClassVar[int]
    GROUP_KEY_FIELD_NUMBER: _ClassVar[int]
    GROUP_EPOCH_FIELD_NUMBER: _ClassVar[int]
    mqtt_username: str
    mqtt_password: str
    group_key: bytes
    group_epoch: int
    def __init__(self, mqtt_username: _Optional[str] = ..., mqtt_password: _Optional[str] = ..., group_key: _Optional[bytes] = ..., group_epoch: _Optional[int] = ...) -> None: ...

class PairGrant(_message.Message):
    __slots__ = ("certificate", "home_id", "hub_sign_pk", "hub_box_pk", "mqtt_port", "grpc_port", "sealed_secrets", "home_sign_pk", "tls_ca_pem", "tls_ca_endorsement")
    CERTIFICATE_FIELD_NUMBER: _ClassVar[int]
    HOME_ID_FIELD_NUMBER: _ClassVar[int]
    HUB_SIGN_PK_FIELD_NUMBER: _ClassVar[int]
    HUB_BOX_PK_FIELD_NUMBER: _ClassVar[int]
    MQTT_PORT_FIELD_NUMBER: _ClassVar[int]
    GRPC_PORT_FIELD_NUMBER: _ClassVar[int]
    SEALED_SECRETS_FIELD_NUMBER: _ClassVar[int]
    HOME_SIGN_PK_FIELD_NUMBER: _ClassVar[int]
    TLS_CA_PEM_FIELD_NUMBER: _ClassVar[int]
    TLS_CA_ENDORSEMENT_FIELD_NUMBER: _ClassVar[int]
    certificate: SignedCertificate
    home_id: str
    hub_sign_pk: bytes
    hub_box_pk: bytes
    mqtt_port: int
    grpc_port: int
    sealed_secrets: bytes
    home_sign_pk: bytes
    tls_ca_pem: bytes
    tls_ca_endorsement: bytes
    def __init__(self, certificate: _Optional[_Union[SignedCertificate, _Mapping]] = ..., home_id: _Optional[str] = ..., hub_sign_pk: _Optional[bytes] = ..., hub_box_pk: _Optional[bytes] = ..., mqtt_port: _Optional[int] = ..., grpc_port: _Optional[int] = ..., sealed_secrets: _Optional[bytes] = ..., home_sign_pk: _Optional[bytes] = ..., tls_ca_pem: _Optional[bytes] = ..., tls_ca_endorsement: _Optional[bytes] = ...) -> None: ...

class PairResponse(_message.Message):
    __slots__ = ("grant", "mac")
    GRANT_FIELD_NUMBER: _ClassVar[int]
    MAC_FIELD_NUMBER: _ClassVar[int]
    grant: bytes
    mac: bytes
    def __init__(self, grant: _Optional[bytes] = ..., mac: _Optional[bytes] = ...) -> None: ...

class EnvelopeBytes(_message.Message):
    __slots__ = ("data",)
    DATA_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    def __init__(self, data: _Optional[bytes] = ...) -> None: ...

class RpcAuth(_message.Message):
    __slots__ = ("home_id", "sender", "method", "size", "sha256", "time_ms")
    HOME_ID_FIELD_NUMBER: _ClassVar[int]
    SENDER_FIELD_NUMBER: _ClassVar[int]
    METHOD_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    TIME_MS_FIELD_NUMBER: _ClassVar[int]
    home_id: str
    sender: str
    method: str
    size: int
    sha256: bytes
    time_ms: int
    def __init__(self, home_id: _Optional[str] = ..., sender: _Optional[str] = ..., method: _Optional[str] = ..., size: _Optional[int] = ..., sha256: _Optional[bytes] = ..., time_ms: _Optional[int] = ...) -> None: ...

class SignedRpcAuth(_message.Message):
    __slots__ = ("body", "signature")
    BODY_FIELD_NUMBER: _ClassVar[int]
    SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    body: bytes
    signature: bytes
    def __init__(self, body: _Optional[bytes] = ..., signature: _Optional[bytes] = ...) -> None: ...
