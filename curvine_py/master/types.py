"""Domain values of the master: what the store returns and the service converts to protobuf.

Enum values equal the protobuf enum numbers (common.proto), so conversion is a plain int cast.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field

# Re-exported for the master's modules: one definition, in core.
from curvine_py.core.posix import RENAME_EXCHANGE as RENAME_EXCHANGE  # noqa: PLC0414 - explicit re-export
from curvine_py.core.posix import RENAME_NOREPLACE as RENAME_NOREPLACE  # noqa: PLC0414 - explicit re-export
from curvine_py.core.posix import ROOT_INO as ROOT_INO  # noqa: PLC0414 - explicit re-export
from curvine_py.core.posix import SetAttrChanges as SetAttrChanges  # noqa: PLC0414 - explicit re-export

XATTR_CREATE = 1
XATTR_REPLACE = 2

PLACEMENT_HASH = "hash"
PLACEMENT_LOCAL = "local"


class FileType(enum.IntEnum):
    UNSPECIFIED = 0
    REGULAR = 1
    DIRECTORY = 2
    SYMLINK = 3
    FIFO = 4
    CHARDEV = 5
    BLOCKDEV = 6
    SOCKET = 7


class StorageClass(enum.IntEnum):
    UNSPECIFIED = 0   # inherit from the parent directory
    CACHE = 1
    DURABLE = 2

    @classmethod
    def parse(cls, text: str) -> StorageClass:
        try:
            return cls[text.strip().upper()]
        except KeyError:
            raise ValueError(f"unknown storage class {text!r} (cache or durable)") from None


@dataclass(frozen=True, slots=True)
class Attr:
    ino: int
    type: FileType
    mode: int            # permission bits incl. setuid/setgid/sticky, no S_IFMT
    uid: int
    gid: int
    size: int
    nlink: int
    atime_ns: int
    mtime_ns: int
    ctime_ns: int
    rdev: int = 0
    generation: int = 0
    block_size: int = 0
    stored_bytes: int = 0   # a regular file's committed block bytes (st_blocks; sparse and truncated files hold fewer)

    @property
    def is_dir(self) -> bool:
        return self.type == FileType.DIRECTORY


@dataclass(frozen=True, slots=True)
class DirEntry:
    name: str
    attr: Attr


@dataclass(frozen=True, slots=True)
class Policy:
    """A directory's data policy. Zero values mean "default": replicas 0 = class default, block_size
    0 = cluster default, placement "" = hash; storage_class UNSPECIFIED = inherit the class."""

    storage_class: StorageClass = StorageClass.UNSPECIFIED
    replicas: int = 0
    ttl_ms: int = 0
    block_size: int = 0
    placement: str = ""
    compress: bool = False


@dataclass(frozen=True, slots=True)
class PolicyAt:
    policy: Policy
    path: str            # where the effective policy is defined


@dataclass(frozen=True, slots=True)
class BlockInfo:
    index: int
    block_id: int
    length: int
    checksum: int = 0    # 0 = unknown (e.g. shortened by a truncate)
    worker_ids: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class FileBlocks:
    attr: Attr
    blocks: tuple[BlockInfo, ...]
    policy: Policy


@dataclass(frozen=True, slots=True)
class AddedBlock:
    block_id: int
    worker_ids: tuple[str, ...]
    storage_class: StorageClass
    ttl_ms: int
    block_size: int


@dataclass(frozen=True, slots=True)
class UnlinkResult:
    ino: int
    nlink: int


@dataclass(frozen=True, slots=True)
class RenameResult:
    replaced_ino: int = 0
    replaced_nlink: int = 0


@dataclass(frozen=True, slots=True)
class StatFs:
    capacity: int
    used: int
    available: int
    files: int
    block_size: int
    max_files: int = 0   # an inode limit (a directory quota's), 0 = none


@dataclass(frozen=True, slots=True)
class QuotaInfo:
    """A directory's quota (0 = unlimited) and the usage of its subtree: every name in it counts one
    inode, and a regular file's size in bytes (a file with two names in the subtree counts twice)."""

    ino: int
    path: str
    max_bytes: int
    max_inodes: int
    used_bytes: int
    used_inodes: int

    @property
    def limited(self) -> bool:
        return bool(self.max_bytes or self.max_inodes)


@dataclass(frozen=True, slots=True)
class NamespaceCounts:
    files: int
    directories: int
    blocks: int
    inodes: int


@dataclass(frozen=True, slots=True)
class WorkerInfo:
    worker_id: str
    host: str = ""
    port: int = 0
    unix_socket: str = ""
    node: str = ""
    capacity: int = 0
    used: int = 0
    available: int = 0
    lm_port: int = 0
    live: bool = False
    last_heartbeat_ms: int = 0
    blocks: int = 0
    objects: int = 0
    evictions: int = 0
    free_space_ratio: float = 0.0   # the worker's disk reserve (heartbeat), not persisted
    reserve_bytes: int = 0
    fs_free_bytes: int = 0
    hits: int = 0                   # KV lookups since the worker started (heartbeat), not persisted
    misses: int = 0
    metrics_port: int = 0           # its /metrics port (registration, heartbeat), not persisted


@dataclass(frozen=True, slots=True)
class Registered:
    cluster_id: str
    epoch: int
    heartbeat_interval_ms: int
    lease_ms: int
    delete_block_ids: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class HeartbeatResult:
    epoch: int
    reregister: bool
    delete_block_ids: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class Inventory:
    """What one worker's full block report (asked for by fsck) found against the metadata."""

    worker_id: str
    reported: int        # blocks it holds
    missing: int         # recorded copies it does not have (dropped from the metadata)
    orphans: int         # blocks it holds that nothing references
    orphans_deleted: bool = False   # they were deleted on it (fsck --repair), else left there


@dataclass(frozen=True, slots=True)
class MembershipView:
    epoch: int
    workers: tuple[WorkerInfo, ...]
    cluster_id: str


@dataclass(frozen=True, slots=True)
class ClusterReport:
    cluster_id: str
    epoch: int
    workers: tuple[WorkerInfo, ...]
    capacity: int
    used: int
    available: int
    files: int
    directories: int
    blocks: int


@dataclass(frozen=True, slots=True)
class Usage:
    """A heartbeat's usage numbers."""

    capacity: int = 0
    used: int = 0
    available: int = 0
    blocks: int = 0
    objects: int = 0
    evictions: int = 0
    free_space_ratio: float = 0.0
    reserve_bytes: int = 0
    fs_free_bytes: int = 0
    hits: int = 0
    misses: int = 0
    metrics_port: int = 0


@dataclass(frozen=True, slots=True)
class Evicted:
    """What a heartbeat's evicted/bad block lists did to the namespace (for logs and tests)."""

    locations_removed: int = 0
    unlinked_inos: tuple[int, ...] = field(default=())


@dataclass(frozen=True, slots=True)
class RepairStats:
    """What re-replication did since the master started (master/repair.py)."""

    rate: int = 0                # bytes/s, 0 = off
    copied_blocks: int = 0
    copied_bytes: int = 0
    failed_copies: int = 0
    dropped_surplus: int = 0
    last_error: str = ""


@dataclass(frozen=True, slots=True)
class RoundResult:
    """One repair round."""

    copied: int = 0
    failed: int = 0
    dropped: int = 0
    throttled: bool = False      # stopped early: the byte allowance ran out
    unplaceable: int = 0         # under-replicated blocks with no live worker left to take a copy
    errors: tuple[str, ...] = field(default=())
