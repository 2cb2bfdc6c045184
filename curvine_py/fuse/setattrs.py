"""SETATTR: a kernel request -> one SetAttr call (to the master, or through the open file when
this mount has it open, so the local size stays right), with the Linux setuid/setgid rules.

setuid/setgid clearing: libfuse negotiates FUSE_HANDLE_KILLPRIV, so the kernel leaves it to us.
We apply the Linux rules: a write or truncate by a non-root caller, and any chown of a non-directory,
clear setuid (and setgid when group-execute is set).
"""
from __future__ import annotations

from dataclasses import replace

from curvine_py.core.domain import Attr, FileType
from curvine_py.core.errors import InvalidArgument
from curvine_py.core.posix import SetAttrChanges, kill_suid_sgid, needs_kill
from curvine_py.fuse.context import MountContext


class AttrSetter:
    def __init__(self, ctx: MountContext) -> None:
        self.ctx = ctx

    async def setattr(self, ino: int, changes: SetAttrChanges, caller_uid: int) -> Attr:
        ctx = self.ctx
        ctx.writable()
        # The kernel's time fields travel as given; `*_now` never does (the kernel sends the time).
        request = SetAttrChanges(mode=None if changes.mode is None else changes.mode & 0o7777, uid=changes.uid,
                                 gid=changes.gid, size=changes.size, atime_ns=changes.atime_ns,
                                 mtime_ns=changes.mtime_ns, ctime_ns=changes.ctime_ns)
        if changes.size is not None:
            if changes.size < 0:
                raise InvalidArgument("negative size")
            ctx.versions.forget(ino)     # the kernel's cached pages may hold what is cut off
        chown = changes.uid is not None or changes.gid is not None
        truncate_by_user = changes.size is not None and caller_uid != 0
        if (chown or truncate_by_user) and changes.mode is None:
            current = await ctx.current_mode(ino)
            if current is not None and needs_kill(current[1]) and current[0] != FileType.DIRECTORY:
                request = replace(request, mode=kill_suid_sgid(current[1]))
        opened = ctx.handles.open_files.get(ino)
        if opened is None:
            attr: Attr = await ctx.icall(ctx.master.setattr, ino, request)
            return ctx.note(attr)
        if changes.mtime_ns is not None and opened.file.dirty:
            # An explicit mtime (cp -p, tar, rsync -t) must not be overwritten by a later commit.
            await ctx.commit(opened)
        attr = await ctx.data(opened.file.setattr, request)
        return ctx.note(attr)
