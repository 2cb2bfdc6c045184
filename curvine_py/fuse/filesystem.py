"""The mount's semantics, in master inode numbers and str names, as one object built from its
parts: the shared context (fuse/context.py: calls, attribute cache, commit), the session task
(leases and heartbeat), names (fuse/nodes.py), open files (fuse/handles.py), setattr rules
(fuse/setattrs.py), listings (fuse/readdir.py), xattrs (fuse/xattrs.py) and access times
(fuse/atime.py). Operations (the
pyfuse3 side) calls the parts directly; this class only wires them and answers statfs.
"""
from __future__ import annotations

from curvine_py.client import CurvineClient
from curvine_py.core.domain import Attr, StatFs
from curvine_py.fuse.atime import AtimeUpdates
from curvine_py.fuse.context import MountContext
from curvine_py.fuse.dataplane import TrioBlockReader
from curvine_py.fuse.handles import Files
from curvine_py.fuse.nodes import Nodes
from curvine_py.fuse.offload import Offload
from curvine_py.fuse.readdir import Directories
from curvine_py.fuse.session import SessionTask
from curvine_py.fuse.setattrs import AttrSetter
from curvine_py.fuse.xattrs import Xattrs


class Filesystem:
    def __init__(self, client: CurvineClient, offload: Offload, *, root: int, node: str,
                 read_only: bool = False, attr_ttl: float = 0.0, names_ttl: float = 0.0,
                 reader: TrioBlockReader | None = None, dir_leases: bool = True,
                 read_ahead: int = 0, atime: str = "relatime", cache_versions: bool = True,
                 fetch_ahead: int = 0, fetch_budget: int = 0, fetch_threads: int = 2,
                 fetch_local: bool = False) -> None:
        self.ctx = MountContext(client, offload, root=root, node=node, read_only=read_only,
                                attr_ttl=attr_ttl, names_ttl=names_ttl, dir_leases=dir_leases,
                                cache_versions=cache_versions)
        self.root = self.ctx.root
        self.session = SessionTask(self.ctx)
        self.nodes = Nodes(self.ctx, self.session)
        self.atime = AtimeUpdates(self.ctx, atime)
        self.files = Files(self.ctx, self.session, reader=reader, read_ahead=read_ahead, atime=self.atime,
                           fetch_ahead=fetch_ahead, fetch_budget=fetch_budget, fetch_threads=fetch_threads,
                           fetch_local=fetch_local)
        self.setter = AttrSetter(self.ctx)
        self.dirs = Directories(self.ctx, self.nodes)
        self.xattrs = Xattrs(self.ctx)
        self.files.drop_capability = self.xattrs.drop_capability

    async def getattr(self, ino: int) -> Attr:
        return await self.ctx.getattr(ino)

    def overlay(self, attr: Attr) -> tuple[int | None, int | None]:
        return self.ctx.overlay(attr)

    async def statfs(self) -> StatFs:
        # As seen from the mount's root: a --subdir mount of a quota'd directory shows its quota.
        reply: StatFs = await self.ctx.call(self.ctx.master.statfs, self.root)
        return reply
