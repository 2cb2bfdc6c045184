from curvine_py.proto.curvine.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class DataHeader(_message.Message):
    __slots__ = ("token", "key", "block_id", "offset", "length", "checksum", "errno", "message", "storage_class", "ttl_ms", "epoch", "keys", "hit_count", "user_meta", "found", "pin", "worker_id", "chunk_checksums", "data_offset", "digest_trailer")
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    BLOCK_ID_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    LENGTH_FIELD_NUMBER: _ClassVar[int]
    CHECKSUM_FIELD_NUMBER: _ClassVar[int]
    ERRNO_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    STORAGE_CLASS_FIELD_NUMBER: _ClassVar[int]
    TTL_MS_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    HIT_COUNT_FIELD_NUMBER: _ClassVar[int]
    USER_META_FIELD_NUMBER: _ClassVar[int]
    FOUND_FIELD_NUMBER: _ClassVar[int]
    PIN_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    CHUNK_CHECKSUMS_FIELD_NUMBER: _ClassVar[int]
    DATA_OFFSET_FIELD_NUMBER: _ClassVar[int]
    DIGEST_TRAILER_FIELD_NUMBER: _ClassVar[int]
    token: str
    key: str
    block_id: int
    offset: int
    length: int
    checksum: int
    errno: int
    message: str
    storage_class: _common_pb2.StorageClass
    ttl_ms: int
    epoch: int
    keys: _containers.RepeatedScalarFieldContainer[str]
    hit_count: int
    user_meta: bytes
    found: bool
    pin: bool
    worker_id: str
    chunk_checksums: _containers.RepeatedScalarFieldContainer[int]
    data_offset: int
    digest_trailer: bool
    def __init__(self, token: _Optional[str] = ..., key: _Optional[str] = ..., block_id: _Optional[int] = ..., offset: _Optional[int] = ..., length: _Optional[int] = ..., checksum: _Optional[int] = ..., errno: _Optional[int] = ..., message: _Optional[str] = ..., storage_class: _Optional[_Union[_common_pb2.StorageClass, str]] = ..., ttl_ms: _Optional[int] = ..., epoch: _Optional[int] = ..., keys: _Optional[_Iterable[str]] = ..., hit_count: _Optional[int] = ..., user_meta: _Optional[bytes] = ..., found: _Optional[bool] = ..., pin: _Optional[bool] = ..., worker_id: _Optional[str] = ..., chunk_checksums: _Optional[_Iterable[int]] = ..., data_offset: _Optional[int] = ..., digest_trailer: _Optional[bool] = ...) -> None: ...
