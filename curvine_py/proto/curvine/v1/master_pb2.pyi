from curvine_py.proto.curvine.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Empty(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Caller(_message.Message):
    __slots__ = ("uid", "gid")
    UID_FIELD_NUMBER: _ClassVar[int]
    GID_FIELD_NUMBER: _ClassVar[int]
    uid: int
    gid: int
    def __init__(self, uid: _Optional[int] = ..., gid: _Optional[int] = ...) -> None: ...

class InodeRequest(_message.Message):
    __slots__ = ("ino",)
    INO_FIELD_NUMBER: _ClassVar[int]
    ino: int
    def __init__(self, ino: _Optional[int] = ...) -> None: ...

class PathRequest(_message.Message):
    __slots__ = ("path", "follow_symlinks")
    PATH_FIELD_NUMBER: _ClassVar[int]
    FOLLOW_SYMLINKS_FIELD_NUMBER: _ClassVar[int]
    path: str
    follow_symlinks: bool
    def __init__(self, path: _Optional[str] = ..., follow_symlinks: _Optional[bool] = ...) -> None: ...

class AttrReply(_message.Message):
    __slots__ = ("attr",)
    ATTR_FIELD_NUMBER: _ClassVar[int]
    attr: _common_pb2.Attr
    def __init__(self, attr: _Optional[_Union[_common_pb2.Attr, _Mapping]] = ...) -> None: ...

class LookupRequest(_message.Message):
    __slots__ = ("parent", "name")
    PARENT_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    parent: int
    name: str
    def __init__(self, parent: _Optional[int] = ..., name: _Optional[str] = ...) -> None: ...

class CreateRequest(_message.Message):
    __slots__ = ("parent", "name", "type", "mode", "caller", "rdev", "symlink_target", "exclusive", "truncate")
    PARENT_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    CALLER_FIELD_NUMBER: _ClassVar[int]
    RDEV_FIELD_NUMBER: _ClassVar[int]
    SYMLINK_TARGET_FIELD_NUMBER: _ClassVar[int]
    EXCLUSIVE_FIELD_NUMBER: _ClassVar[int]
    TRUNCATE_FIELD_NUMBER: _ClassVar[int]
    parent: int
    name: str
    type: _common_pb2.FileType
    mode: int
    caller: Caller
    rdev: int
    symlink_target: str
    exclusive: bool
    truncate: bool
    def __init__(self, parent: _Optional[int] = ..., name: _Optional[str] = ..., type: _Optional[_Union[_common_pb2.FileType, str]] = ..., mode: _Optional[int] = ..., caller: _Optional[_Union[Caller, _Mapping]] = ..., rdev: _Optional[int] = ..., symlink_target: _Optional[str] = ..., exclusive: _Optional[bool] = ..., truncate: _Optional[bool] = ...) -> None: ...

class CreateManyRequest(_message.Message):
    __slots__ = ("creates",)
    CREATES_FIELD_NUMBER: _ClassVar[int]
    creates: _containers.RepeatedCompositeFieldContainer[CreateRequest]
    def __init__(self, creates: _Optional[_Iterable[_Union[CreateRequest, _Mapping]]] = ...) -> None: ...

class CreateResult(_message.Message):
    __slots__ = ("attr", "errno", "error")
    ATTR_FIELD_NUMBER: _ClassVar[int]
    ERRNO_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    attr: _common_pb2.Attr
    errno: int
    error: str
    def __init__(self, attr: _Optional[_Union[_common_pb2.Attr, _Mapping]] = ..., errno: _Optional[int] = ..., error: _Optional[str] = ...) -> None: ...

class CreateManyReply(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[CreateResult]
    def __init__(self, results: _Optional[_Iterable[_Union[CreateResult, _Mapping]]] = ...) -> None: ...

class SetAttrRequest(_message.Message):
    __slots__ = ("ino", "mode", "uid", "gid", "size", "atime_ns", "mtime_ns", "atime_now", "mtime_now", "ctime_ns")
    INO_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    UID_FIELD_NUMBER: _ClassVar[int]
    GID_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    ATIME_NS_FIELD_NUMBER: _ClassVar[int]
    MTIME_NS_FIELD_NUMBER: _ClassVar[int]
    ATIME_NOW_FIELD_NUMBER: _ClassVar[int]
    MTIME_NOW_FIELD_NUMBER: _ClassVar[int]
    CTIME_NS_FIELD_NUMBER: _ClassVar[int]
    ino: int
    mode: int
    uid: int
    gid: int
    size: int
    atime_ns: int
    mtime_ns: int
    atime_now: bool
    mtime_now: bool
    ctime_ns: int
    def __init__(self, ino: _Optional[int] = ..., mode: _Optional[int] = ..., uid: _Optional[int] = ..., gid: _Optional[int] = ..., size: _Optional[int] = ..., atime_ns: _Optional[int] = ..., mtime_ns: _Optional[int] = ..., atime_now: _Optional[bool] = ..., mtime_now: _Optional[bool] = ..., ctime_ns: _Optional[int] = ...) -> None: ...

class LinkRequest(_message.Message):
    __slots__ = ("ino", "new_parent", "new_name")
    INO_FIELD_NUMBER: _ClassVar[int]
    NEW_PARENT_FIELD_NUMBER: _ClassVar[int]
    NEW_NAME_FIELD_NUMBER: _ClassVar[int]
    ino: int
    new_parent: int
    new_name: str
    def __init__(self, ino: _Optional[int] = ..., new_parent: _Optional[int] = ..., new_name: _Optional[str] = ...) -> None: ...

class UnlinkRequest(_message.Message):
    __slots__ = ("parent", "name", "directory", "keep_orphan")
    PARENT_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    DIRECTORY_FIELD_NUMBER: _ClassVar[int]
    KEEP_ORPHAN_FIELD_NUMBER: _ClassVar[int]
    parent: int
    name: str
    directory: bool
    keep_orphan: bool
    def __init__(self, parent: _Optional[int] = ..., name: _Optional[str] = ..., directory: _Optional[bool] = ..., keep_orphan: _Optional[bool] = ...) -> None: ...

class UnlinkReply(_message.Message):
    __slots__ = ("ino", "nlink")
    INO_FIELD_NUMBER: _ClassVar[int]
    NLINK_FIELD_NUMBER: _ClassVar[int]
    ino: int
    nlink: int
    def __init__(self, ino: _Optional[int] = ..., nlink: _Optional[int] = ...) -> None: ...

class RenameRequest(_message.Message):
    __slots__ = ("parent", "name", "new_parent", "new_name", "flags", "keep_orphan")
    PARENT_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    NEW_PARENT_FIELD_NUMBER: _ClassVar[int]
    NEW_NAME_FIELD_NUMBER: _ClassVar[int]
    FLAGS_FIELD_NUMBER: _ClassVar[int]
    KEEP_ORPHAN_FIELD_NUMBER: _ClassVar[int]
    parent: int
    name: str
    new_parent: int
    new_name: str
    flags: int
    keep_orphan: bool
    def __init__(self, parent: _Optional[int] = ..., name: _Optional[str] = ..., new_parent: _Optional[int] = ..., new_name: _Optional[str] = ..., flags: _Optional[int] = ..., keep_orphan: _Optional[bool] = ...) -> None: ...

class RenameReply(_message.Message):
    __slots__ = ("replaced_ino", "replaced_nlink")
    REPLACED_INO_FIELD_NUMBER: _ClassVar[int]
    REPLACED_NLINK_FIELD_NUMBER: _ClassVar[int]
    replaced_ino: int
    replaced_nlink: int
    def __init__(self, replaced_ino: _Optional[int] = ..., replaced_nlink: _Optional[int] = ...) -> None: ...

class ReadDirRequest(_message.Message):
    __slots__ = ("ino", "after_name", "limit")
    INO_FIELD_NUMBER: _ClassVar[int]
    AFTER_NAME_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    ino: int
    after_name: str
    limit: int
    def __init__(self, ino: _Optional[int] = ..., after_name: _Optional[str] = ..., limit: _Optional[int] = ...) -> None: ...

class DirEntry(_message.Message):
    __slots__ = ("name", "attr")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ATTR_FIELD_NUMBER: _ClassVar[int]
    name: str
    attr: _common_pb2.Attr
    def __init__(self, name: _Optional[str] = ..., attr: _Optional[_Union[_common_pb2.Attr, _Mapping]] = ...) -> None: ...

class ReadDirReply(_message.Message):
    __slots__ = ("entries", "more")
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    MORE_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[DirEntry]
    more: bool
    def __init__(self, entries: _Optional[_Iterable[_Union[DirEntry, _Mapping]]] = ..., more: _Optional[bool] = ...) -> None: ...

class ReadLinkReply(_message.Message):
    __slots__ = ("target",)
    TARGET_FIELD_NUMBER: _ClassVar[int]
    target: str
    def __init__(self, target: _Optional[str] = ...) -> None: ...

class XattrRequest(_message.Message):
    __slots__ = ("ino", "name", "value", "flags")
    INO_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    FLAGS_FIELD_NUMBER: _ClassVar[int]
    ino: int
    name: str
    value: bytes
    flags: int
    def __init__(self, ino: _Optional[int] = ..., name: _Optional[str] = ..., value: _Optional[bytes] = ..., flags: _Optional[int] = ...) -> None: ...

class XattrReply(_message.Message):
    __slots__ = ("value", "names")
    VALUE_FIELD_NUMBER: _ClassVar[int]
    NAMES_FIELD_NUMBER: _ClassVar[int]
    value: bytes
    names: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, value: _Optional[bytes] = ..., names: _Optional[_Iterable[str]] = ...) -> None: ...

class StatFsRequest(_message.Message):
    __slots__ = ("ino",)
    INO_FIELD_NUMBER: _ClassVar[int]
    ino: int
    def __init__(self, ino: _Optional[int] = ...) -> None: ...

class StatFsReply(_message.Message):
    __slots__ = ("capacity", "used", "available", "files", "block_size", "max_files")
    CAPACITY_FIELD_NUMBER: _ClassVar[int]
    USED_FIELD_NUMBER: _ClassVar[int]
    AVAILABLE_FIELD_NUMBER: _ClassVar[int]
    FILES_FIELD_NUMBER: _ClassVar[int]
    BLOCK_SIZE_FIELD_NUMBER: _ClassVar[int]
    MAX_FILES_FIELD_NUMBER: _ClassVar[int]
    capacity: int
    used: int
    available: int
    files: int
    block_size: int
    max_files: int
    def __init__(self, capacity: _Optional[int] = ..., used: _Optional[int] = ..., available: _Optional[int] = ..., files: _Optional[int] = ..., block_size: _Optional[int] = ..., max_files: _Optional[int] = ...) -> None: ...

class Quota(_message.Message):
    __slots__ = ("path", "ino", "max_bytes", "max_inodes", "used_bytes", "used_inodes")
    PATH_FIELD_NUMBER: _ClassVar[int]
    INO_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    MAX_INODES_FIELD_NUMBER: _ClassVar[int]
    USED_BYTES_FIELD_NUMBER: _ClassVar[int]
    USED_INODES_FIELD_NUMBER: _ClassVar[int]
    path: str
    ino: int
    max_bytes: int
    max_inodes: int
    used_bytes: int
    used_inodes: int
    def __init__(self, path: _Optional[str] = ..., ino: _Optional[int] = ..., max_bytes: _Optional[int] = ..., max_inodes: _Optional[int] = ..., used_bytes: _Optional[int] = ..., used_inodes: _Optional[int] = ...) -> None: ...

class SetQuotaRequest(_message.Message):
    __slots__ = ("path", "max_bytes", "max_inodes")
    PATH_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    MAX_INODES_FIELD_NUMBER: _ClassVar[int]
    path: str
    max_bytes: int
    max_inodes: int
    def __init__(self, path: _Optional[str] = ..., max_bytes: _Optional[int] = ..., max_inodes: _Optional[int] = ...) -> None: ...

class BlockInfo(_message.Message):
    __slots__ = ("index", "block_id", "length", "checksum", "worker_ids")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    BLOCK_ID_FIELD_NUMBER: _ClassVar[int]
    LENGTH_FIELD_NUMBER: _ClassVar[int]
    CHECKSUM_FIELD_NUMBER: _ClassVar[int]
    WORKER_IDS_FIELD_NUMBER: _ClassVar[int]
    index: int
    block_id: int
    length: int
    checksum: int
    worker_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, index: _Optional[int] = ..., block_id: _Optional[int] = ..., length: _Optional[int] = ..., checksum: _Optional[int] = ..., worker_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class BlocksReply(_message.Message):
    __slots__ = ("attr", "blocks", "policy")
    ATTR_FIELD_NUMBER: _ClassVar[int]
    BLOCKS_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    attr: _common_pb2.Attr
    blocks: _containers.RepeatedCompositeFieldContainer[BlockInfo]
    policy: _common_pb2.Policy
    def __init__(self, attr: _Optional[_Union[_common_pb2.Attr, _Mapping]] = ..., blocks: _Optional[_Iterable[_Union[BlockInfo, _Mapping]]] = ..., policy: _Optional[_Union[_common_pb2.Policy, _Mapping]] = ...) -> None: ...

class AddBlockRequest(_message.Message):
    __slots__ = ("ino", "index", "client_node")
    INO_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    CLIENT_NODE_FIELD_NUMBER: _ClassVar[int]
    ino: int
    index: int
    client_node: str
    def __init__(self, ino: _Optional[int] = ..., index: _Optional[int] = ..., client_node: _Optional[str] = ...) -> None: ...

class AddBlockReply(_message.Message):
    __slots__ = ("block_id", "worker_ids", "storage_class", "ttl_ms", "block_size")
    BLOCK_ID_FIELD_NUMBER: _ClassVar[int]
    WORKER_IDS_FIELD_NUMBER: _ClassVar[int]
    STORAGE_CLASS_FIELD_NUMBER: _ClassVar[int]
    TTL_MS_FIELD_NUMBER: _ClassVar[int]
    BLOCK_SIZE_FIELD_NUMBER: _ClassVar[int]
    block_id: int
    worker_ids: _containers.RepeatedScalarFieldContainer[str]
    storage_class: _common_pb2.StorageClass
    ttl_ms: int
    block_size: int
    def __init__(self, block_id: _Optional[int] = ..., worker_ids: _Optional[_Iterable[str]] = ..., storage_class: _Optional[_Union[_common_pb2.StorageClass, str]] = ..., ttl_ms: _Optional[int] = ..., block_size: _Optional[int] = ...) -> None: ...

class AbandonBlocksRequest(_message.Message):
    __slots__ = ("ino", "block_ids")
    INO_FIELD_NUMBER: _ClassVar[int]
    BLOCK_IDS_FIELD_NUMBER: _ClassVar[int]
    ino: int
    block_ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, ino: _Optional[int] = ..., block_ids: _Optional[_Iterable[int]] = ...) -> None: ...

class CommitFileRequest(_message.Message):
    __slots__ = ("ino", "size", "blocks", "set_mtime")
    INO_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    BLOCKS_FIELD_NUMBER: _ClassVar[int]
    SET_MTIME_FIELD_NUMBER: _ClassVar[int]
    ino: int
    size: int
    blocks: _containers.RepeatedCompositeFieldContainer[BlockInfo]
    set_mtime: bool
    def __init__(self, ino: _Optional[int] = ..., size: _Optional[int] = ..., blocks: _Optional[_Iterable[_Union[BlockInfo, _Mapping]]] = ..., set_mtime: _Optional[bool] = ...) -> None: ...

class SetPolicyRequest(_message.Message):
    __slots__ = ("path", "policy")
    PATH_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    path: str
    policy: _common_pb2.Policy
    def __init__(self, path: _Optional[str] = ..., policy: _Optional[_Union[_common_pb2.Policy, _Mapping]] = ...) -> None: ...

class PolicyReply(_message.Message):
    __slots__ = ("policy", "path")
    POLICY_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    policy: _common_pb2.Policy
    path: str
    def __init__(self, policy: _Optional[_Union[_common_pb2.Policy, _Mapping]] = ..., path: _Optional[str] = ...) -> None: ...

class WorkerInfo(_message.Message):
    __slots__ = ("worker_id", "host", "port", "unix_socket", "node", "capacity", "used", "available", "lm_port", "live", "last_heartbeat_ms", "blocks", "objects", "evictions", "free_space_ratio", "reserve_bytes", "fs_free_bytes", "hits", "misses", "metrics_port")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    PORT_FIELD_NUMBER: _ClassVar[int]
    UNIX_SOCKET_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_FIELD_NUMBER: _ClassVar[int]
    USED_FIELD_NUMBER: _ClassVar[int]
    AVAILABLE_FIELD_NUMBER: _ClassVar[int]
    LM_PORT_FIELD_NUMBER: _ClassVar[int]
    LIVE_FIELD_NUMBER: _ClassVar[int]
    LAST_HEARTBEAT_MS_FIELD_NUMBER: _ClassVar[int]
    BLOCKS_FIELD_NUMBER: _ClassVar[int]
    OBJECTS_FIELD_NUMBER: _ClassVar[int]
    EVICTIONS_FIELD_NUMBER: _ClassVar[int]
    FREE_SPACE_RATIO_FIELD_NUMBER: _ClassVar[int]
    RESERVE_BYTES_FIELD_NUMBER: _ClassVar[int]
    FS_FREE_BYTES_FIELD_NUMBER: _ClassVar[int]
    HITS_FIELD_NUMBER: _ClassVar[int]
    MISSES_FIELD_NUMBER: _ClassVar[int]
    METRICS_PORT_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    host: str
    port: int
    unix_socket: str
    node: str
    capacity: int
    used: int
    available: int
    lm_port: int
    live: bool
    last_heartbeat_ms: int
    blocks: int
    objects: int
    evictions: int
    free_space_ratio: float
    reserve_bytes: int
    fs_free_bytes: int
    hits: int
    misses: int
    metrics_port: int
    def __init__(self, worker_id: _Optional[str] = ..., host: _Optional[str] = ..., port: _Optional[int] = ..., unix_socket: _Optional[str] = ..., node: _Optional[str] = ..., capacity: _Optional[int] = ..., used: _Optional[int] = ..., available: _Optional[int] = ..., lm_port: _Optional[int] = ..., live: _Optional[bool] = ..., last_heartbeat_ms: _Optional[int] = ..., blocks: _Optional[int] = ..., objects: _Optional[int] = ..., evictions: _Optional[int] = ..., free_space_ratio: _Optional[float] = ..., reserve_bytes: _Optional[int] = ..., fs_free_bytes: _Optional[int] = ..., hits: _Optional[int] = ..., misses: _Optional[int] = ..., metrics_port: _Optional[int] = ...) -> None: ...

class RegisterWorkerRequest(_message.Message):
    __slots__ = ("info", "block_ids")
    INFO_FIELD_NUMBER: _ClassVar[int]
    BLOCK_IDS_FIELD_NUMBER: _ClassVar[int]
    info: WorkerInfo
    block_ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, info: _Optional[_Union[WorkerInfo, _Mapping]] = ..., block_ids: _Optional[_Iterable[int]] = ...) -> None: ...

class RegisterWorkerReply(_message.Message):
    __slots__ = ("cluster_id", "epoch", "heartbeat_interval_ms", "lease_ms", "delete_block_ids")
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_INTERVAL_MS_FIELD_NUMBER: _ClassVar[int]
    LEASE_MS_FIELD_NUMBER: _ClassVar[int]
    DELETE_BLOCK_IDS_FIELD_NUMBER: _ClassVar[int]
    cluster_id: str
    epoch: int
    heartbeat_interval_ms: int
    lease_ms: int
    delete_block_ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, cluster_id: _Optional[str] = ..., epoch: _Optional[int] = ..., heartbeat_interval_ms: _Optional[int] = ..., lease_ms: _Optional[int] = ..., delete_block_ids: _Optional[_Iterable[int]] = ...) -> None: ...

class HeartbeatRequest(_message.Message):
    __slots__ = ("worker_id", "capacity", "used", "available", "evicted_block_ids", "bad_block_ids", "blocks", "objects", "evictions", "free_space_ratio", "reserve_bytes", "fs_free_bytes", "hits", "misses", "metrics_port")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_FIELD_NUMBER: _ClassVar[int]
    USED_FIELD_NUMBER: _ClassVar[int]
    AVAILABLE_FIELD_NUMBER: _ClassVar[int]
    EVICTED_BLOCK_IDS_FIELD_NUMBER: _ClassVar[int]
    BAD_BLOCK_IDS_FIELD_NUMBER: _ClassVar[int]
    BLOCKS_FIELD_NUMBER: _ClassVar[int]
    OBJECTS_FIELD_NUMBER: _ClassVar[int]
    EVICTIONS_FIELD_NUMBER: _ClassVar[int]
    FREE_SPACE_RATIO_FIELD_NUMBER: _ClassVar[int]
    RESERVE_BYTES_FIELD_NUMBER: _ClassVar[int]
    FS_FREE_BYTES_FIELD_NUMBER: _ClassVar[int]
    HITS_FIELD_NUMBER: _ClassVar[int]
    MISSES_FIELD_NUMBER: _ClassVar[int]
    METRICS_PORT_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    capacity: int
    used: int
    available: int
    evicted_block_ids: _containers.RepeatedScalarFieldContainer[int]
    bad_block_ids: _containers.RepeatedScalarFieldContainer[int]
    blocks: int
    objects: int
    evictions: int
    free_space_ratio: float
    reserve_bytes: int
    fs_free_bytes: int
    hits: int
    misses: int
    metrics_port: int
    def __init__(self, worker_id: _Optional[str] = ..., capacity: _Optional[int] = ..., used: _Optional[int] = ..., available: _Optional[int] = ..., evicted_block_ids: _Optional[_Iterable[int]] = ..., bad_block_ids: _Optional[_Iterable[int]] = ..., blocks: _Optional[int] = ..., objects: _Optional[int] = ..., evictions: _Optional[int] = ..., free_space_ratio: _Optional[float] = ..., reserve_bytes: _Optional[int] = ..., fs_free_bytes: _Optional[int] = ..., hits: _Optional[int] = ..., misses: _Optional[int] = ..., metrics_port: _Optional[int] = ...) -> None: ...

class HeartbeatReply(_message.Message):
    __slots__ = ("epoch", "reregister", "delete_block_ids")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    REREGISTER_FIELD_NUMBER: _ClassVar[int]
    DELETE_BLOCK_IDS_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    reregister: bool
    delete_block_ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, epoch: _Optional[int] = ..., reregister: _Optional[bool] = ..., delete_block_ids: _Optional[_Iterable[int]] = ...) -> None: ...

class Membership(_message.Message):
    __slots__ = ("epoch", "workers", "cluster_id")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    WORKERS_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    workers: _containers.RepeatedCompositeFieldContainer[WorkerInfo]
    cluster_id: str
    def __init__(self, epoch: _Optional[int] = ..., workers: _Optional[_Iterable[_Union[WorkerInfo, _Mapping]]] = ..., cluster_id: _Optional[str] = ...) -> None: ...

class ClusterReport(_message.Message):
    __slots__ = ("cluster_id", "epoch", "workers", "capacity", "used", "available", "files", "directories", "blocks", "dir_leases", "quotas", "replication", "metrics_port", "status_port", "mounts")
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    WORKERS_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_FIELD_NUMBER: _ClassVar[int]
    USED_FIELD_NUMBER: _ClassVar[int]
    AVAILABLE_FIELD_NUMBER: _ClassVar[int]
    FILES_FIELD_NUMBER: _ClassVar[int]
    DIRECTORIES_FIELD_NUMBER: _ClassVar[int]
    BLOCKS_FIELD_NUMBER: _ClassVar[int]
    DIR_LEASES_FIELD_NUMBER: _ClassVar[int]
    QUOTAS_FIELD_NUMBER: _ClassVar[int]
    REPLICATION_FIELD_NUMBER: _ClassVar[int]
    METRICS_PORT_FIELD_NUMBER: _ClassVar[int]
    STATUS_PORT_FIELD_NUMBER: _ClassVar[int]
    MOUNTS_FIELD_NUMBER: _ClassVar[int]
    cluster_id: str
    epoch: int
    workers: _containers.RepeatedCompositeFieldContainer[WorkerInfo]
    capacity: int
    used: int
    available: int
    files: int
    directories: int
    blocks: int
    dir_leases: int
    quotas: _containers.RepeatedCompositeFieldContainer[Quota]
    replication: Replication
    metrics_port: int
    status_port: int
    mounts: _containers.RepeatedCompositeFieldContainer[MountInfo]
    def __init__(self, cluster_id: _Optional[str] = ..., epoch: _Optional[int] = ..., workers: _Optional[_Iterable[_Union[WorkerInfo, _Mapping]]] = ..., capacity: _Optional[int] = ..., used: _Optional[int] = ..., available: _Optional[int] = ..., files: _Optional[int] = ..., directories: _Optional[int] = ..., blocks: _Optional[int] = ..., dir_leases: _Optional[int] = ..., quotas: _Optional[_Iterable[_Union[Quota, _Mapping]]] = ..., replication: _Optional[_Union[Replication, _Mapping]] = ..., metrics_port: _Optional[int] = ..., status_port: _Optional[int] = ..., mounts: _Optional[_Iterable[_Union[MountInfo, _Mapping]]] = ...) -> None: ...

class Replication(_message.Message):
    __slots__ = ("under_replicated", "lost", "surplus", "lost_files", "repaired_blocks", "repaired_bytes", "repair_failures", "repair_rate", "last_error")
    UNDER_REPLICATED_FIELD_NUMBER: _ClassVar[int]
    LOST_FIELD_NUMBER: _ClassVar[int]
    SURPLUS_FIELD_NUMBER: _ClassVar[int]
    LOST_FILES_FIELD_NUMBER: _ClassVar[int]
    REPAIRED_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    REPAIRED_BYTES_FIELD_NUMBER: _ClassVar[int]
    REPAIR_FAILURES_FIELD_NUMBER: _ClassVar[int]
    REPAIR_RATE_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_FIELD_NUMBER: _ClassVar[int]
    under_replicated: int
    lost: int
    surplus: int
    lost_files: _containers.RepeatedScalarFieldContainer[str]
    repaired_blocks: int
    repaired_bytes: int
    repair_failures: int
    repair_rate: int
    last_error: str
    def __init__(self, under_replicated: _Optional[int] = ..., lost: _Optional[int] = ..., surplus: _Optional[int] = ..., lost_files: _Optional[_Iterable[str]] = ..., repaired_blocks: _Optional[int] = ..., repaired_bytes: _Optional[int] = ..., repair_failures: _Optional[int] = ..., repair_rate: _Optional[int] = ..., last_error: _Optional[str] = ...) -> None: ...

class FsckRequest(_message.Message):
    __slots__ = ("rescan", "repair", "delete_orphans", "scrub", "scrub_after", "scrub_rate")
    RESCAN_FIELD_NUMBER: _ClassVar[int]
    REPAIR_FIELD_NUMBER: _ClassVar[int]
    DELETE_ORPHANS_FIELD_NUMBER: _ClassVar[int]
    SCRUB_FIELD_NUMBER: _ClassVar[int]
    SCRUB_AFTER_FIELD_NUMBER: _ClassVar[int]
    SCRUB_RATE_FIELD_NUMBER: _ClassVar[int]
    rescan: bool
    repair: bool
    delete_orphans: bool
    scrub: bool
    scrub_after: int
    scrub_rate: int
    def __init__(self, rescan: _Optional[bool] = ..., repair: _Optional[bool] = ..., delete_orphans: _Optional[bool] = ..., scrub: _Optional[bool] = ..., scrub_after: _Optional[int] = ..., scrub_rate: _Optional[int] = ...) -> None: ...

class CorruptCopy(_message.Message):
    __slots__ = ("block_id", "worker_id", "path", "reason")
    BLOCK_ID_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    block_id: int
    worker_id: str
    path: str
    reason: str
    def __init__(self, block_id: _Optional[int] = ..., worker_id: _Optional[str] = ..., path: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class ScrubPage(_message.Message):
    __slots__ = ("next_after", "done", "copies", "bytes", "corrupt", "missing", "errors", "skipped")
    NEXT_AFTER_FIELD_NUMBER: _ClassVar[int]
    DONE_FIELD_NUMBER: _ClassVar[int]
    COPIES_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    CORRUPT_FIELD_NUMBER: _ClassVar[int]
    MISSING_FIELD_NUMBER: _ClassVar[int]
    ERRORS_FIELD_NUMBER: _ClassVar[int]
    SKIPPED_FIELD_NUMBER: _ClassVar[int]
    next_after: int
    done: bool
    copies: int
    bytes: int
    corrupt: _containers.RepeatedCompositeFieldContainer[CorruptCopy]
    missing: _containers.RepeatedCompositeFieldContainer[CorruptCopy]
    errors: _containers.RepeatedScalarFieldContainer[str]
    skipped: int
    def __init__(self, next_after: _Optional[int] = ..., done: _Optional[bool] = ..., copies: _Optional[int] = ..., bytes: _Optional[int] = ..., corrupt: _Optional[_Iterable[_Union[CorruptCopy, _Mapping]]] = ..., missing: _Optional[_Iterable[_Union[CorruptCopy, _Mapping]]] = ..., errors: _Optional[_Iterable[str]] = ..., skipped: _Optional[int] = ...) -> None: ...

class WorkerInventory(_message.Message):
    __slots__ = ("worker_id", "reported", "missing", "orphans", "orphans_deleted")
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    REPORTED_FIELD_NUMBER: _ClassVar[int]
    MISSING_FIELD_NUMBER: _ClassVar[int]
    ORPHANS_FIELD_NUMBER: _ClassVar[int]
    ORPHANS_DELETED_FIELD_NUMBER: _ClassVar[int]
    worker_id: str
    reported: int
    missing: int
    orphans: int
    orphans_deleted: bool
    def __init__(self, worker_id: _Optional[str] = ..., reported: _Optional[int] = ..., missing: _Optional[int] = ..., orphans: _Optional[int] = ..., orphans_deleted: _Optional[bool] = ...) -> None: ...

class FsckReply(_message.Message):
    __slots__ = ("problems", "replication", "inventories", "pending", "copied", "failed", "dropped", "unplaceable", "throttled", "errors", "scrub")
    PROBLEMS_FIELD_NUMBER: _ClassVar[int]
    REPLICATION_FIELD_NUMBER: _ClassVar[int]
    INVENTORIES_FIELD_NUMBER: _ClassVar[int]
    PENDING_FIELD_NUMBER: _ClassVar[int]
    COPIED_FIELD_NUMBER: _ClassVar[int]
    FAILED_FIELD_NUMBER: _ClassVar[int]
    DROPPED_FIELD_NUMBER: _ClassVar[int]
    UNPLACEABLE_FIELD_NUMBER: _ClassVar[int]
    THROTTLED_FIELD_NUMBER: _ClassVar[int]
    ERRORS_FIELD_NUMBER: _ClassVar[int]
    SCRUB_FIELD_NUMBER: _ClassVar[int]
    problems: _containers.RepeatedScalarFieldContainer[str]
    replication: Replication
    inventories: _containers.RepeatedCompositeFieldContainer[WorkerInventory]
    pending: _containers.RepeatedScalarFieldContainer[str]
    copied: int
    failed: int
    dropped: int
    unplaceable: int
    throttled: bool
    errors: _containers.RepeatedScalarFieldContainer[str]
    scrub: ScrubPage
    def __init__(self, problems: _Optional[_Iterable[str]] = ..., replication: _Optional[_Union[Replication, _Mapping]] = ..., inventories: _Optional[_Iterable[_Union[WorkerInventory, _Mapping]]] = ..., pending: _Optional[_Iterable[str]] = ..., copied: _Optional[int] = ..., failed: _Optional[int] = ..., dropped: _Optional[int] = ..., unplaceable: _Optional[int] = ..., throttled: _Optional[bool] = ..., errors: _Optional[_Iterable[str]] = ..., scrub: _Optional[_Union[ScrubPage, _Mapping]] = ...) -> None: ...

class DirLeaseReply(_message.Message):
    __slots__ = ("granted", "term_ms", "names")
    GRANTED_FIELD_NUMBER: _ClassVar[int]
    TERM_MS_FIELD_NUMBER: _ClassVar[int]
    NAMES_FIELD_NUMBER: _ClassVar[int]
    granted: bool
    term_ms: int
    names: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, granted: _Optional[bool] = ..., term_ms: _Optional[int] = ..., names: _Optional[_Iterable[str]] = ...) -> None: ...

class MountInfo(_message.Message):
    __slots__ = ("node", "mountpoint", "metrics_port", "last_heartbeat_ms")
    NODE_FIELD_NUMBER: _ClassVar[int]
    MOUNTPOINT_FIELD_NUMBER: _ClassVar[int]
    METRICS_PORT_FIELD_NUMBER: _ClassVar[int]
    LAST_HEARTBEAT_MS_FIELD_NUMBER: _ClassVar[int]
    node: str
    mountpoint: str
    metrics_port: int
    last_heartbeat_ms: int
    def __init__(self, node: _Optional[str] = ..., mountpoint: _Optional[str] = ..., metrics_port: _Optional[int] = ..., last_heartbeat_ms: _Optional[int] = ...) -> None: ...

class DirLeasesRequest(_message.Message):
    __slots__ = ("dirs", "mount")
    DIRS_FIELD_NUMBER: _ClassVar[int]
    MOUNT_FIELD_NUMBER: _ClassVar[int]
    dirs: _containers.RepeatedScalarFieldContainer[int]
    mount: MountInfo
    def __init__(self, dirs: _Optional[_Iterable[int]] = ..., mount: _Optional[_Union[MountInfo, _Mapping]] = ...) -> None: ...

class DirLeasesReply(_message.Message):
    __slots__ = ("kept", "term_ms", "session_timeout_ms")
    KEPT_FIELD_NUMBER: _ClassVar[int]
    TERM_MS_FIELD_NUMBER: _ClassVar[int]
    SESSION_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    kept: _containers.RepeatedScalarFieldContainer[int]
    term_ms: int
    session_timeout_ms: int
    def __init__(self, kept: _Optional[_Iterable[int]] = ..., term_ms: _Optional[int] = ..., session_timeout_ms: _Optional[int] = ...) -> None: ...
