"""pyfuse3.Operations, kept thin: names bytes <-> str, FUSE <-> master inode numbers, attributes
-> EntryAttributes, lookup counting. The semantics live in filesystem.py's parts; every handler is wrapped
by errors.boundary, the only place exceptions become FUSEError.

Lookup counts (pyfuse3's contract): every handler that replies an entry (lookup, create, mkdir,
mknod, symlink, link, and each readdirplus entry but . and ..) adds one reference; `forget`
removes them. Inode numbers are the master's and never reused, so nothing has to be freed when a
count reaches zero; the counts are kept for consistency checks and debugging.
"""
from __future__ import annotations

import errno
import logging
import os
import stat
from collections.abc import Sequence

import pyfuse3
import trio

from curvine_py.core.domain import Attr, FileType, InodeId
from curvine_py.core.errors import CurvineError, NotFound
from curvine_py.core.posix import SetAttrChanges
from curvine_py.fuse.attrs import InodeMap, Timeouts, entry_attributes, negative_entry
from curvine_py.fuse.errors import boundary
from curvine_py.fuse.filesystem import Filesystem
from curvine_py.fuse.nodes import kind_of
from curvine_py.fuse.pagecache import STATS_XATTR, RequestCounters
from curvine_py.fuse.state import LookupCounts

log = logging.getLogger(__name__)

INVALIDATE_WAIT_S = 2.0     # a kernel entry invalidation we wait for; past it the name may show briefly


def _name(raw: bytes) -> str:
    """Names travel as UTF-8 strings to the master; other bytes cannot be stored."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise CurvineError(f"name {raw!r} is not valid UTF-8", errno=errno.EILSEQ) from None


class Operations(pyfuse3.Operations):
    supports_dot_lookup = True

    def __init__(self, fs: Filesystem, timeouts: Timeouts, *, writeback_cache: bool = False,
                 direct_io: bool = False, keep_cache: bool = False) -> None:
        super().__init__()
        self.fs = fs
        self.inodes = InodeMap(fs.root)
        self.timeouts = timeouts
        self.lookups = LookupCounts()
        self.enable_writeback_cache = writeback_cache
        self._direct_io = direct_io
        self._keep_cache = keep_cache     # always keep, unvalidated (-o keep_cache)
        self.counters = RequestCounters()
        fs.files.removed_hook = self._entry_removed

    async def _entry_removed(self, parent: int, name: str, ino: int) -> None:
        """The mount removed a name on its own (a failed create): the kernel must stop showing
        it (its dentry cache would for up to the entry timeout) before the failing close returns.

        The notification blocks until the kernel takes the directory's lock, which a request we
        are serving may hold: so it runs in a thread while trio keeps serving, bounded in time."""
        def invalidate() -> None:
            pyfuse3.invalidate_entry(self.inodes.to_fuse(parent), name.encode("utf-8"),
                                     deleted=self.inodes.to_fuse(ino))

        with trio.move_on_after(INVALIDATE_WAIT_S):
            try:
                await trio.to_thread.run_sync(invalidate, abandon_on_cancel=True)
            except OSError as exc:     # ENOENT: the kernel holds no such entry, nothing to drop
                log.debug("invalidating %r in %d: %s", name, parent, exc)

    def _invalidate_attributes(self, inode: int) -> None:
        """An open found content the kernel's cached attributes may predate (committed elsewhere
        within the attr timeout): the kernel asks again before its next read, so it reads up to the
        new size, not the old one. Attributes only: no page lock is taken, so this cannot wait for
        a request we serve, and it runs inline."""
        try:
            pyfuse3.invalidate_inode(inode, attr_only=True)
        except OSError as exc:     # ENOENT: the kernel holds no such inode, nothing to drop
            log.debug("invalidating the attributes of %d: %s", inode, exc)

    # -- helpers -----------------------------------------------------------------------------
    def _m(self, ino: int) -> InodeId:
        return self.inodes.to_master(ino)

    def _entry(self, attr: Attr) -> pyfuse3.EntryAttributes:
        size, mtime = self.fs.overlay(attr)
        return entry_attributes(attr, self.inodes, self.timeouts, size=size, mtime_ns=mtime,
                                atime_ns=self.fs.atime.shown(attr.ino))

    def _reference(self, attr: Attr) -> pyfuse3.EntryAttributes:
        entry = self._entry(attr)
        self.lookups.add(entry.st_ino)
        return entry

    def _file_info(self, fh: int, *, direct: bool = False) -> pyfuse3.FileInfo:
        return pyfuse3.FileInfo(fh=fh, direct_io=self._direct_io or direct, keep_cache=self._keep_cache)

    # -- names -------------------------------------------------------------------------------
    @boundary
    async def lookup(self, parent_inode: int, name: bytes, ctx: pyfuse3.RequestContext) -> pyfuse3.EntryAttributes:
        try:
            attr, age = await self.fs.nodes.lookup_aged(self._m(parent_inode), _name(name))
        except NotFound:
            if self.timeouts.negative > 0:
                return negative_entry(self.timeouts)
            raise
        entry = self._reference(attr)
        if age > 0:     # an answer held by the mount: the kernel may keep it only for what is left
            entry.entry_timeout = max(0.0, entry.entry_timeout - age)
            entry.attr_timeout = max(0.0, entry.attr_timeout - age)
        return entry

    @boundary
    async def forget(self, inode_list: Sequence[tuple[int, int]]) -> None:
        for ino, nlookup in inode_list:
            self.lookups.forget(ino, nlookup)

    @boundary
    async def getattr(self, inode: int, ctx: pyfuse3.RequestContext) -> pyfuse3.EntryAttributes:
        return self._entry(await self.fs.getattr(self._m(inode)))

    @boundary
    async def setattr(self, inode: int, attr: pyfuse3.EntryAttributes, fields: pyfuse3.SetattrFields,
                      fh: int | None, ctx: pyfuse3.RequestContext) -> pyfuse3.EntryAttributes:
        changes = SetAttrChanges(
            mode=attr.st_mode if fields.update_mode else None,
            uid=attr.st_uid if fields.update_uid else None,
            gid=attr.st_gid if fields.update_gid else None,
            size=attr.st_size if fields.update_size else None,
            atime_ns=attr.st_atime_ns if fields.update_atime else None,
            mtime_ns=attr.st_mtime_ns if fields.update_mtime else None,
            ctime_ns=attr.st_ctime_ns if fields.update_ctime else None,
        )
        return self._entry(await self.fs.setter.setattr(self._m(inode), changes, ctx.uid))

    @boundary
    async def readlink(self, inode: int, ctx: pyfuse3.RequestContext) -> bytes:
        return (await self.fs.nodes.readlink(self._m(inode))).encode("utf-8")

    @boundary
    async def mknod(self, parent_inode: int, name: bytes, mode: int, rdev: int,
                    ctx: pyfuse3.RequestContext) -> pyfuse3.EntryAttributes:
        attr = await self.fs.nodes.make(self._m(parent_inode), _name(name), kind_of(mode), mode, ctx.uid, ctx.gid,
                                  rdev=rdev)
        return self._reference(attr)

    @boundary
    async def mkdir(self, parent_inode: int, name: bytes, mode: int,
                    ctx: pyfuse3.RequestContext) -> pyfuse3.EntryAttributes:
        attr = await self.fs.nodes.make(self._m(parent_inode), _name(name), FileType.DIRECTORY, mode, ctx.uid, ctx.gid)
        return self._reference(attr)

    @boundary
    async def symlink(self, parent_inode: int, name: bytes, target: bytes,
                      ctx: pyfuse3.RequestContext) -> pyfuse3.EntryAttributes:
        attr = await self.fs.nodes.make(self._m(parent_inode), _name(name), FileType.SYMLINK, 0o777, ctx.uid, ctx.gid,
                                  target=_name(target))
        return self._reference(attr)

    @boundary
    async def link(self, inode: int, new_parent_inode: int, new_name: bytes,
                   ctx: pyfuse3.RequestContext) -> pyfuse3.EntryAttributes:
        attr = await self.fs.nodes.link(self._m(inode), self._m(new_parent_inode), _name(new_name))
        return self._reference(attr)

    @boundary
    async def unlink(self, parent_inode: int, name: bytes, ctx: pyfuse3.RequestContext) -> None:
        await self.fs.nodes.unlink(self._m(parent_inode), _name(name))

    @boundary
    async def rmdir(self, parent_inode: int, name: bytes, ctx: pyfuse3.RequestContext) -> None:
        await self.fs.nodes.rmdir(self._m(parent_inode), _name(name))

    @boundary
    async def rename(self, parent_inode_old: int, name_old: bytes, parent_inode_new: int, name_new: bytes,
                     flags: int, ctx: pyfuse3.RequestContext) -> None:
        await self.fs.nodes.rename(self._m(parent_inode_old), _name(name_old), self._m(parent_inode_new),
                             _name(name_new), flags)

    # -- files -------------------------------------------------------------------------------
    @boundary
    async def create(self, parent_inode: int, name: bytes, mode: int, flags: int,
                     ctx: pyfuse3.RequestContext) -> tuple[pyfuse3.FileInfo, pyfuse3.EntryAttributes]:
        if stat.S_IFMT(mode) not in (0, stat.S_IFREG):
            raise CurvineError("create of a non-regular file", errno=errno.EINVAL)
        handle, attr = await self.fs.files.create(self._m(parent_inode), _name(name), mode, flags, ctx.uid, ctx.gid)
        return self._file_info(handle.fh, direct=handle.appending), self._reference(attr)

    @boundary
    async def open(self, inode: int, flags: int, ctx: pyfuse3.RequestContext) -> pyfuse3.FileInfo:
        handle = await self.fs.files.open(self._m(inode), flags, ctx.uid)
        direct = self._direct_io or bool(flags & os.O_DIRECT) or handle.appending
        keep = self._keep_cache or (handle.keep_cache and not direct)
        if handle.new_content and not self._keep_cache:
            self._invalidate_attributes(inode)
        self.counters.opens += 1
        self.counters.opens_kept_cache += keep
        return pyfuse3.FileInfo(fh=handle.fh, direct_io=direct, keep_cache=keep)

    @boundary
    async def read(self, fh: int, off: int, size: int) -> memoryview:  # type: ignore[override]
        # pyfuse3 accepts any contiguous buffer (PyObject_GetBuffer), so a view of a pooled
        # page-aligned buffer goes out without a copy to bytes.
        self.counters.reads += 1
        data = await self.fs.files.read(fh, off, size)
        self.counters.read_bytes += len(data)
        return data

    @boundary
    async def write(self, fh: int, off: int, buf: bytes) -> int:
        self.counters.writes += 1
        return await self.fs.files.write(fh, off, buf)

    @boundary
    async def flush(self, fh: int) -> None:
        await self.fs.files.flush(fh)

    @boundary
    async def fsync(self, fh: int, datasync: bool) -> None:
        await self.fs.files.fsync(fh)

    @boundary
    async def release(self, fh: int) -> None:
        await self.fs.files.release(fh)

    # -- directories -------------------------------------------------------------------------
    @boundary
    async def opendir(self, inode: int, ctx: pyfuse3.RequestContext) -> int:
        return (await self.fs.dirs.opendir(self._m(inode))).fh

    @boundary
    async def readdir(self, fh: int, start_id: int, token: pyfuse3.ReaddirToken) -> None:
        for item in await self.fs.dirs.readdir(fh, start_id):
            entry = self._entry(item.attr)
            if not pyfuse3.readdir_reply(token, item.name.encode("utf-8"), entry, item.offset):
                return
            if not item.dot:
                self.lookups.add(entry.st_ino)

    @boundary
    async def releasedir(self, fh: int) -> None:
        self.fs.dirs.releasedir(fh)

    @boundary
    async def fsyncdir(self, fh: int, datasync: bool) -> None:
        return None   # every namespace change is durable on the master before it is answered

    # -- xattrs, statfs, access --------------------------------------------------------------
    @boundary
    async def getxattr(self, inode: int, name: bytes, ctx: pyfuse3.RequestContext) -> bytes:
        if inode == pyfuse3.ROOT_INODE and name == STATS_XATTR.encode():
            runs = self.fs.files.runs
            return self.counters.as_json({"runs": runs.counters.as_dict()} if runs is not None else None)
        return await self.fs.xattrs.getxattr(self._m(inode), _name(name))

    @boundary
    async def setxattr(self, inode: int, name: bytes, value: bytes, ctx: pyfuse3.RequestContext) -> None:
        await self.fs.xattrs.setxattr(self._m(inode), _name(name), value)

    @boundary
    async def listxattr(self, inode: int, ctx: pyfuse3.RequestContext) -> list[bytes]:
        return [n.encode("utf-8") for n in await self.fs.xattrs.listxattr(self._m(inode))]

    @boundary
    async def removexattr(self, inode: int, name: bytes, ctx: pyfuse3.RequestContext) -> None:
        await self.fs.xattrs.removexattr(self._m(inode), _name(name))

    @boundary
    async def statfs(self, ctx: pyfuse3.RequestContext) -> pyfuse3.StatvfsData:
        reply = await self.fs.statfs()
        data = pyfuse3.StatvfsData()
        unit = 4096   # f_frsize: capacities are reported in 4 KiB units (df multiplies back)
        data.f_bsize = 1 << 20
        data.f_frsize = unit
        data.f_blocks = reply.capacity // unit
        data.f_bfree = reply.available // unit
        data.f_bavail = reply.available // unit
        # Inodes are rows in the master's database: no fixed limit. Report plenty free.
        data.f_files = reply.files + (1 << 32)
        data.f_ffree = 1 << 32
        data.f_favail = 1 << 32
        if reply.max_files:    # an inode quota on the mounted directory (master/store/quotas.py)
            data.f_files = reply.max_files
            data.f_ffree = data.f_favail = max(0, reply.max_files - reply.files)
        data.f_namemax = 255
        return data

    @boundary
    async def access(self, inode: int, mode: int, ctx: pyfuse3.RequestContext) -> bool:
        # default_permissions: the kernel checks modes itself and never sends ACCESS.
        return True
