"""Names in the mount, in master inode numbers and str names: lookup (from the hot-directory
names and the directory leases when they can answer), and the calls that add, remove or move
names (mkdir/mknod/symlink, link, unlink, rmdir, rename).

Unlinked while open (data lives until the last close): when this mount has files open, unlink asks
the master to keep an orphan; the last release frees it (ReleaseOrphan). Only handles of this
mount protect a file: another node's open handle does not (documented in docs/fuse.md).
"""
from __future__ import annotations

import logging
import stat
from collections.abc import Sequence

from curvine_py.core.domain import (
    TYPE_OF_S_IFMT,
    Attr,
    DirEntry,
    FileType,
    InodeId,
    NewNode,
    RenameResult,
    UnlinkResult,
)
from curvine_py.core.errors import CurvineError, InvalidArgument, NotFound
from curvine_py.core.keys import validate_name
from curvine_py.core.posix import check_rename_flags
from curvine_py.fuse.context import MountContext
from curvine_py.fuse.session import SessionTask

log = logging.getLogger(__name__)

def kind_of(mode: int) -> FileType:
    kind = TYPE_OF_S_IFMT.get(stat.S_IFMT(mode))
    if kind is None:
        raise InvalidArgument(f"unsupported file type {stat.S_IFMT(mode):o}")
    return kind


class Nodes:
    def __init__(self, ctx: MountContext, session: SessionTask) -> None:
        self.ctx = ctx
        self.session = session

    # -- lookup ------------------------------------------------------------------------------
    async def lookup(self, parent: InodeId, name: str) -> Attr:
        return (await self.lookup_aged(parent, name))[0]

    async def lookup_aged(self, parent: InodeId, name: str) -> tuple[Attr, float]:
        """The name's attributes and their age in seconds: 0 from the master, more when answered
        from a hot directory's names (fuse/names.py; the kernel's timeouts are shortened by it)."""
        ctx = self.ctx
        if name == "." or (name == ".." and parent == ctx.root):
            # "." in any inode (files too): how the kernel finds an inode again from a file
            # handle after dropping it (export support, open_by_handle_at). A gone inode: ESTALE.
            return ctx.note(await ctx.master_getattr(parent)), 0.0
        names = ctx.attrs.names
        try:
            if name not in (".", ".."):
                if ctx.leases.absent(parent, name):
                    validate_name(name)      # what the master would have said first (ENAMETOOLONG)
                    raise NotFound(f"{name}: no such name (directory lease)")
                held = names.get(parent, name)
                if held is not None:
                    return held
                if names.should_fetch(parent):
                    generation = names.generation
                    attr, page = await ctx.call(self._lookup_and_page, parent, name)
                    names.fill(parent, page, generation)
                    return ctx.note(attr), 0.0
            found: Attr = await ctx.call(ctx.master.lookup, parent, name)
            return ctx.note(found), 0.0
        except NotFound:
            if ctx.leases.note_miss(parent):
                await self.session.acquire_lease(parent)
            raise

    def _lookup_and_page(self, parent: InodeId, name: str) -> tuple[Attr, Sequence[DirEntry]]:
        """In one thread hop: the lookup, then the names after it (best effort: a failed page
        costs nothing but the prefetch)."""
        master = self.ctx.master
        attr = master.lookup(parent, name)
        try:
            page: Sequence[DirEntry] = master.readdir(parent, name, self.ctx.attrs.names.page).entries
        except CurvineError as exc:
            log.debug("prefetch of names in %d failed: %s", parent, exc)
            page = ()
        return attr, page

    async def readlink(self, ino: InodeId) -> str:
        target: str = await self.ctx.icall(self.ctx.master.readlink, ino)
        return target

    # -- names added ---------------------------------------------------------------------------
    async def make(self, parent: InodeId, name: str, kind: FileType, mode: int, uid: int, gid: int, *,
                   rdev: int = 0, target: str = "") -> Attr:
        """mkdir, mknod, symlink: always exclusive."""
        ctx = self.ctx
        ctx.writable()
        node = NewNode(parent, name, kind, mode & 0o7777, uid=uid, gid=gid, rdev=rdev, target=target)
        attr: Attr = await self.session.adding_name(parent, name, ctx.creates.call(node))
        if kind == FileType.DIRECTORY:
            ctx.attrs.drop(parent)     # its nlink grew
        else:
            ctx.touch(parent)
        return ctx.note(attr)

    async def link(self, ino: InodeId, new_parent: InodeId, new_name: str) -> Attr:
        ctx = self.ctx
        ctx.writable()
        attr: Attr = await self.session.adding_name(new_parent, new_name,
                                                        ctx.icall(ctx.master.link, ino, new_parent, new_name))
        ctx.touch(new_parent)
        return ctx.note(attr)

    # -- names removed -------------------------------------------------------------------------
    async def unlink(self, parent: InodeId, name: str) -> None:
        ctx = self.ctx
        ctx.writable()
        # Ask for an orphan only when something is open here: the common case stays one call.
        keep = bool(ctx.handles.open_files)
        reply: UnlinkResult = await ctx.call(self.master_unlink, parent, name, False, keep)
        ctx.attrs.drop(reply.ino)
        ctx.touch(parent)
        await self._unlinked(reply.ino, reply.nlink, kept=keep)

    def master_unlink(self, parent: InodeId, name: str, directory: bool, keep: bool) -> UnlinkResult:
        return self.ctx.master.unlink(parent, name, directory=directory, keep_orphan=keep)

    async def _unlinked(self, ino: InodeId, nlink: int, *, kept: bool) -> None:
        if nlink > 0 or not ino:
            return
        opened = self.ctx.handles.open_files.get(ino)
        if opened is not None:
            opened.unlinked = True      # its last release frees it
        elif kept:
            # Not open here after all (or closed meanwhile): free it now. A failure only leaks
            # the orphan (the master's fsck lists it); the unlink itself succeeded.
            try:
                await self.ctx.call(self.ctx.master.release_orphan, ino)
            except CurvineError as exc:
                log.warning("could not release orphan inode %d: %s", ino, exc)

    async def rmdir(self, parent: InodeId, name: str) -> None:
        ctx = self.ctx
        ctx.writable()
        reply: UnlinkResult = await ctx.call(self.master_unlink, parent, name, True, False)
        ctx.attrs.drop(reply.ino)
        ctx.attrs.drop(parent)         # its nlink shrank
        ctx.leases.lost(reply.ino)     # nothing to answer for in a removed directory: stop renewing
        ctx.directory_removed(reply.ino)

    async def rename(self, parent: InodeId, name: str, new_parent: InodeId, new_name: str, flags: int) -> None:
        ctx = self.ctx
        ctx.writable()
        check_rename_flags(flags)      # before the round trip: the master says the same
        # A replaced file may be open here: keep it as an orphan, as unlink does.
        keep = bool(ctx.handles.open_files)
        try:
            reply = await self.session.adding_name(new_parent, new_name, ctx.call(
                self.master_rename, parent, name, new_parent, new_name, flags, keep))
        finally:
            # The moved inode's ctime, both parents, a replaced inode: rare enough to drop all.
            ctx.attrs.clear()
        if reply.replaced_ino and reply.replaced_nlink == 0:
            ctx.directory_removed(reply.replaced_ino)     # a no-op unless it is a directory open here
        await self._unlinked(reply.replaced_ino, reply.replaced_nlink, kept=keep)

    def master_rename(self, parent: InodeId, name: str, new_parent: InodeId, new_name: str, flags: int,
                      keep: bool) -> RenameResult:
        return self.ctx.master.rename(parent, name, new_parent, new_name, flags, keep_orphan=keep)
