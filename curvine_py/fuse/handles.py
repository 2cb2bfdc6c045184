"""Open files of the mount: create and open (one CurvineFile per inode, shared by its handles),
read (from memory, the trio data plane, or the threaded client), write, flush/fsync (commit) and
release (the last one commits, closes, and frees an unlinked file's orphan).

Appends: an O_APPEND open for writing is served as direct I/O (FOPEN_DIRECT_IO). On a cached
open every write(2) costs the kernel two requests, a GETXATTR of security.capability (its
killpriv check: FUSE clears SB_NOSEC unless FUSE_HANDLE_KILLPRIV_V2 is negotiated, which libfuse
3.14 cannot) and the WRITE; a direct write skips the check, so it costs one, and small appends run
about twice as fast. The kernel still serialises appends to one inode and invalidates cached
pages a direct write covers, so other descriptors on this node see them; what the check did is
done here instead: setuid/setgid cleared for non-root writers (below, as for every write) and the
security.capability xattr dropped at the handle's first write (Files.drop_capability).

Where an append lands: at the end of the file as this mount knows it (the size the master had
when the file was opened or re-opened here, plus this mount's own writes since), or at the
kernel's offset if that is further. The kernel computes the offset from its cached size, which
can predate a commit from another node (a stat within the attribute timeout); the mount's open
has just fetched the block map. So on one node appends never overwrite each other, and across
nodes close-to-open holds for appends too: after a close on node A, appends through a later open
on node B follow A's data. Appends from two nodes whose opens overlap are not merged (each commit
carries its node's view; the same as O_APPEND over NFS).

Concurrency rule (fuse/state.py): the tables are touched from trio tasks only; code that checks
a table, awaits, then mutates it checks again after the await (open and release below).
"""
from __future__ import annotations

import errno
import logging
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace

from curvine_py.client.buffers import aligned
from curvine_py.client.files import CurvineFile
from curvine_py.client.membership import View
from curvine_py.core.domain import (
    Attr,
    BlockInfo,
    FileBlocks,
    FileType,
    InodeId,
    NewNode,
    Policy,
    UnlinkResult,
    blank_attr,
)
from curvine_py.core.errors import AlreadyExists, CurvineError
from curvine_py.core.layout import CHUNK_SIZE as CHUNK
from curvine_py.core.posix import SetAttrChanges, kill_suid_sgid, needs_kill
from curvine_py.core.rules import verifiable_range
from curvine_py.fuse.atime import AtimeUpdates
from curvine_py.fuse.blockrecv import BlockReceiver
from curvine_py.fuse.context import MountContext
from curvine_py.fuse.dataplane import FastPathMiss, TrioBlockReader
from curvine_py.fuse.pagecache import Version
from curvine_py.fuse.prefetch import ChunkRuns
from curvine_py.fuse.readbuf import POOLED
from curvine_py.fuse.session import SessionTask
from curvine_py.fuse.state import FileHandle, OpenFile
from curvine_py.fuse.threadfetch import ThreadedFetch

log = logging.getLogger(__name__)


def appends(flags: int) -> bool:
    """An open served as direct I/O for its appends (see the module's docstring)."""
    return bool(flags & os.O_APPEND) and flags & os.O_ACCMODE != os.O_RDONLY


class Files:
    def __init__(self, ctx: MountContext, session: SessionTask, *, reader: TrioBlockReader | None = None,
                 read_ahead: int = 0, atime: AtimeUpdates | None = None, fetch_ahead: int = 0,
                 fetch_budget: int = 0, fetch_threads: int = 2, fetch_local: bool = False) -> None:
        self.ctx = ctx
        self.atime = atime
        self.session = session
        self.reader = reader
        # Whole-chunk reads go through runs of chunks (prefetch.py): fetched on the trio sockets
        # from TCP owners, or, with `fetch_ahead`, in threads (threadfetch.py) from any owner,
        # `fetch_ahead` bytes ahead of each read, within `fetch_budget` bytes for the whole mount.
        self.runs: ChunkRuns | None = None
        self.fetch: ThreadedFetch | None = None
        if reader is not None and fetch_ahead > 0:
            config = ctx.client.config
            receiver = None if config.tls_cert or config.tls_ca else BlockReceiver(
                token=config.token, timeout_s=ctx.client.blocks.deadline_s, max_payload=config.max_payload,
                per_worker=fetch_threads)
            fetch = self.fetch = ThreadedFetch(ctx.client.blocks, receiver, threads=fetch_threads,
                                               is_local=ctx.client.io.is_local,
                                               local=reader.local if fetch_local else None)
            self.runs = ChunkRuns(reader, ahead=fetch_ahead, budget=max(fetch_budget, 4 * CHUNK),
                                  fetch=fetch.read, local=fetch_local)
        elif reader is not None:
            self.runs = ChunkRuns(reader)
        self._peek = aligned(4096)      # a target for learning the next block of a file
        # Bytes fetched ahead of a sequential reader, in the background: the kernel's own read-ahead
        # (4 MiB) keeps a few 1 MiB requests in flight; these find their chunk already fetched.
        self.read_ahead = read_ahead
        # Told (parent, name, ino) when the mount itself removed a name the kernel may hold in its
        # dentry cache (a failed create): Operations invalidates the kernel's entry.
        self.removed_hook: Callable[[int, str, int], Awaitable[None]] | None = None
        # Removes an inode's security.capability if it has one (xattrs.Xattrs.drop_capability).
        self.drop_capability: Callable[[int], Awaitable[None]] | None = None

    # -- opening -----------------------------------------------------------------------------
    async def create(self, parent: InodeId, name: str, mode: int, flags: int, uid: int,
                     gid: int) -> tuple[FileHandle, Attr]:
        ctx = self.ctx
        ctx.writable()
        # Always exclusive first, so we know whether this call made the inode (a failed first
        # commit then removes it again); the kernel sends CREATE for names it found missing, so
        # the fallback to opening an existing file (O_CREAT without O_EXCL) is the rare race.
        node = NewNode(parent, name, FileType.REGULAR, mode & 0o7777, uid=uid, gid=gid, exclusive=True,
                       truncate=bool(flags & os.O_TRUNC))
        created = True
        try:
            attr: Attr = await self.session.adding_name(parent, name, ctx.creates.call(node))
        except AlreadyExists:
            if flags & os.O_EXCL:
                raise
            node, created = replace(node, exclusive=False), False
            attr = await self.session.adding_name(parent, name, ctx.creates.call(node))
        ctx.touch(parent)
        ctx.note(attr)
        # A file of size 0 has no blocks: skip GetBlocks (one round trip less per create).
        known = FileBlocks(attr, (), Policy()) if attr.size == 0 else None
        handle = await self._open_attr(attr, flags, uid, known, cacheable=False)
        handle.appending = appends(flags)
        if created and handle.open.handles == 1:
            handle.open.created_as = (parent, name)
        return handle, attr

    async def open(self, ino: InodeId, flags: int, uid: int) -> FileHandle:
        ctx = self.ctx
        accmode = flags & os.O_ACCMODE
        if accmode != os.O_RDONLY or flags & os.O_TRUNC:
            ctx.writable()
        if flags & os.O_TRUNC:
            ctx.attrs.drop(ino)
            ctx.versions.forget(ino)
            changes = SetAttrChanges(size=0, mtime_now=True)
            if uid != 0:
                current = await ctx.current_mode(ino)
                if current is not None and needs_kill(current[1]):
                    changes = replace(changes, mode=kill_suid_sgid(current[1]))
            opened = ctx.handles.open_files.get(ino)
            if opened is not None:
                await ctx.data(opened.file.setattr, changes)
            else:
                await ctx.icall(ctx.master.setattr, ino, changes)
        direct = bool(flags & os.O_DIRECT) or appends(flags)
        handle = await self._open_attr(blank_attr(ino), flags, uid, None, cacheable=not direct)
        handle.appending = appends(flags)
        return handle

    async def _open_attr(self, attr: Attr, flags: int, uid: int, known: FileBlocks | None, *,
                         cacheable: bool) -> FileHandle:
        """`cacheable`: the open goes through the page cache, so it may keep what the kernel
        holds when the content is unchanged (pagecache.py); creates and O_DIRECT opens never do."""
        ctx = self.ctx
        ino = attr.ino
        version: Version | None
        opened = ctx.handles.open_files.get(ino)
        if opened is not None:
            opened.handles += 1     # claimed before the await: a concurrent release keeps it
            try:
                reloaded = await ctx.data(opened.file.refresh)   # close-to-open on re-open
            except BaseException:
                opened.handles -= 1
                raise
            # Not reloaded: uncommitted writes here, a content the master does not name.
            version = Version.of_attr(opened.file.attr) if reloaded else None
        else:
            # A known (empty) block map needs no round trip: build it here, without a thread hop.
            file, fetched = (self._new_file(attr, known) if known is not None
                             else await ctx.data(self._new_file, attr, None))
            version = Version.of_blocks(fetched)
            opened = ctx.handles.open_files.get(ino)   # another open may have won meanwhile
            if opened is None:
                opened = ctx.handles.open_files[ino] = OpenFile(ino, file, self._mode_of(file))
            elif opened.file is not file:
                version = None if opened.file.dirty else Version.of_attr(opened.file.attr)
            opened.handles += 1
        ctx.note(opened.file.attr)
        handle = FileHandle(ctx.handles.new_id(), opened, uid, (flags & os.O_ACCMODE) != os.O_RDONLY)
        if cacheable:
            # An open whose first read must move the atime drops the cache so that read arrives.
            atime_due = self.atime is not None and self.atime.due(ctx.attrs.get(ino) or opened.file.attr)
            handle.keep_cache = ctx.versions.at_open(ino, version, drop=atime_due)
            handle.new_content = not handle.keep_cache
        else:
            ctx.versions.forget(ino)
        ctx.handles.files[handle.fh] = handle
        return handle

    def _new_file(self, attr: Attr, known: FileBlocks | None) -> tuple[CurvineFile, FileBlocks]:
        """The file and the block map it was opened with (its block ids name the version)."""
        reply = known if known is not None else self.ctx.client.blocks.master.get_blocks(attr.ino)
        file = CurvineFile(self.ctx.client.blocks, attr, node=self.ctx.node, writable=True, blocks=reply,
                           read_ahead=self.read_ahead, write_behind=True)
        return file, reply

    @staticmethod
    def _mode_of(file: CurvineFile) -> int:
        return int(file.attr.mode)

    def _handle(self, fh: int) -> FileHandle:
        handle = self.ctx.handles.files.get(fh)
        if handle is None:
            raise CurvineError(f"unknown file handle {fh}", errno=errno.EBADF)
        return handle

    # -- data --------------------------------------------------------------------------------
    async def read(self, fh: int, offset: int, size: int) -> memoryview:
        opened = self._handle(fh).open
        buffers = self.ctx.buffers
        buffer = buffers.acquire(size)
        n = opened.file.try_pread_into(offset, buffer[:size])     # in memory: no thread hop
        if n is None and self.reader is not None:
            got = await self._fast_read(opened, offset, buffer[:size])  # trio sockets: no thread hop
            if isinstance(got, memoryview):       # a fetched chunk, answered as it is (prefetch.py)
                if self.atime is not None:
                    self.atime.read(self.ctx.attrs.get(opened.ino) or opened.file.attr)
                buffers.defer(buffer)
                return got
            n = got
        if n is None:
            n = await self.ctx.read_data(opened.file.pread_into, offset, buffer[:size])
        if self.atime is not None:
            self.atime.read(self.ctx.attrs.get(opened.ino) or opened.file.attr)
        buffers.defer(buffer)   # no await from here to the reply (readbuf.py)
        return buffer[:n]

    async def _fast_read(self, opened: OpenFile, offset: int, out: memoryview) -> int | memoryview | None:
        """The read through dataplane.TrioBlockReader: its length once in `out`, or the reply itself
        (a fetched chunk that is the whole reply); None to use the threaded client instead (busy
        file, membership due for a refresh, or any trouble with a worker)."""
        assert self.reader is not None
        view = self.ctx.client.blocks.membership.peek()
        plan = opened.file.try_plan_read(offset, out) if view is not None else None
        if plan is None or view is None:
            return None
        length, pieces = plan
        try:
            runs = self.runs
            if runs is not None and len(pieces) == 1:
                block, inner, target = pieces[0]
                # Through runs: whole-chunk reads, reads of chunks already listed, and (fetching
                # ahead) the first read of a file, which starts the fetch of its first `ahead` bytes.
                if runs.wanted(view, block, len(out), first=offset < CHUNK) or runs.listed(block, inner):
                    self._fetch_ahead(opened, view, block, inner)
                    got = await self._from_runs(view, block, inner, target, whole=len(target) == length,
                                                ino=opened.ino)
                    if got is not None:
                        return got if isinstance(got, memoryview) else length
            for block, inner, target in pieces:
                # Pieces hold stored bytes only (try_plan_read zero-fills the rest), so the
                # range's `stored` is the whole target.
                span = verifiable_range(block.length, block.checksum != 0, inner, len(target))
                if span.direct:
                    await self.reader.read(view, block, span.offset, span.length, target, span.minimum)
                    continue
                want = span.length
                scratch = aligned(want) if want > POOLED else self.ctx.buffers.acquire(want)
                data = await self.reader.read(view, block, span.offset, want, scratch, span.minimum)
                target[:span.stored] = data[span.skip:span.skip + span.stored]
                self.ctx.buffers.defer(scratch)
        except FastPathMiss as exc:
            log.debug("fast read of inode %d at %d: %s; using the threaded client", opened.ino, offset, exc)
            return None
        return length

    def _fetch_ahead(self, opened: OpenFile, view: View, block: BlockInfo, inner: int) -> None:
        """Runs for the `ahead` bytes from `inner` on (prefetch.py), into the file's next blocks
        when the window passes this one's end."""
        runs = self.runs
        assert runs is not None
        if not runs.ahead:
            return
        file = opened.file
        left = inner + runs.ahead
        while True:
            fitted = runs.fetch_ahead(view, block, inner, left, opened.ino)
            left -= block.length
            if not fitted or left <= 0 or block.length != file.block_size or self.read_ahead:
                return      # (the client's own read-ahead tracks every planned read: not disturbed)
            plan = file.try_plan_read((block.index + 1) * file.block_size, self._peek[:1])
            if plan is None or not plan[1]:
                return
            block, inner = plan[1][0][0], 0

    async def _from_runs(self, view: View, block: BlockInfo, inner: int, target: memoryview, *,
                         whole: bool, ino: int) -> int | memoryview | None:
        """`target` (stored bytes of one block) from chunk runs (prefetch.py): the chunk's view when
        it is exactly the whole reply, else copied in (then its length); None when a chunk fits no
        run (the budget is held by others: the caller reads directly). Raises FastPathMiss."""
        assert self.runs is not None
        runs = self.runs
        position, end = inner, inner + len(target)
        while position < end:
            start = position - position % CHUNK
            data = await runs.chunk(view, block, start, ino)
            if data is None:
                return None
            stop = min(end, start + CHUNK)
            if len(data) < stop - start:
                raise FastPathMiss(f"block {block.block_id:x}: chunk at {start} is short")
            # The chunk is the whole reply only when it is the whole target: a target that began
            # in the previous chunk has that part copied in already (a short reply reads as EOF).
            if whole and position == inner == start and stop == end and len(data) == stop - start:
                runs.taken(block, start)
                return data          # no await from here to the reply (prefetch.py)
            target[position - inner:stop - inner] = data[position - start:stop - start]
            runs.used(block, start, stop - position)     # taken once all of it was copied out
            position = stop
        return len(target)

    async def write(self, fh: int, offset: int, data: bytes) -> int:
        ctx = self.ctx
        handle = self._handle(fh)
        opened = handle.open
        if handle.uid != 0 and needs_kill(opened.mode):
            attr: Attr = await ctx.icall(ctx.master.setattr, opened.ino, SetAttrChanges(mode=kill_suid_sgid(opened.mode)))
            opened.mode = attr.mode
        if handle.appending and not handle.caps_dropped and self.drop_capability is not None:
            handle.caps_dropped = True     # once per handle, even when it fails (no deadline per append)
            try:
                await self.drop_capability(opened.ino)
            except CurvineError as exc:
                # As the kernel's own check: one that cannot ask lets the write through.
                log.warning("inode %d: security.capability not checked before appending: %s", opened.ino, exc)
        if handle.appending:
            # The end of the file as this mount knows it, when the kernel's is older (module docstring).
            offset = max(offset, opened.file.size)
        ctx.versions.forget(opened.ino)
        n = opened.file.try_pwrite(offset, data)      # into memory: no thread hop
        if n is None:
            n = await ctx.data(opened.file.pwrite, offset, data)
        opened.last_write_ns = time.time_ns()
        return n

    # -- commit and close --------------------------------------------------------------------
    async def flush(self, fh: int) -> None:
        opened = self._handle(fh).open
        try:
            await self.ctx.commit(opened)
        except CurvineError:
            await self._discard_failed_create(opened)
            raise
        opened.created_as = None     # published: from now on the file stays whatever happens

    async def _discard_failed_create(self, opened: OpenFile) -> None:
        """A file this mount created whose first commit failed (ENOSPC, a worker lost) leaves
        nothing visible: its name is removed if it still names this inode and no other handle
        has the file open. Best effort: what cannot be removed stays, and is logged.

        The lookup and the unlink are two calls: a rename onto the name by another node in
        between would be removed instead (the master has no conditional unlink)."""
        place, opened.created_as = opened.created_as, None
        if place is None or opened.handles > 1:
            return
        parent, name = place
        ctx = self.ctx
        try:
            found: Attr = await ctx.call(ctx.master.lookup, parent, name)
            if found.ino != opened.ino:
                return
            reply: UnlinkResult = await ctx.call(self._unlink_kept, parent, name)
        except CurvineError as exc:
            log.warning("inode %d: its first commit failed and its name %r could not be removed: %s",
                        opened.ino, name, exc)
            return
        log.info("inode %d: first commit failed, name %r removed again", opened.ino, name)
        ctx.attrs.drop(opened.ino)
        ctx.touch(parent)
        if self.removed_hook is not None:
            await self.removed_hook(parent, name, opened.ino)
        if reply.nlink == 0:
            opened.unlinked = True    # still open here: its last release frees the orphan

    def _unlink_kept(self, parent: InodeId, name: str) -> UnlinkResult:
        return self.ctx.master.unlink(parent, name, directory=False, keep_orphan=True)

    async def fsync(self, fh: int) -> None:
        await self.flush(fh)

    async def release(self, fh: int) -> None:
        ctx = self.ctx
        handle = ctx.handles.files.pop(fh, None)
        if handle is None:
            return
        opened = handle.open
        opened.handles -= 1
        if opened.handles > 0:
            return
        try:
            await ctx.commit(opened)
        except CurvineError as exc:
            # close(2) already got flush's answer; this only catches writes after the last flush
            # (mmap write-back), so say it loudly.
            log.error("commit of inode %d at release failed, its last writes are lost: %s", opened.ino, exc)
            await self._discard_failed_create(opened)
        finally:
            # Re-check after the await: an open may have claimed it meanwhile (state.py's rule).
            if opened.handles == 0 and ctx.handles.open_files.get(opened.ino) is opened:
                del ctx.handles.open_files[opened.ino]
                if self.runs is not None:
                    self.runs.release(opened.ino)     # its unread chunks go (prefetch.py)
                # Close it here, in a thread: left to the garbage collector, io.RawIOBase.__del__
                # would retry a failed commit on whatever thread collects it (even trio's).
                try:
                    if not opened.file.try_close():     # clean and free: closed without a hop
                        await ctx.data(opened.file.close)
                except CurvineError as exc:
                    log.error("inode %d: closing after a failed commit failed too: %s", opened.ino, exc)
                if opened.unlinked:
                    try:
                        await ctx.call(ctx.master.release_orphan, opened.ino)
                    except CurvineError as exc:
                        log.warning("could not release orphan inode %d: %s", opened.ino, exc)

    async def commit_all(self) -> None:
        """Best effort at shutdown: commit every open file (processes may still hold them)."""
        for opened in list(self.ctx.handles.open_files.values()):
            if opened.file.dirty:
                try:
                    await self.ctx.commit(opened)
                except CurvineError as exc:
                    log.error("commit of inode %d at shutdown failed: %s", opened.ino, exc)
