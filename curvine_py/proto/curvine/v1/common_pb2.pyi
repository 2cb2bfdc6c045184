from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class FileType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FILE_TYPE_UNSPECIFIED: _ClassVar[FileType]
    REGULAR: _ClassVar[FileType]
    DIRECTORY: _ClassVar[FileType]
    SYMLINK: _ClassVar[FileType]
    FIFO: _ClassVar[FileType]
    CHARDEV: _ClassVar[FileType]
    BLOCKDEV: _ClassVar[FileType]
    SOCKET: _ClassVar[FileType]

class StorageClass(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    STORAGE_CLASS_UNSPECIFIED: _ClassVar[StorageClass]
    CACHE: _ClassVar[StorageClass]
    DURABLE: _ClassVar[StorageClass]
FILE_TYPE_UNSPECIFIED: FileType
REGULAR: FileType
DIRECTORY: FileType
SYMLINK: FileType
FIFO: FileType
CHARDEV: FileType
BLOCKDEV: FileType
SOCKET: FileType
STORAGE_CLASS_UNSPECIFIED: StorageClass
CACHE: StorageClass
DURABLE: StorageClass

class Attr(_message.Message):
    __slots__ = ("ino", "type", "mode", "uid", "gid", "size", "nlink", "atime_ns", "mtime_ns", "ctime_ns", "rdev", "generation", "block_size", "stored_bytes")
    INO_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    UID_FIELD_NUMBER: _ClassVar[int]
    GID_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    NLINK_FIELD_NUMBER: _ClassVar[int]
    ATIME_NS_FIELD_NUMBER: _ClassVar[int]
    MTIME_NS_FIELD_NUMBER: _ClassVar[int]
    CTIME_NS_FIELD_NUMBER: _ClassVar[int]
    RDEV_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    BLOCK_SIZE_FIELD_NUMBER: _ClassVar[int]
    STORED_BYTES_FIELD_NUMBER: _ClassVar[int]
    ino: int
    type: FileType
    mode: int
    uid: int
    gid: int
    size: int
    nlink: int
    atime_ns: int
    mtime_ns: int
    ctime_ns: int
    rdev: int
    generation: int
    block_size: int
    stored_bytes: int
    def __init__(self, ino: _Optional[int] = ..., type: _Optional[_Union[FileType, str]] = ..., mode: _Optional[int] = ..., uid: _Optional[int] = ..., gid: _Optional[int] = ..., size: _Optional[int] = ..., nlink: _Optional[int] = ..., atime_ns: _Optional[int] = ..., mtime_ns: _Optional[int] = ..., ctime_ns: _Optional[int] = ..., rdev: _Optional[int] = ..., generation: _Optional[int] = ..., block_size: _Optional[int] = ..., stored_bytes: _Optional[int] = ...) -> None: ...

class Policy(_message.Message):
    __slots__ = ("storage_class", "replicas", "ttl_ms", "block_size", "placement", "compress")
    STORAGE_CLASS_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    TTL_MS_FIELD_NUMBER: _ClassVar[int]
    BLOCK_SIZE_FIELD_NUMBER: _ClassVar[int]
    PLACEMENT_FIELD_NUMBER: _ClassVar[int]
    COMPRESS_FIELD_NUMBER: _ClassVar[int]
    storage_class: StorageClass
    replicas: int
    ttl_ms: int
    block_size: int
    placement: str
    compress: bool
    def __init__(self, storage_class: _Optional[_Union[StorageClass, str]] = ..., replicas: _Optional[int] = ..., ttl_ms: _Optional[int] = ..., block_size: _Optional[int] = ..., placement: _Optional[str] = ..., compress: _Optional[bool] = ...) -> None: ...
