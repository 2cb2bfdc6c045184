"""User-facing values of the client library (protobuf stays inside the client and the servers)."""
from __future__ import annotations

from dataclasses import dataclass

from curvine_py.core.domain import TYPE_NAMES, Attr


@dataclass(frozen=True, slots=True)
class FileStatus:
    path: str
    ino: int
    kind: str          # file, dir, symlink, fifo, chardev, blockdev, socket
    mode: int          # st_mode
    uid: int
    gid: int
    size: int
    nlink: int
    mtime_ns: int
    ctime_ns: int
    atime_ns: int

    @property
    def is_dir(self) -> bool:
        return self.kind == "dir"

    @classmethod
    def of(cls, path: str, attr: Attr) -> FileStatus:
        return cls(path, attr.ino, TYPE_NAMES.get(attr.type, "unknown"), attr.st_mode, attr.uid, attr.gid,
                   attr.size, attr.nlink, attr.mtime_ns, attr.ctime_ns, attr.atime_ns)


@dataclass(frozen=True, slots=True)
class Quota:
    """A directory's quota (0 = unlimited) and the usage of its subtree (each name counts one inode,
    a regular file its size in bytes)."""

    max_bytes: int
    max_inodes: int
    used_bytes: int
    used_inodes: int


@dataclass(frozen=True, slots=True)
class DiskUsage:
    """`FileSystem.df`: the cluster's space, bounded by the nearest directory quota of the path."""

    capacity: int        # bytes (a byte quota's limit when there is one)
    used: int
    available: int
    files: int           # inodes in use
    max_files: int       # an inode quota's limit, 0 = none
    block_size: int
