"""User-facing values of the client library (protobuf stays inside the client and the servers)."""
from __future__ import annotations

import stat as stat_module
from dataclasses import dataclass

from curvine_py.proto.curvine.v1 import common_pb2 as cpb

_S_IFMT = {
    cpb.REGULAR: stat_module.S_IFREG, cpb.DIRECTORY: stat_module.S_IFDIR, cpb.SYMLINK: stat_module.S_IFLNK,
    cpb.FIFO: stat_module.S_IFIFO, cpb.CHARDEV: stat_module.S_IFCHR, cpb.BLOCKDEV: stat_module.S_IFBLK,
    cpb.SOCKET: stat_module.S_IFSOCK,
}
_TYPE_NAMES = {cpb.REGULAR: "file", cpb.DIRECTORY: "dir", cpb.SYMLINK: "symlink", cpb.FIFO: "fifo",
               cpb.CHARDEV: "chardev", cpb.BLOCKDEV: "blockdev", cpb.SOCKET: "socket"}


def st_mode(attr: cpb.Attr) -> int:
    """POSIX st_mode (file type bits + permission bits) of an Attr."""
    return _S_IFMT.get(attr.type, 0) | (attr.mode & 0o7777)


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
    def of(cls, path: str, attr: cpb.Attr) -> FileStatus:
        return cls(path, attr.ino, _TYPE_NAMES.get(attr.type, "unknown"), st_mode(attr), attr.uid, attr.gid,
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
