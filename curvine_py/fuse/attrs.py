"""Master attributes (core.domain.Attr) -> pyfuse3.EntryAttributes, and the inode number mapping.

Inode numbers are the master's (never reused), except that the mounted directory is FUSE inode 1
(pyfuse3.ROOT_INODE) whatever its master number is (--subdir). `InodeMap` does that translation in
both directions; nothing else in the mount knows about it.
"""
from __future__ import annotations

from dataclasses import dataclass

import pyfuse3

from curvine_py.core.domain import Attr, FileType, InodeId

FUSE_ROOT = int(pyfuse3.ROOT_INODE)
BLKSIZE = 1 << 20   # st_blksize: tools size their buffers by it; 1 MiB is the largest FUSE request


@dataclass(frozen=True, slots=True)
class InodeMap:
    root: InodeId   # master inode of the mounted directory

    def to_master(self, ino: int) -> InodeId:
        """The kernel's inode number (pyfuse3's, a plain int) as the master's: the one place it becomes an id."""
        return self.root if ino == FUSE_ROOT else InodeId(ino)

    def to_fuse(self, ino: int) -> int:
        if ino == self.root:
            return FUSE_ROOT
        return ino


@dataclass(frozen=True, slots=True)
class Timeouts:
    attr: float
    entry: float
    negative: float


def entry_attributes(attr: Attr, inodes: InodeMap, timeouts: Timeouts, *,
                     size: int | None = None, mtime_ns: int | None = None,
                     atime_ns: int | None = None) -> pyfuse3.EntryAttributes:
    """`size`/`mtime_ns` override the master's values for a file this mount holds open with
    uncommitted writes (the kernel must never see it shrink back to the committed size);
    `atime_ns`, an access time noted by a read and not yet sent (fuse/atime.py)."""
    entry = pyfuse3.EntryAttributes()
    entry.st_ino = inodes.to_fuse(attr.ino)
    entry.generation = attr.generation
    entry.entry_timeout = timeouts.entry
    entry.attr_timeout = timeouts.attr
    entry.st_mode = attr.st_mode
    entry.st_nlink = attr.nlink
    entry.st_uid = attr.uid
    entry.st_gid = attr.gid
    entry.st_rdev = attr.rdev
    entry.st_size = attr.size if size is None else size
    entry.st_blksize = BLKSIZE
    entry.st_blocks = st_blocks(attr, size)
    entry.st_atime_ns = attr.atime_ns if atime_ns is None else max(atime_ns, attr.atime_ns)
    entry.st_mtime_ns = attr.mtime_ns if mtime_ns is None else mtime_ns
    entry.st_ctime_ns = attr.ctime_ns if mtime_ns is None else max(mtime_ns, attr.ctime_ns)
    return entry


def st_blocks(attr: Attr, size: int | None = None) -> int:
    """512-byte units actually stored: for a regular file the bytes of its committed blocks (the
    master's count), so holes of a sparse or truncated-up file take no room and `du` tells the
    truth; with uncommitted writes open here (`size` given) the larger of that and the size, since
    where the pending bytes land is not known yet. Other types: their size."""
    if attr.type == FileType.REGULAR:
        stored = attr.stored_bytes if size is None else max(attr.stored_bytes, size)
        return -(-stored // 512)
    return -(-(attr.size if size is None else size) // 512)


def negative_entry(timeouts: Timeouts) -> pyfuse3.EntryAttributes:
    """A cached "no such name" (only with --negative-timeout > 0)."""
    entry = pyfuse3.EntryAttributes()
    entry.st_ino = 0
    entry.entry_timeout = timeouts.negative
    return entry
