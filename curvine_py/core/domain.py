"""The namespace's values, shared by every role: what the master's store returns, what the client
library and the mount work with, what rpc/convert.py turns into protobuf and back.

Frozen slotted dataclasses; no I/O and no generated code here. Enum values equal the protobuf
enum numbers (common.proto), so a conversion is a plain int cast. Cluster-wide values (workers,
membership, reports, fsck) are in core/cluster.py.

Ids are NewTypes of int: free at run time, but mypy --strict rejects an inode number passed where a
block id is wanted, and a bare int where either is (tests/unit/test_id_types.py). A plain int
becomes an id only where it enters from outside: rpc/convert.py (the wire), the mount's kernel
boundary (fuse/attrs.py InodeMap: pyfuse3's inode numbers are plain ints), the master's store (its
rows).
"""
from __future__ import annotations

import enum
import stat
from collections.abc import Callable
from dataclasses import FrozenInstanceError, dataclass
from typing import Any, NewType, TypeVar

InodeId = NewType("InodeId", int)       # an inode number (the root is core.posix.ROOT_INO)
BlockId = NewType("BlockId", int)       # a block's cluster-wide id, allocated by the master

XATTR_CREATE = 1             # setxattr(2) flags; the same values travel on the wire
XATTR_REPLACE = 2

T = TypeVar("T")
_set = object.__setattr__     # a deferred DirEntry's own fields, past the frozen __setattr__

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


# POSIX file type bits of each FileType, and the names `fs ls` and FileStatus show.
S_IFMT_OF = {
    FileType.REGULAR: stat.S_IFREG, FileType.DIRECTORY: stat.S_IFDIR, FileType.SYMLINK: stat.S_IFLNK,
    FileType.FIFO: stat.S_IFIFO, FileType.CHARDEV: stat.S_IFCHR, FileType.BLOCKDEV: stat.S_IFBLK,
    FileType.SOCKET: stat.S_IFSOCK,
}
TYPE_OF_S_IFMT = {bits: kind for kind, bits in S_IFMT_OF.items()}
TYPE_NAMES = {FileType.REGULAR: "file", FileType.DIRECTORY: "dir", FileType.SYMLINK: "symlink",
              FileType.FIFO: "fifo", FileType.CHARDEV: "chardev", FileType.BLOCKDEV: "blockdev",
              FileType.SOCKET: "socket"}


@dataclass(frozen=True, slots=True)
class Attr:
    ino: InodeId
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

    @property
    def st_mode(self) -> int:
        """POSIX st_mode: the file type bits and the permission bits."""
        return S_IFMT_OF.get(self.type, 0) | (self.mode & 0o7777)


def blank_attr(ino: InodeId, type: FileType = FileType.UNSPECIFIED) -> Attr:
    """Attributes known by inode number only (the open of an inode the kernel names: the block map
    fetched next brings the rest)."""
    return Attr(ino=ino, type=type, mode=0, uid=0, gid=0, size=0, nlink=0, atime_ns=0, mtime_ns=0, ctime_ns=0)


@dataclass(frozen=True, slots=True, eq=False)
class DirEntry:
    """A name in a directory and its inode's attributes, compared and hashed by (name, attr).

    An entry read off the wire may build its Attr on first use (`deferred`, a subclass whose `attr`
    is a property over this class's slot): a 512-entry ReadDir page built every Attr up front for
    2.5-4 us each (bench/convert_cost.py), while the mount's name cache (fuse/names.py) serves a few
    names of most pages it fetches and reads only their names and inode numbers. An entry built
    here keeps plain slot reads (a listing reads every attr, some twice). Hence eq=False and the
    comparison below: a deferred entry equals the plain one with the same name and attributes.
    """

    name: str
    attr: Attr

    @property
    def ino(self) -> InodeId:
        """The attributes' inode number (a deferred entry knows it without building them)."""
        return self.attr.ino

    @staticmethod
    def deferred(name: str, ino: InodeId, convert: Callable[[T], Attr], raw: T) -> DirEntry:
        """An entry whose attributes are `convert(raw)`, built when first read (once: the result
        is kept and `raw` dropped). `convert` must be pure and give an Attr of inode `ino`."""
        entry = object.__new__(_DeferredEntry)
        _set(entry, "name", name)
        _set(entry, "ino", ino)
        _set(entry, "_raw", raw)
        _set(entry, "_convert", convert)
        return entry

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, DirEntry):
            return NotImplemented
        return self.name == other.name and self.attr == other.attr

    def __hash__(self) -> int:
        return hash((self.name, self.attr))

    def __reduce__(self) -> tuple[type[DirEntry], tuple[str, Attr]]:
        return DirEntry, (self.name, self.attr)


_ATTR_SLOT = DirEntry.__dict__["attr"]    # the slot under _DeferredEntry's property


class _DeferredEntry(DirEntry):
    __slots__ = ("_convert", "_raw", "ino")
    ino: InodeId                           # known off the wire (the base reads it from attr)
    _raw: object                           # the undecoded attributes (None once built)
    _convert: Callable[[Any], Attr] | None

    @property
    def attr(self) -> Attr:
        # _raw before _convert, and the builder clears them in the other order: a thread that
        # finds _convert still set also found _raw. Two threads reading a new entry at once both
        # build it (equal values, either kept). No exception on the first read (an unset slot's
        # AttributeError cost a deferred entry 0.4 us).
        raw = self._raw
        convert = self._convert
        if convert is None:
            return _ATTR_SLOT.__get__(self, DirEntry)   # type: ignore[no-any-return]
        attr = convert(raw)
        _ATTR_SLOT.__set__(self, attr)
        _set(self, "_convert", None)
        _set(self, "_raw", None)
        return attr

    def __setattr__(self, name: str, value: object) -> None:
        raise FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise FrozenInstanceError(f"cannot delete field {name!r}")

    def __repr__(self) -> str:
        return f"DirEntry(name={self.name!r}, attr={self.attr!r})"


@dataclass(frozen=True, slots=True)
class DirPage:
    """One ReadDir answer: entries after a name, in name order; `more`: ask again after the last."""

    entries: tuple[DirEntry, ...]
    more: bool


@dataclass(frozen=True, slots=True)
class NewNode:
    """A create: a file, directory, symlink, fifo or device named `name` in `parent`, owned by the
    caller. `exclusive` False: an existing regular file is returned (O_CREAT without O_EXCL), with
    `truncate` emptied (O_TRUNC)."""

    parent: InodeId
    name: str
    type: FileType
    mode: int
    uid: int = 0
    gid: int = 0
    rdev: int = 0
    target: str = ""          # a symlink's
    exclusive: bool = True
    truncate: bool = False


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
    """Where one block of a file is: its position, id, length, digest and the workers holding it."""

    index: int
    block_id: BlockId
    length: int
    checksum: int = 0    # 0 = unknown (e.g. shortened by a truncate)
    worker_ids: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class FileBlocks:
    """A file's block map as of one GetBlocks: its attributes (size, mtime and ctime name the
    content's version for the mount's page cache, fuse/pagecache.py), its blocks and its policy."""

    attr: Attr
    blocks: tuple[BlockInfo, ...]
    policy: Policy


@dataclass(frozen=True, slots=True)
class AddedBlock:
    """A block allocated for a writer: write it to every worker listed."""

    block_id: BlockId
    worker_ids: tuple[str, ...]
    storage_class: StorageClass
    ttl_ms: int
    block_size: int


@dataclass(frozen=True, slots=True)
class UnlinkResult:
    ino: InodeId
    nlink: int


@dataclass(frozen=True, slots=True)
class RenameResult:
    replaced_ino: InodeId = InodeId(0)
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

    ino: InodeId
    path: str
    max_bytes: int
    max_inodes: int
    used_bytes: int
    used_inodes: int

    @property
    def limited(self) -> bool:
        return bool(self.max_bytes or self.max_inodes)


@dataclass(frozen=True, slots=True)
class DirLease:
    """An AcquireDirLease answer: granted, every name of the directory at the grant, used for at
    most `term_ms` after the request was sent; or refused (`granted` False)."""

    granted: bool
    term_ms: int = 0
    names: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class LeaseRenewal:
    """A RenewDirLeases answer: the directories still leased, the term, the session's timeout."""

    kept: tuple[InodeId, ...]
    term_ms: int
    session_timeout_ms: int
