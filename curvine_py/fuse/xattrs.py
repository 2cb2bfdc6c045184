"""Extended attributes through the mount: the master's calls, and a cache of
security.capability answers (the kernel asks for it before every write: its killpriv check).

POSIX ACLs are refused (docs/fuse.md "ACLs"): the mount does not negotiate FUSE_POSIX_ACL, so the
kernel would hand system.posix_acl_access/_default to us as plain xattrs, store them, and never
apply them: an access rule silently ignored. Setting or reading them answers EOPNOTSUPP, so
`setfacl` fails clearly and `getfacl` shows the mode; names stored before this rule are no longer
listed, and may still be removed.
"""
from __future__ import annotations

import time

from curvine_py.core.errors import NoData, NotSupported
from curvine_py.fuse.context import MountContext

CAPABILITY = "security.capability"
POSIX_ACLS = frozenset({"system.posix_acl_access", "system.posix_acl_default"})


def refuse_acl(name: str) -> None:
    if name in POSIX_ACLS:
        raise NotSupported(f"{name}: POSIX ACLs are not supported on this mount (only the mode applies)")


class Xattrs:
    def __init__(self, ctx: MountContext) -> None:
        self.ctx = ctx
        # Answers for security.capability are cached like attributes. ino -> (expiry, value or None).
        self._capability: dict[int, tuple[float, bytes | None]] = {}

    async def getxattr(self, ino: int, name: str) -> bytes:
        ctx = self.ctx
        refuse_acl(name)
        if name == CAPABILITY:
            found = self._capability.get(ino)
            if found is not None and found[0] > time.monotonic():
                if found[1] is None:
                    raise NoData(f"no xattr {name!r} on inode {ino}")
                return found[1]
            try:
                value: bytes = await ctx.icall(ctx.master.getxattr, ino, name)
            except NoData:
                self._remember_capability(ino, None)
                raise
            self._remember_capability(ino, value)
            return value
        return await ctx.icall(ctx.master.getxattr, ino, name)

    async def drop_capability(self, ino: int) -> None:
        """What the kernel's killpriv check does before a write it sends through the page cache:
        a file that has security.capability loses it (direct writes skip that check, handles.py)."""
        try:
            await self.getxattr(ino, CAPABILITY)
        except NoData:
            return
        await self.removexattr(ino, CAPABILITY)

    def _remember_capability(self, ino: int, value: bytes | None) -> None:
        if self.ctx.attrs.ttl > 0:
            if len(self._capability) > 100_000:
                self._capability.clear()
            self._capability[ino] = (time.monotonic() + self.ctx.attrs.ttl, value)

    async def setxattr(self, ino: int, name: str, value: bytes) -> None:
        ctx = self.ctx
        ctx.writable()
        refuse_acl(name)
        self._capability.pop(ino, None)
        ctx.attrs.drop(ino)
        await ctx.icall(ctx.master.setxattr, ino, name, value, 0)

    async def listxattr(self, ino: int) -> list[str]:
        names: list[str] = await self.ctx.icall(self.ctx.master.listxattr, ino)
        return [name for name in names if name not in POSIX_ACLS]

    async def removexattr(self, ino: int, name: str) -> None:
        ctx = self.ctx
        ctx.writable()
        self._capability.pop(ino, None)
        ctx.attrs.drop(ino)
        await ctx.icall(ctx.master.removexattr, ino, name)
