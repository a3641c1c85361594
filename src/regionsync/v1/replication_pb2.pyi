from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class SyncMessage(_message.Message):
    __slots__ = ("hello", "batch", "ack", "tree", "state", "digest")
    HELLO_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    ACK_FIELD_NUMBER: _ClassVar[int]
    TREE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    hello: Hello
    batch: Batch
    ack: Ack
    tree: TreeLevel
    state: StateChunk
    digest: Digest
    def __init__(self, hello: _Optional[_Union[Hello, _Mapping]] = ..., batch: _Optional[_Union[Batch, _Mapping]] = ..., ack: _Optional[_Union[Ack, _Mapping]] = ..., tree: _Optional[_Union[TreeLevel, _Mapping]] = ..., state: _Optional[_Union[StateChunk, _Mapping]] = ..., digest: _Optional[_Union[Digest, _Mapping]] = ...) -> None: ...

class Digest(_message.Message):
    __slots__ = ("root", "version_vector")
    class VersionVectorEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    ROOT_FIELD_NUMBER: _ClassVar[int]
    VERSION_VECTOR_FIELD_NUMBER: _ClassVar[int]
    root: bytes
    version_vector: _containers.ScalarMap[str, int]
    def __init__(self, root: _Optional[bytes] = ..., version_vector: _Optional[_Mapping[str, int]] = ...) -> None: ...

class Hello(_message.Message):
    __slots__ = ("region", "incarnation", "version_vector", "protocol", "sent_wall_ms", "version", "features", "heard")
    class VersionVectorEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    class HeardEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    REGION_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    VERSION_VECTOR_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_FIELD_NUMBER: _ClassVar[int]
    SENT_WALL_MS_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    FEATURES_FIELD_NUMBER: _ClassVar[int]
    HEARD_FIELD_NUMBER: _ClassVar[int]
    region: str
    incarnation: int
    version_vector: _containers.ScalarMap[str, int]
    protocol: int
    sent_wall_ms: int
    version: str
    features: _containers.RepeatedScalarFieldContainer[str]
    heard: _containers.ScalarMap[str, int]
    def __init__(self, region: _Optional[str] = ..., incarnation: _Optional[int] = ..., version_vector: _Optional[_Mapping[str, int]] = ..., protocol: _Optional[int] = ..., sent_wall_ms: _Optional[int] = ..., version: _Optional[str] = ..., features: _Optional[_Iterable[str]] = ..., heard: _Optional[_Mapping[str, int]] = ...) -> None: ...

class DeltaRecord(_message.Message):
    __slots__ = ("origin", "origin_seq", "kind", "body", "hlc_wall_ms", "hlc_logical")
    ORIGIN_FIELD_NUMBER: _ClassVar[int]
    ORIGIN_SEQ_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    HLC_WALL_MS_FIELD_NUMBER: _ClassVar[int]
    HLC_LOGICAL_FIELD_NUMBER: _ClassVar[int]
    origin: str
    origin_seq: int
    kind: str
    body: bytes
    hlc_wall_ms: int
    hlc_logical: int
    def __init__(self, origin: _Optional[str] = ..., origin_seq: _Optional[int] = ..., kind: _Optional[str] = ..., body: _Optional[bytes] = ..., hlc_wall_ms: _Optional[int] = ..., hlc_logical: _Optional[int] = ...) -> None: ...

class Batch(_message.Message):
    __slots__ = ("records",)
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    records: _containers.RepeatedCompositeFieldContainer[DeltaRecord]
    def __init__(self, records: _Optional[_Iterable[_Union[DeltaRecord, _Mapping]]] = ...) -> None: ...

class Ack(_message.Message):
    __slots__ = ("version_vector", "rejected", "sent_wall_ms", "heard")
    class VersionVectorEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    class HeardEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    VERSION_VECTOR_FIELD_NUMBER: _ClassVar[int]
    REJECTED_FIELD_NUMBER: _ClassVar[int]
    SENT_WALL_MS_FIELD_NUMBER: _ClassVar[int]
    HEARD_FIELD_NUMBER: _ClassVar[int]
    version_vector: _containers.ScalarMap[str, int]
    rejected: _containers.RepeatedCompositeFieldContainer[Rejected]
    sent_wall_ms: int
    heard: _containers.ScalarMap[str, int]
    def __init__(self, version_vector: _Optional[_Mapping[str, int]] = ..., rejected: _Optional[_Iterable[_Union[Rejected, _Mapping]]] = ..., sent_wall_ms: _Optional[int] = ..., heard: _Optional[_Mapping[str, int]] = ...) -> None: ...

class Rejected(_message.Message):
    __slots__ = ("origin", "origin_seq", "reason")
    ORIGIN_FIELD_NUMBER: _ClassVar[int]
    ORIGIN_SEQ_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    origin: str
    origin_seq: int
    reason: str
    def __init__(self, origin: _Optional[str] = ..., origin_seq: _Optional[int] = ..., reason: _Optional[str] = ...) -> None: ...

class TreeLevel(_message.Message):
    __slots__ = ("buckets", "hashes")
    BUCKETS_FIELD_NUMBER: _ClassVar[int]
    HASHES_FIELD_NUMBER: _ClassVar[int]
    buckets: _containers.RepeatedScalarFieldContainer[str]
    hashes: _containers.RepeatedScalarFieldContainer[bytes]
    def __init__(self, buckets: _Optional[_Iterable[str]] = ..., hashes: _Optional[_Iterable[bytes]] = ...) -> None: ...

class StateChunk(_message.Message):
    __slots__ = ("items", "last", "version_vector")
    class VersionVectorEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    LAST_FIELD_NUMBER: _ClassVar[int]
    VERSION_VECTOR_FIELD_NUMBER: _ClassVar[int]
    items: _containers.RepeatedCompositeFieldContainer[StateItem]
    last: bool
    version_vector: _containers.ScalarMap[str, int]
    def __init__(self, items: _Optional[_Iterable[_Union[StateItem, _Mapping]]] = ..., last: _Optional[bool] = ..., version_vector: _Optional[_Mapping[str, int]] = ...) -> None: ...

class StateItem(_message.Message):
    __slots__ = ("kind", "body")
    KIND_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    kind: str
    body: bytes
    def __init__(self, kind: _Optional[str] = ..., body: _Optional[bytes] = ...) -> None: ...
