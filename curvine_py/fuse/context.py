"""What every part of the mount's semantics shares (nodes, handles, setattr, readdir, xattrs): the
client and its master stub, the offload with its deadlines, the mount's tables (fuse/state.py),
the attribute cache, and the few steps they all take: a control or data call with its errno
meaning, the attribute note every reply passes through, the commit of an open file.

Consistency (ARCHITECTURE.md "Semantics"): close-to-open. `open` fetches the block map, `flush`
(every close), `fsync` and the last `release` commit size and blocks to the master. One inode open
several times in this mount shares one CurvineFile, so descriptors of one mount see each other's
writes at once. Attributes of a file with uncommitted writes are overlaid with the local size and
mtime, so the kernel never sees it shrink back to the committed size.

Error handling: methods raise CurvineError (mapped to an errno by errors.boundary); a control call
or data call that outlives the deadline raises Timeout.
"""
from __future__ import annotations

import errno
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any, TypeVar

from curvine_py.client import CurvineClient
from curvine_py.core.domain import Attr, FileType, InodeId, NewNode, blank_attr
from curvine_py.core.errors import CurvineError, NotFound
from curvine_py.fuse.coalesce import Coalescer
from curvine_py.fuse.leases import DirLeaseTable
from curvine_py.fuse.names import NameCache
from curvine_py.fuse.offload import Offload
from curvine_py.fuse.pagecache import CacheVersions
from curvine_py.fuse.readbuf import ReplyBuffers
from curvine_py.fuse.state import AttrCache, Handles, OpenFile

T = TypeVar("T")


class ReadOnly(CurvineError):
    errno = errno.EROFS


class StaleHandle(CurvineError):
    """The inode the kernel names is gone (replaced or removed on another node). ESTALE makes the
    VFS redo the path lookup once (LOOKUP_REVAL) for open/stat, which finds the new inode: the
    NFS mechanism, so a name replaced elsewhere never looks missing for the entry timeout."""

    errno = errno.ESTALE


class DataLost(CurvineError):
    """A read of an open file found no copy of a block the file's map lists (each dropped as
    corrupt, or freed): an I/O error of this file. Not ESTALE: the inode is fine, and ESTALE
    would only make the kernel retry the same read."""

    errno = errno.EIO


class MountContext:
    def __init__(self, client: CurvineClient, offload: Offload, *, root: int, node: str,
                 read_only: bool = False, attr_ttl: float = 0.0, names_ttl: float = 0.0,
                 dir_leases: bool = True, cache_versions: bool = True) -> None:
        self.client = client
        self.master = client.master
        self.offload = offload
        self.root = InodeId(root)   # a plain number from the composition root (fuse/main.py)
        self.node = node
        self.read_only = read_only
        self.handles = Handles()
        self.buffers = ReplyBuffers()
        self.attrs = AttrCache(attr_ttl, names=NameCache(names_ttl))
        self.leases = DirLeaseTable(enabled=dir_leases)
        # What the kernel's page cache holds per inode: which opens may keep it (fuse/pagecache.py).
        self.versions = CacheVersions(enabled=cache_versions)
        # Directories removed (rmdir, replaced by rename) through this mount while open here:
        # fstat of such a descriptor shows nlink 0 until the last releasedir, as on a local file
        # system, instead of ESTALE. Nothing else is kept: a removed directory is empty.
        self.removed_dirs: dict[int, Attr] = {}
        self.creates: Coalescer[NewNode, Attr] = Coalescer(
            lambda request: self.call(self.master.create, request),
            lambda requests: self.call(self.master.create_many, requests))

    # -- calls -------------------------------------------------------------------------------
    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        """A control call addressed by (parent, name): NotFound means the name (ENOENT)."""
        return await self.offload.control_call(fn, *args)

    async def icall(self, fn: Callable[..., T], *args: Any) -> T:
        """A control call addressed by inode: NotFound means the kernel's inode is stale."""
        try:
            return await self.offload.control_call(fn, *args)
        except NotFound as exc:
            self.attrs.clear()     # whatever named this inode is out of date: re-resolve at the master
            raise StaleHandle(str(exc)) from None

    async def data(self, fn: Callable[..., T], *args: Any) -> T:
        """A data call on an open file (may touch master and workers)."""
        try:
            return await self.offload.data_call(fn, *args)
        except NotFound as exc:
            self.attrs.clear()
            raise StaleHandle(str(exc)) from None

    async def read_data(self, fn: Callable[..., T], *args: Any) -> T:
        """A data call that reads an open file: NotFound means a block's copies are gone."""
        try:
            return await self.offload.data_call(fn, *args)
        except NotFound as exc:
            raise DataLost(f"a block of the file is gone from its workers: {exc}") from None

    def writable(self) -> None:
        if self.read_only:
            raise ReadOnly("read-only mount")

    # -- attributes --------------------------------------------------------------------------
    def overlay(self, attr: Attr) -> tuple[int | None, int | None]:
        """(size, mtime_ns) to show instead of the master's, for a file open here.

        With uncommitted writes: the local size and the time of the last write. After our own
        commit: still that time instead of the commit's. The kernel drops its page cache when it
        sees the mtime change (auto_inval_data, how it notices other nodes' writes); our own commit
        must not look like one, or every fsync/msync would cost a re-read of the file."""
        opened = self.handles.open_files.get(attr.ino)
        if opened is None:
            return None, None
        if opened.file.dirty:
            return opened.file.size, opened.last_write_ns or None
        if opened.last_write_ns and attr.mtime_ns == opened.committed_mtime:
            return None, opened.last_write_ns
        return None, None

    async def commit(self, opened: OpenFile) -> None:
        if not opened.file.dirty:
            return
        self.attrs.drop(opened.ino)
        self.versions.forget(opened.ino)
        await self.data(opened.file.commit)
        opened.committed_mtime = opened.file.attr.mtime_ns
        self.note(opened.file.attr)

    def note(self, attr: Attr) -> Attr:
        """Every attribute reply passes here: open files learn the mode, the cache the rest.

        A reply older than what an open file here already knows (its ctime before the file's: the
        master answered before this mount's own commit or setattr landed, the reply came back
        after) is replaced by the file's: cached or shown, it would set the kernel's size back
        (tests/fuse/test_attr_races.py)."""
        opened = self.handles.open_files.get(attr.ino)
        if opened is not None:
            if attr.ctime_ns < opened.file.attr.ctime_ns:
                attr = opened.file.attr
            opened.mode = attr.mode
        self.attrs.put(attr)
        return attr

    def touch(self, directory: int) -> None:
        self.attrs.touch(directory, time.time_ns())

    async def master_getattr(self, ino: int) -> Attr:
        attr: Attr = await self.icall(self.master.getattr, ino)
        return attr

    def directory_removed(self, ino: InodeId) -> None:
        """`ino`, a directory, lost its name here: remembered while a handle of it is open."""
        opened = [h for h in self.handles.dirs.values() if h.ino == ino]
        if not opened:
            return
        known = self.attrs.get(ino) or next((h.attr for h in opened if h.attr is not None), None)
        base = known if known is not None else blank_attr(ino)
        self.removed_dirs[ino] = replace(base, ino=ino, type=FileType.DIRECTORY, nlink=0,
                                         ctime_ns=max(base.ctime_ns, time.time_ns()))
        self.attrs.drop(ino)

    async def getattr(self, ino: int) -> Attr:
        removed = self.removed_dirs.get(ino)
        if removed is not None:
            return removed
        cached = self.attrs.get(ino)
        if cached is not None:
            return cached
        return self.note(await self.master_getattr(ino))

    async def current_mode(self, ino: int) -> tuple[int, int] | None:
        attr = await self.getattr(ino)
        return attr.type, attr.mode
