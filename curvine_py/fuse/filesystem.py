"""The mount's semantics, in master inode numbers and str names: what each FUSE request does with
the master (control calls) and with open files (data calls through CurvineFile).

Consistency (ARCHITECTURE.md "Semantics"): close-to-open. `open` fetches the block map, `flush`
(every close), `fsync` and the last `release` commit size and blocks to the master. One inode open
several times in this mount shares one CurvineFile, so descriptors of one mount see each other's
writes at once. Attributes of a file with uncommitted writes are overlaid with the local size and
mtime, so the kernel never sees it shrink back to the committed size.

Unlinked while open (data lives until the last close): when this mount has files open, unlink asks
the master to keep an orphan; the last release frees it (ReleaseOrphan). Only handles of this
mount protect a file: another node's open handle does not (documented in docs/fuse.md).

setuid/setgid clearing: libfuse negotiates FUSE_HANDLE_KILLPRIV, so the kernel leaves it to us.
We apply the Linux rules: a write or truncate by a non-root caller, and any chown of a non-directory,
clear setuid (and setgid when group-execute is set).

Error handling: methods raise CurvineError (mapped to an errno by errors.boundary); a control call
or data call that outlives the deadline raises Timeout.
"""
from __future__ import annotations

import errno
import logging
import os
import stat
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import trio

from curvine_py.client import CurvineClient
from curvine_py.client.buffers import aligned
from curvine_py.client.files import CurvineFile
from curvine_py.core.errors import (
    CurvineError,
    InvalidArgument,
    IsADirectory,
    NoData,
    NotFound,
    NotPermitted,
)
from curvine_py.core.keys import validate_name
from curvine_py.fuse.coalesce import Coalescer
from curvine_py.fuse.dataplane import FastPathMiss, TrioBlockReader, stored_range
from curvine_py.fuse.leases import DirLeaseTable
from curvine_py.fuse.names import NameCache
from curvine_py.fuse.offload import Offload
from curvine_py.fuse.readbuf import POOLED, ReplyBuffers
from curvine_py.fuse.state import (
    AttrCache,
    DirHandle,
    FileHandle,
    Handles,
    OpenFile,
    kill_suid_sgid,
    needs_kill,
)
from curvine_py.proto.curvine.v1 import common_pb2 as cpb
from curvine_py.proto.curvine.v1 import master_pb2 as pb

log = logging.getLogger(__name__)

T = TypeVar("T")

READDIR_PAGE = 512           # entries fetched from the master per ReadDir call
RENAME_NOREPLACE = 1         # renameat2 flags, same values on the wire (master.proto)
RENAME_EXCHANGE = 2
CAPABILITY = "security.capability"
# Bytes fetched ahead of a sequential reader, in the background: the kernel's own read-ahead
# (4 MiB) keeps a few 1 MiB requests in flight; these find their chunk already fetched.
READ_AHEAD = int(os.environ.get("CURVINE_FUSE_READ_AHEAD", "0"))
DEFAULT_LEASE_TERM_S = 2.0   # until the master tells its own (renewals run every quarter term)
DEFAULT_HEARTBEAT_S = 1.0    # until the master tells its session timeout (a third of it)

_KIND_BY_IFMT = {
    stat.S_IFREG: cpb.REGULAR, stat.S_IFDIR: cpb.DIRECTORY, stat.S_IFLNK: cpb.SYMLINK,
    stat.S_IFIFO: cpb.FIFO, stat.S_IFCHR: cpb.CHARDEV, stat.S_IFBLK: cpb.BLOCKDEV,
    stat.S_IFSOCK: cpb.SOCKET,
}


class ReadOnly(CurvineError):
    errno = errno.EROFS


class StaleHandle(CurvineError):
    """The inode the kernel names is gone (replaced or removed on another node). ESTALE makes the
    VFS redo the path lookup once (LOOKUP_REVAL) for open/stat, which finds the new inode: the
    NFS mechanism, so a name replaced elsewhere never looks missing for the entry timeout."""

    errno = errno.ESTALE


@dataclass(frozen=True, slots=True)
class AttrChanges:
    """A setattr request as the kernel sent it (None: leave alone)."""
    mode: int | None = None
    uid: int | None = None
    gid: int | None = None
    size: int | None = None
    atime_ns: int | None = None
    mtime_ns: int | None = None
    ctime_ns: int | None = None


@dataclass(frozen=True, slots=True)
class Listed:
    offset: int
    name: str
    attr: cpb.Attr
    dot: bool          # "." or "..": the kernel takes no reference for these


def kind_of(mode: int) -> cpb.FileType:
    kind = _KIND_BY_IFMT.get(stat.S_IFMT(mode))
    if kind is None:
        raise InvalidArgument(f"unsupported file type {stat.S_IFMT(mode):o}")
    return kind


class Filesystem:
    def __init__(self, client: CurvineClient, offload: Offload, *, root: int, node: str,
                 read_only: bool = False, attr_ttl: float = 0.0, names_ttl: float = 0.0,
                 reader: TrioBlockReader | None = None, dir_leases: bool = True) -> None:
        self.client = client
        self.master = client.master
        self.offload = offload
        self.root = root
        self.node = node
        self.read_only = read_only
        self.handles = Handles()
        self.buffers = ReplyBuffers()
        self.attrs = AttrCache(attr_ttl, names=NameCache(names_ttl))
        self.leases = DirLeaseTable(enabled=dir_leases)
        self._creates: Coalescer[pb.CreateRequest, cpb.Attr] = Coalescer(
            lambda request: self._call(self.master.create, request),
            lambda requests: self._call(self.master.create_many, requests))
        self._lease_term_s = DEFAULT_LEASE_TERM_S
        self._heartbeat_s = DEFAULT_HEARTBEAT_S
        self.reader = reader
        # security.capability is asked for before every write (the kernel's killpriv check):
        # its answers are cached like attributes. ino -> (expiry, value or None).
        self._capability: dict[int, tuple[float, bytes | None]] = {}

    # -- helpers -----------------------------------------------------------------------------
    async def _call(self, fn: Callable[..., T], *args: Any) -> T:
        """A control call addressed by (parent, name): NotFound means the name (ENOENT)."""
        return await self.offload.control_call(fn, *args)

    async def _icall(self, fn: Callable[..., T], *args: Any) -> T:
        """A control call addressed by inode: NotFound means the kernel's inode is stale."""
        try:
            return await self.offload.control_call(fn, *args)
        except NotFound as exc:
            self.attrs.clear()     # whatever named this inode is out of date: re-resolve at the master
            raise StaleHandle(str(exc)) from None

    async def _data(self, fn: Callable[..., T], *args: Any) -> T:
        """A data call on an open file (may touch master and workers)."""
        try:
            return await self.offload.data_call(fn, *args)
        except NotFound as exc:
            self.attrs.clear()
            raise StaleHandle(str(exc)) from None

    def _writable(self) -> None:
        if self.read_only:
            raise ReadOnly("read-only mount")

    def overlay(self, attr: cpb.Attr) -> tuple[int | None, int | None]:
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

    async def _commit(self, opened: OpenFile) -> None:
        if not opened.file.dirty:
            return
        self.attrs.drop(opened.ino)
        await self._data(opened.file.commit)
        opened.committed_mtime = opened.file.attr.mtime_ns
        self._note(opened.file.attr)

    def _note(self, attr: cpb.Attr) -> cpb.Attr:
        """Every attribute reply passes here: open files learn the mode, the cache the rest."""
        opened = self.handles.open_files.get(attr.ino)
        if opened is not None:
            opened.mode = attr.mode
        self.attrs.put(attr)
        return attr

    def _touch(self, directory: int) -> None:
        self.attrs.touch(directory, time.time_ns())

    # -- names -------------------------------------------------------------------------------
    async def lookup(self, parent: int, name: str) -> cpb.Attr:
        return (await self.lookup_aged(parent, name))[0]

    async def lookup_aged(self, parent: int, name: str) -> tuple[cpb.Attr, float]:
        """The name's attributes and their age in seconds: 0 from the master, more when answered
        from a hot directory's names (fuse/names.py; the kernel's timeouts are shortened by it)."""
        if name == ".." and parent == self.root:
            return self._note(await self.master_getattr(parent)), 0.0
        names = self.attrs.names
        try:
            if name not in (".", ".."):
                if self.leases.absent(parent, name):
                    validate_name(name)      # what the master would have said first (ENAMETOOLONG)
                    raise NotFound(f"{name}: no such name (directory lease)")
                held = names.get(parent, name)
                if held is not None:
                    return held
                if names.should_fetch(parent):
                    generation = names.generation
                    attr, page = await self._call(self._lookup_and_page, parent, name)
                    names.fill(parent, page, generation)
                    return self._note(attr), 0.0
            found: cpb.Attr = await self._call(self.master.lookup, parent, name)
            return self._note(found), 0.0
        except NotFound:
            if self.leases.note_miss(parent):
                await self._acquire_lease(parent)
            raise

    # -- directory leases (fuse/leases.py) -----------------------------------------------------
    async def _acquire_lease(self, directory: int) -> None:
        sent_at = self.leases.clock()
        try:
            reply: pb.DirLeaseReply = await self._call(self.master.acquire_dir_lease, directory)
        except CurvineError as exc:
            log.debug("directory lease on %d: %s", directory, exc)
            self.leases.refused(directory)
            return
        if not reply.granted:
            self.leases.refused(directory)
            return
        self._lease_term_s = reply.term_ms / 1000
        if not self.leases.granted(directory, reply.names, self._lease_term_s, sent_at):
            await self._release_leases([directory])

    async def _release_leases(self, directories: list[int]) -> None:
        try:
            await self._call(self.master.release_dir_leases, directories)
        except CurvineError as exc:    # they run out at the end of their term anyway
            log.debug("release of directory leases %s: %s", directories, exc)

    async def _adding_name(self, directory: int, name: str, call: Awaitable[T]) -> T:
        """A control call that adds `name` to `directory`: the lease learns of it, or is dropped
        when the outcome is not known for sure."""
        try:
            result = await call
        except BaseException:
            self.leases.lost(directory)
            raise
        self.leases.added(directory, name)
        return result

    async def keep_session(self) -> None:
        """Renews this mount's directory leases every quarter term and gives back the lost ones;
        the same call is the session's heartbeat (master/sessions.py: a silent mount's kept
        orphans are released), sent at least every third of the master's session timeout."""
        last_heartbeat = -1e9
        while True:
            await trio.sleep(self._lease_term_s / 4 if self._lease_term_s > 0 else self._heartbeat_s)
            directories = self.leases.held_directories()
            sent_at = self.leases.clock()
            if not directories and sent_at - last_heartbeat < self._heartbeat_s:
                continue
            try:
                reply: pb.DirLeasesReply = await self._call(self.master.renew_dir_leases, directories)
            except CurvineError as exc:    # unused leases run out by themselves
                log.debug("renewal of directory leases: %s", exc)
                continue
            last_heartbeat = sent_at
            self._lease_term_s = reply.term_ms / 1000
            if reply.session_timeout_ms:
                self._heartbeat_s = reply.session_timeout_ms / 3000
            gone = self.leases.renewed(directories, reply.kept, self._lease_term_s, sent_at)
            if gone:
                await self._release_leases(gone)

    def _lookup_and_page(self, parent: int, name: str) -> tuple[cpb.Attr, Sequence[pb.DirEntry]]:
        """In one thread hop: the lookup, then the names after it (best effort: a failed page
        costs nothing but the prefetch)."""
        attr = self.master.lookup(parent, name)
        try:
            page: Sequence[pb.DirEntry] = self.master.readdir(parent, name, self.attrs.names.page).entries
        except CurvineError as exc:
            log.debug("prefetch of names in %d failed: %s", parent, exc)
            page = ()
        return attr, page

    async def master_getattr(self, ino: int) -> cpb.Attr:
        attr: cpb.Attr = await self._icall(self.master.getattr, ino)
        return attr

    async def getattr(self, ino: int) -> cpb.Attr:
        cached = self.attrs.get(ino)
        if cached is not None:
            return cached
        return self._note(await self.master_getattr(ino))

    async def readlink(self, ino: int) -> str:
        target: str = await self._icall(self.master.readlink, ino)
        return target

    async def make(self, parent: int, name: str, kind: cpb.FileType, mode: int, uid: int, gid: int, *,
                   rdev: int = 0, target: str = "") -> cpb.Attr:
        """mkdir, mknod, symlink: always exclusive."""
        self._writable()
        request = pb.CreateRequest(parent=parent, name=name, type=kind, mode=mode & 0o7777,
                                   caller=pb.Caller(uid=uid, gid=gid), rdev=rdev, symlink_target=target,
                                   exclusive=True)
        attr: cpb.Attr = await self._adding_name(parent, name, self._creates.call(request))
        if kind == cpb.DIRECTORY:
            self.attrs.drop(parent)     # its nlink grew
        else:
            self._touch(parent)
        return self._note(attr)

    async def link(self, ino: int, new_parent: int, new_name: str) -> cpb.Attr:
        self._writable()
        attr: cpb.Attr = await self._adding_name(new_parent, new_name,
                                                 self._icall(self.master.link, ino, new_parent, new_name))
        self._touch(new_parent)
        return self._note(attr)

    async def unlink(self, parent: int, name: str) -> None:
        self._writable()
        # Ask for an orphan only when something is open here: the common case stays one call.
        keep = bool(self.handles.open_files)
        reply: pb.UnlinkReply = await self._call(self.master_unlink, parent, name, False, keep)
        self.attrs.drop(reply.ino)
        self._touch(parent)
        await self._unlinked(reply.ino, reply.nlink, kept=keep)

    def master_unlink(self, parent: int, name: str, directory: bool, keep: bool) -> pb.UnlinkReply:
        return self.master.unlink(parent, name, directory=directory, keep_orphan=keep)

    async def _unlinked(self, ino: int, nlink: int, *, kept: bool) -> None:
        if nlink > 0 or not ino:
            return
        opened = self.handles.open_files.get(ino)
        if opened is not None:
            opened.unlinked = True      # its last release frees it
        elif kept:
            # Not open here after all (or closed meanwhile): free it now. A failure only leaks
            # the orphan (the master's fsck lists it); the unlink itself succeeded.
            try:
                await self._call(self.master.release_orphan, ino)
            except CurvineError as exc:
                log.warning("could not release orphan inode %d: %s", ino, exc)

    async def rmdir(self, parent: int, name: str) -> None:
        self._writable()
        reply: pb.UnlinkReply = await self._call(self.master_unlink, parent, name, True, False)
        self.attrs.drop(reply.ino)
        self.attrs.drop(parent)         # its nlink shrank
        self.leases.lost(reply.ino)     # nothing to answer for in a removed directory: stop renewing

    async def rename(self, parent: int, name: str, new_parent: int, new_name: str, flags: int) -> None:
        self._writable()
        if flags & ~(RENAME_NOREPLACE | RENAME_EXCHANGE):
            raise InvalidArgument(f"unsupported rename flags {flags:#x}")
        # A replaced file may be open here: keep it as an orphan, as unlink does.
        keep = bool(self.handles.open_files)
        try:
            reply = await self._adding_name(new_parent, new_name, self._call(
                self.master_rename, parent, name, new_parent, new_name, flags, keep))
        finally:
            # The moved inode's ctime, both parents, a replaced inode: rare enough to drop all.
            self.attrs.clear()
        await self._unlinked(reply.replaced_ino, reply.replaced_nlink, kept=keep)

    def master_rename(self, parent: int, name: str, new_parent: int, new_name: str, flags: int,
                      keep: bool) -> pb.RenameReply:
        return self.master.rename(parent, name, new_parent, new_name, flags, keep_orphan=keep)

    # -- attributes --------------------------------------------------------------------------
    async def setattr(self, ino: int, changes: AttrChanges, caller_uid: int) -> cpb.Attr:
        self._writable()
        request = pb.SetAttrRequest(ino=ino)
        if changes.mode is not None:
            request.mode = changes.mode & 0o7777
        if changes.uid is not None:
            request.uid = changes.uid
        if changes.gid is not None:
            request.gid = changes.gid
        if changes.size is not None:
            if changes.size < 0:
                raise InvalidArgument("negative size")
            request.size = changes.size
        if changes.atime_ns is not None:
            request.atime_ns = changes.atime_ns
        if changes.mtime_ns is not None:
            request.mtime_ns = changes.mtime_ns
        if changes.ctime_ns is not None:
            request.ctime_ns = changes.ctime_ns
        chown = changes.uid is not None or changes.gid is not None
        truncate_by_user = changes.size is not None and caller_uid != 0
        if (chown or truncate_by_user) and changes.mode is None:
            current = await self._current_mode(ino)
            if current is not None and needs_kill(current[1]) and current[0] != cpb.DIRECTORY:
                request.mode = kill_suid_sgid(current[1])
        opened = self.handles.open_files.get(ino)
        if opened is None:
            attr: cpb.Attr = await self._icall(self.master.setattr, request)
            return self._note(attr)
        if changes.mtime_ns is not None and opened.file.dirty:
            # An explicit mtime (cp -p, tar, rsync -t) must not be overwritten by a later commit.
            await self._commit(opened)
        attr = await self._data(opened.file.setattr, request)
        return self._note(attr)

    async def _current_mode(self, ino: int) -> tuple[int, int] | None:
        attr = await self.getattr(ino)
        return attr.type, attr.mode

    # -- files -------------------------------------------------------------------------------
    async def create(self, parent: int, name: str, mode: int, flags: int, uid: int,
                     gid: int) -> tuple[FileHandle, cpb.Attr]:
        self._writable()
        request = pb.CreateRequest(parent=parent, name=name, type=cpb.REGULAR, mode=mode & 0o7777,
                                   caller=pb.Caller(uid=uid, gid=gid), exclusive=bool(flags & os.O_EXCL),
                                   truncate=bool(flags & os.O_TRUNC))
        attr: cpb.Attr = await self._adding_name(parent, name, self._creates.call(request))
        self._touch(parent)
        self._note(attr)
        # A file of size 0 has no blocks: skip GetBlocks (one round trip less per create).
        known = pb.BlocksReply(attr=attr) if attr.size == 0 else None
        handle = await self._open_attr(attr, flags, uid, known)
        return handle, attr

    async def open(self, ino: int, flags: int, uid: int) -> FileHandle:
        accmode = flags & os.O_ACCMODE
        if accmode != os.O_RDONLY or flags & os.O_TRUNC:
            self._writable()
        if flags & os.O_TRUNC:
            self.attrs.drop(ino)
            request = pb.SetAttrRequest(ino=ino, size=0, mtime_now=True)
            if uid != 0:
                current = await self._current_mode(ino)
                if current is not None and needs_kill(current[1]):
                    request.mode = kill_suid_sgid(current[1])
            opened = self.handles.open_files.get(ino)
            if opened is not None:
                await self._data(opened.file.setattr, request)
            else:
                await self._icall(self.master.setattr, request)
        return await self._open_attr(cpb.Attr(ino=ino), flags, uid, None)

    async def _open_attr(self, attr: cpb.Attr, flags: int, uid: int, known: pb.BlocksReply | None) -> FileHandle:
        ino = attr.ino
        opened = self.handles.open_files.get(ino)
        if opened is not None:
            opened.handles += 1     # claimed before the await: a concurrent release keeps it
            try:
                await self._data(opened.file.refresh)   # close-to-open on re-open
            except BaseException:
                opened.handles -= 1
                raise
        else:
            # A known (empty) block map needs no round trip: build it here, without a thread hop.
            file = self._new_file(attr, known) if known is not None else await self._data(self._new_file, attr, None)
            opened = self.handles.open_files.get(ino)   # another open may have won meanwhile
            if opened is None:
                opened = self.handles.open_files[ino] = OpenFile(ino, file, self._mode_of(file))
            opened.handles += 1
        self._note(opened.file.attr)
        handle = FileHandle(self.handles.new_id(), opened, uid, (flags & os.O_ACCMODE) != os.O_RDONLY)
        self.handles.files[handle.fh] = handle
        return handle

    def _new_file(self, attr: cpb.Attr, known: pb.BlocksReply | None) -> CurvineFile:
        return CurvineFile(self.client.blocks, attr, node=self.node, writable=True, blocks=known,
                           read_ahead=READ_AHEAD, write_behind=True)

    @staticmethod
    def _mode_of(file: CurvineFile) -> int:
        return int(file.attr.mode)

    def _handle(self, fh: int) -> FileHandle:
        handle = self.handles.files.get(fh)
        if handle is None:
            raise CurvineError(f"unknown file handle {fh}", errno=errno.EBADF)
        return handle

    async def read(self, fh: int, offset: int, size: int) -> memoryview:
        opened = self._handle(fh).open
        buffer = self.buffers.acquire(size)
        n = opened.file.try_pread_into(offset, buffer[:size])     # in memory: no thread hop
        if n is None and self.reader is not None:
            n = await self._fast_read(opened, offset, buffer[:size])  # trio sockets: no thread hop
        if n is None:
            n = await self._data(opened.file.pread_into, offset, buffer[:size])
        self.buffers.defer(buffer)   # no await from here to the reply (readbuf.py)
        return buffer[:n]

    async def _fast_read(self, opened: OpenFile, offset: int, out: memoryview) -> int | None:
        """The read through dataplane.TrioBlockReader; None to use the threaded client instead
        (busy file, membership due for a refresh, or any trouble with a worker)."""
        assert self.reader is not None
        view = self.client.blocks.membership.peek()
        plan = opened.file.try_plan_read(offset, out) if view is not None else None
        if plan is None or view is None:
            return None
        length, pieces = plan
        try:
            for block, inner, target in pieces:
                start, want, minimum = stored_range(block, inner, len(target))
                if start == inner and want == len(target):
                    await self.reader.read(view, block, start, want, target, minimum)
                    continue
                scratch = aligned(want) if want > POOLED else self.buffers.acquire(want)
                data = await self.reader.read(view, block, start, want, scratch, minimum)
                target[:] = data[inner - start:inner - start + len(target)]
                self.buffers.defer(scratch)
        except FastPathMiss as exc:
            log.debug("fast read of inode %d at %d: %s; using the threaded client", opened.ino, offset, exc)
            return None
        return length

    async def write(self, fh: int, offset: int, data: bytes) -> int:
        handle = self._handle(fh)
        opened = handle.open
        if handle.uid != 0 and needs_kill(opened.mode):
            request = pb.SetAttrRequest(ino=opened.ino, mode=kill_suid_sgid(opened.mode))
            attr: cpb.Attr = await self._icall(self.master.setattr, request)
            opened.mode = attr.mode
        n = opened.file.try_pwrite(offset, data)      # into memory: no thread hop
        if n is None:
            n = await self._data(opened.file.pwrite, offset, data)
        opened.last_write_ns = time.time_ns()
        return n

    async def flush(self, fh: int) -> None:
        await self._commit(self._handle(fh).open)

    async def fsync(self, fh: int) -> None:
        await self.flush(fh)

    async def release(self, fh: int) -> None:
        handle = self.handles.files.pop(fh, None)
        if handle is None:
            return
        opened = handle.open
        opened.handles -= 1
        if opened.handles > 0:
            return
        try:
            await self._commit(opened)
        except CurvineError as exc:
            # close(2) already got flush's answer; this only catches writes after the last flush
            # (mmap write-back), so say it loudly.
            log.error("commit of inode %d at release failed, its last writes are lost: %s", opened.ino, exc)
        finally:
            # Re-check after the await: an open may have claimed it meanwhile (state.py's rule).
            if opened.handles == 0 and self.handles.open_files.get(opened.ino) is opened:
                del self.handles.open_files[opened.ino]
                # Close it here, in a thread: left to the garbage collector, io.RawIOBase.__del__
                # would retry a failed commit on whatever thread collects it (even trio's).
                try:
                    if not opened.file.try_close():     # clean and free: closed without a hop
                        await self._data(opened.file.close)
                except CurvineError as exc:
                    log.error("inode %d: closing after a failed commit failed too: %s", opened.ino, exc)
                if opened.unlinked:
                    try:
                        await self._call(self.master.release_orphan, opened.ino)
                    except CurvineError as exc:
                        log.warning("could not release orphan inode %d: %s", opened.ino, exc)

    async def commit_all(self) -> None:
        """Best effort at shutdown: commit every open file (processes may still hold them)."""
        for opened in list(self.handles.open_files.values()):
            if opened.file.dirty:
                try:
                    await self._commit(opened)
                except CurvineError as exc:
                    log.error("commit of inode %d at shutdown failed: %s", opened.ino, exc)

    # -- directories -------------------------------------------------------------------------
    async def opendir(self, ino: int) -> DirHandle:
        handle = DirHandle(self.handles.new_id(), ino)
        self.handles.dirs[handle.fh] = handle
        return handle

    def releasedir(self, fh: int) -> None:
        self.handles.dirs.pop(fh, None)

    async def readdir(self, fh: int, start: int) -> Iterator[Listed]:
        """Entries after offset `start` (one master page at most); the caller stops consuming
        when the kernel's buffer is full and the kernel asks again from the last offset it got."""
        handle = self.handles.dirs.get(fh)
        if handle is None:
            raise CurvineError(f"unknown directory handle {fh}", errno=errno.EBADF)
        dots: list[Listed] = []
        if start < 2:
            handle.page_after, handle.page_index = None, {}   # (re)started listing: fresh entries
            here = await self.getattr(handle.ino)
            if start < 1:
                dots.append(Listed(1, ".", here, True))
            parent = here if handle.ino == self.root else await self.lookup(handle.ino, "..")
            dots.append(Listed(2, "..", parent, True))
            after = ""
        elif start == 2:
            after = ""
        else:
            name = handle.names.get(start)
            if name is None:
                raise InvalidArgument(f"unknown directory offset {start}")
            after = name
        return self._listing(handle, dots, await self._page_after(handle, after))

    async def _page_after(self, handle: DirHandle, after: str) -> list[pb.DirEntry]:
        """Master entries following `after`, from the cached page when it covers them (the kernel
        asks for ~25 entries at a time, the master pages 512)."""
        position = handle.page_index.get(after) if handle.page_after is not None else None
        if after == handle.page_after:
            position = -1
        if position is not None and (position + 1 < len(handle.page) or not handle.page_more):
            return handle.page[position + 1:]   # type: ignore[return-value]
        reply = await self._icall(self.master.readdir, handle.ino, after, READDIR_PAGE)
        handle.page_after, handle.page, handle.page_more = after, list(reply.entries), reply.more
        handle.page_index = {entry.name: i for i, entry in enumerate(reply.entries)}
        return list(reply.entries)

    def _listing(self, handle: DirHandle, dots: list[Listed], entries: list[pb.DirEntry]) -> Iterator[Listed]:
        yield from dots
        for entry in entries:
            self._note(entry.attr)
            offset = handle.next_offset
            handle.next_offset += 1
            handle.names[offset] = entry.name
            yield Listed(offset, entry.name, entry.attr, False)

    # -- xattrs, statfs ----------------------------------------------------------------------
    async def getxattr(self, ino: int, name: str) -> bytes:
        if name == CAPABILITY:
            found = self._capability.get(ino)
            if found is not None and found[0] > time.monotonic():
                if found[1] is None:
                    raise NoData(f"no xattr {name!r} on inode {ino}")
                return found[1]
            try:
                value: bytes = await self._icall(self.master.getxattr, ino, name)
            except NoData:
                self._remember_capability(ino, None)
                raise
            self._remember_capability(ino, value)
            return value
        return await self._icall(self.master.getxattr, ino, name)

    def _remember_capability(self, ino: int, value: bytes | None) -> None:
        if self.attrs.ttl > 0:
            if len(self._capability) > 100_000:
                self._capability.clear()
            self._capability[ino] = (time.monotonic() + self.attrs.ttl, value)

    async def setxattr(self, ino: int, name: str, value: bytes) -> None:
        self._writable()
        self._capability.pop(ino, None)
        self.attrs.drop(ino)
        await self._icall(self.master.setxattr, ino, name, value, 0)

    async def listxattr(self, ino: int) -> list[str]:
        names: list[str] = await self._icall(self.master.listxattr, ino)
        return names

    async def removexattr(self, ino: int, name: str) -> None:
        self._writable()
        self._capability.pop(ino, None)
        self.attrs.drop(ino)
        await self._icall(self.master.removexattr, ino, name)

    async def statfs(self) -> pb.StatFsReply:
        reply: pb.StatFsReply = await self._call(self.master.statfs)
        return reply


__all__ = ["AttrChanges", "Filesystem", "IsADirectory", "Listed", "NotFound", "NotPermitted", "kind_of"]
