"""SETATTR: a kernel request -> one SetAttr call (to the master, or through the open file when
this mount has it open, so the local size stays right), with the Linux setuid/setgid rules.

setuid/setgid clearing: libfuse negotiates FUSE_HANDLE_KILLPRIV, so the kernel leaves it to us.
We apply the Linux rules: a write or truncate by a non-root caller, and any chown of a non-directory,
clear setuid (and setgid when group-execute is set).
"""
from __future__ import annotations

from curvine_py.core.errors import InvalidArgument
from curvine_py.core.posix import SetAttrChanges, kill_suid_sgid, needs_kill
from curvine_py.fuse.context import MountContext
from curvine_py.proto.curvine.v1 import common_pb2 as cpb
from curvine_py.proto.curvine.v1 import master_pb2 as pb


class AttrSetter:
    def __init__(self, ctx: MountContext) -> None:
        self.ctx = ctx

    async def setattr(self, ino: int, changes: SetAttrChanges, caller_uid: int) -> cpb.Attr:
        ctx = self.ctx
        ctx.writable()
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
            ctx.versions.forget(ino)     # the kernel's cached pages may hold what is cut off
        if changes.atime_ns is not None:
            request.atime_ns = changes.atime_ns
        if changes.mtime_ns is not None:
            request.mtime_ns = changes.mtime_ns
        if changes.ctime_ns is not None:
            request.ctime_ns = changes.ctime_ns
        chown = changes.uid is not None or changes.gid is not None
        truncate_by_user = changes.size is not None and caller_uid != 0
        if (chown or truncate_by_user) and changes.mode is None:
            current = await ctx.current_mode(ino)
            if current is not None and needs_kill(current[1]) and current[0] != cpb.DIRECTORY:
                request.mode = kill_suid_sgid(current[1])
        opened = ctx.handles.open_files.get(ino)
        if opened is None:
            attr: cpb.Attr = await ctx.icall(ctx.master.setattr, request)
            return ctx.note(attr)
        if changes.mtime_ns is not None and opened.file.dirty:
            # An explicit mtime (cp -p, tar, rsync -t) must not be overwritten by a later commit.
            await ctx.commit(opened)
        attr = await ctx.data(opened.file.setattr, request)
        return ctx.note(attr)
