"""Directory listings: opendir/releasedir and readdir in master pages, with stable offsets (an
offset maps to the name it follows, so a resumed listing continues after that name even if
entries came or went meanwhile)."""
from __future__ import annotations

import errno
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial

from curvine_py.core.domain import Attr, DirEntry, DirPage, InodeId
from curvine_py.core.errors import CurvineError, InvalidArgument
from curvine_py.fuse.context import MountContext
from curvine_py.fuse.nodes import Nodes
from curvine_py.fuse.state import DirHandle

READDIR_PAGE = 512           # entries fetched from the master per ReadDir call


@dataclass(frozen=True, slots=True)
class Listed:
    offset: int
    name: str
    attr: Attr
    dot: bool          # "." or "..": the kernel takes no reference for these


class Directories:
    def __init__(self, ctx: MountContext, nodes: Nodes) -> None:
        self.ctx = ctx
        self.nodes = nodes

    async def opendir(self, ino: InodeId) -> DirHandle:
        # Its attributes (usually cached: the kernel just looked it up), shown if it is removed
        # while open (context.directory_removed).
        attr = await self.ctx.getattr(ino)
        handle = DirHandle(self.ctx.handles.new_id(), ino, attr=attr)
        self.ctx.handles.dirs[handle.fh] = handle
        return handle

    def releasedir(self, fh: int) -> None:
        dirs = self.ctx.handles.dirs
        handle = dirs.pop(fh, None)
        if handle is not None and not any(h.ino == handle.ino for h in dirs.values()):
            self.ctx.removed_dirs.pop(handle.ino, None)

    async def readdir(self, fh: int, start: int) -> Iterator[Listed]:
        """Entries after offset `start` (one master page at most); the caller stops consuming
        when the kernel's buffer is full and the kernel asks again from the last offset it got."""
        handle = self.ctx.handles.dirs.get(fh)
        if handle is None:
            raise CurvineError(f"unknown directory handle {fh}", errno=errno.EBADF)
        if handle.ino in self.ctx.removed_dirs:
            return iter(())          # a removed directory lists nothing, not even . and ..
        dots: list[Listed] = []
        if start < 2:
            handle.page_after, handle.page_index = None, {}   # (re)started listing: fresh entries
            here = await self.ctx.getattr(handle.ino)
            if start < 1:
                dots.append(Listed(1, ".", here, True))
            parent = here if handle.ino == self.ctx.root else await self.nodes.lookup(handle.ino, "..")
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

    async def _page_after(self, handle: DirHandle, after: str) -> list[DirEntry]:
        """Master entries following `after`, from the cached page when it covers them (the kernel
        asks for ~25 entries at a time, the master pages 512)."""
        position = handle.page_index.get(after) if handle.page_after is not None else None
        if after == handle.page_after:
            position = -1
        if position is not None and (position + 1 < len(handle.page) or not handle.page_more):
            return handle.page[position + 1:]
        # eager: a listing shows every entry's attributes (readdirplus), built at once the cheaper way
        reply: DirPage = await self.ctx.icall(partial(self.ctx.master.readdir, eager=True), handle.ino, after,
                                              READDIR_PAGE)
        handle.page_after, handle.page, handle.page_more = after, list(reply.entries), reply.more
        handle.page_index = {entry.name: i for i, entry in enumerate(reply.entries)}
        return list(reply.entries)

    def _listing(self, handle: DirHandle, dots: list[Listed], entries: list[DirEntry]) -> Iterator[Listed]:
        yield from dots
        for entry in entries:
            self.ctx.note(entry.attr)
            offset = handle.next_offset
            handle.next_offset += 1
            handle.names[offset] = entry.name
            yield Listed(offset, entry.name, entry.attr, False)
